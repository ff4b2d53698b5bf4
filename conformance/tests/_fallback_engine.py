"""The collective engine the suite lends a dispatcher (capability ``dispatch``).

FALLBACK-2/3/4/12/13 are judged from what THIS engine saw, not from the dispatcher's own
record: a dispatcher that notes ``sync_communication`` without calling it cannot pass.
The engine is the real thing, not a mock: the suite creates a gloo process group (a
``FileStore`` in the rank's workdir, no TCP port) and the engine runs real collectives
on it.

What a dispatcher may use (DESIGN.md, adapter table, ``dispatch``):

* ``broadcast(tensors, root=0, group=None)``: starts ONE collective broadcast of all
  ``tensors`` (torch CPU tensors, any dtype, contiguous or not; several are packed back
  to back).  The result is NOT visible yet;
* ``sync_communication()``: waits for every started collective and only then writes the
  received bytes into the non-root ranks' tensors (so skipping it loses the data);
* ``device_sync()``: waits for device work (nothing on CPU, still observed);
* ``group``: the TP process group for the dispatcher's own collectives, e.g. a bootstrap
  consensus (``None``: the default group, which the suite created for this TP group);
* ``timeout``: the group's per-collective deadline in seconds; ``name``.

The engine belongs to the suite: a dispatcher must not destroy its group (there is no
``close``); ``teardown()`` drops the dispatcher's own state only.

Runs inside forked ranks only (torch is imported lazily, never in the suite process).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

COLLECTIVE: Final = "collective"
SYNC_COMMUNICATION: Final = "sync_communication"
DEVICE_SYNC: Final = "device_sync"


def open_group(rank: int, world_size: int, store_path: str, timeout: float) -> None:
    """Create this rank's default gloo process group over a ``FileStore`` at ``store_path``."""
    import torch.distributed as dist

    store = dist.FileStore(store_path, world_size)  # type: ignore[attr-defined]
    dist.init_process_group(
        backend="gloo",
        store=store,
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=timeout),
    )


def close_group() -> None:
    """Destroy the default process group (if it still exists)."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


@dataclass(frozen=True)
class _Pending:
    work: Any
    staging: Any
    targets: tuple[tuple[Any, int, int], ...]  # (tensor, offset, nbytes) to fill on sync


def _byte_view(tensor: Any) -> Any:
    import torch

    return tensor.reshape(-1).view(torch.uint8)


class SuiteEngine:
    """A real gloo engine that records every call made on it, in order.

    Events: ``("collective", nbytes, root)``, ``("sync_communication", completed)``
    (how many started collectives that call made visible), ``("device_sync",)``.  Each
    is recorded when the call is made, so a call that then raises is still seen.
    """

    name = "tpbcast-suite/gloo"

    def __init__(self, *, timeout: float, group: Any = None) -> None:
        self.group = group
        self.timeout = timeout
        self._events: list[tuple[Any, ...]] = []
        self._pending: list[_Pending] = []

    # -- what the suite reads -----------------------------------------------------

    def events(self) -> list[tuple[Any, ...]]:
        """Every call since the last :meth:`clear`, in order."""
        return list(self._events)

    def clear(self) -> None:
        self._events.clear()

    def group_collectives(self) -> int | None:
        """How many collectives have run on the group so far (None: torch cannot say).

        The group's own sequence number: it also counts collectives that bypassed this
        engine (a dispatcher calling ``torch.distributed`` directly).
        """
        import torch.distributed as dist

        try:
            group = self.group if self.group is not None else dist.group.WORLD
            return int(group._get_sequence_number_for_group())  # type: ignore[union-attr]
        except Exception:
            return None

    @property
    def pending(self) -> int:
        """Collectives started but not made visible by ``sync_communication``."""
        return len(self._pending)

    # -- what the dispatcher calls -------------------------------------------------

    def broadcast(self, tensors: Sequence[Any], root: int = 0, group: Any = None) -> None:
        """Start ONE broadcast of every tensor in ``tensors`` from group rank ``root``."""
        import torch
        import torch.distributed as dist

        tensors = list(tensors)
        nbytes = sum(
            int(t.numel()) * int(t.element_size()) for t in tensors if hasattr(t, "element_size")
        )
        self._events.append((COLLECTIVE, nbytes, root))
        if group is not None and group is not self.group and group is not dist.group.WORLD:
            raise ValueError(f"{self.name}: broadcast on a group that is not this TP group")
        for index, tensor in enumerate(tensors):
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(
                    f"{self.name}: tensor {index} is a {type(tensor).__name__}, not a tensor"
                )
            if tensor.device.type != "cpu":
                raise ValueError(
                    f"{self.name}: tensor {index} is on device {tensor.device}, not cpu"
                )
        is_root = dist.get_rank(self.group) == root
        staging = torch.empty(nbytes, dtype=torch.uint8)
        targets = []
        offset = 0
        for tensor in tensors:
            size = int(tensor.numel()) * int(tensor.element_size())
            if is_root:
                staging[offset : offset + size].copy_(_byte_view(tensor.contiguous()))
            else:
                targets.append((tensor, offset, size))
            offset += size
        src = root if self.group is None else dist.get_global_rank(self.group, root)
        work = dist.broadcast(staging, src=src, group=self.group, async_op=True)
        self._pending.append(_Pending(work, staging, tuple(targets)))

    def sync_communication(self) -> None:
        """Wait for every started broadcast, then fill the non-root tensors."""
        import torch

        pending, self._pending = self._pending, []
        self._events.append((SYNC_COMMUNICATION, len(pending)))
        for item in pending:
            item.work.wait()
            for tensor, offset, size in item.targets:
                chunk = item.staging[offset : offset + size]
                if tensor.is_contiguous():
                    _byte_view(tensor).copy_(chunk)
                else:
                    scratch = torch.empty(tensor.shape, dtype=tensor.dtype)
                    _byte_view(scratch).copy_(chunk)
                    tensor.copy_(scratch)

    def device_sync(self) -> None:
        """Nothing to wait for on a CPU group; observed all the same."""
        self._events.append((DEVICE_SYNC,))
