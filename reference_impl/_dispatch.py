"""``broadcast_cpu``: the UDS broadcaster when it is up, else the collective fallback.

Modelled on upstream's ``execBroadcastCpu`` (reference §6) with the PR #960
review findings fixed on purpose:

- ``root`` and ``mode`` are checked FIRST, before the path is chosen, so both
  paths raise the same exception type with the same message (the review found
  a root check that existed only on the UDS path and a mode silently ignored).
- An empty buffer list -- or a list whose buffers hold 0 bytes in total -- does
  nothing at all on either path: no collective, no sync, no device sync (the
  review's "packed_buffers empty guard").
- UDS path (broadcaster initialized): CPU buffers only, checked before any byte
  moves; nothing of the engine runs (no collective, no sync, no device sync).
- Collective path (broadcaster not initialized): ONE collective broadcast of all
  buffers on the TP group, then ``sync_communication``, then ``device_sync``,
  exactly once each per call (the review caught a fallback that lost its sync).
  How several buffers become one collective is the engine's job; see
  :mod:`._engines` (packed back to back into one staging tensor).
- The path is picked per call from ``broadcaster.is_initialized()``, as upstream
  does.  A broadcaster that broke mid-stream stays initialized, so the call
  raises ``BrokenBroadcasterError`` instead of quietly switching to the
  collective on this rank alone (which would desynchronise the group).

The bootstrap policy that decides whether the broadcaster comes up lives in
:mod:`._dispatch_bootstrap`; the conformance hook in :mod:`._dispatch_adapter`.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ._buffers import prepare_buffers
from ._dispatch_bootstrap import BootstrapDecision, DispatchPath, bootstrap
from ._engines import CollectiveEngine, EngineRecorder
from ._errors import ConfigurationError, NotInitializedError

__all__ = [
    "CpuBroadcastDispatcher",
    "DispatchPath",
    "ParallelMode",
    "UdsBroadcaster",
    "UnsupportedDeviceError",
    "UnsupportedModeError",
    "UnsupportedRootError",
]


class ParallelMode(enum.Enum):
    """Which process group a collective targets (upstream's ``ParallelMode``).

    ``broadcast_cpu`` supports only :attr:`TP`; the others exist so a caller
    passing them gets a clear error instead of silently using the TP group.
    """

    TP = "tp"
    DP = "dp"
    DP_AND_TP = "dp_and_tp"
    FFN_TP = "ffn_tp"
    EP = "ep"


class UnsupportedRootError(ConfigurationError):
    """``broadcast_cpu`` was asked for a root other than 0 (either path)."""


class UnsupportedModeError(ConfigurationError):
    """``broadcast_cpu`` was asked for a mode other than ``ParallelMode.TP`` (either path)."""


class UnsupportedDeviceError(ConfigurationError):
    """The UDS path got a tensor that is not on the CPU."""


class UdsBroadcaster(Protocol):
    """The slice of the broadcaster API the dispatcher uses (DESIGN.md)."""

    def initialize(self, rank: int, world_size: int, base_path: str, **kwargs: Any) -> None: ...

    def broadcast(self, buffers: Any, root: int = 0) -> None: ...

    def reset(self) -> None: ...

    def is_initialized(self) -> bool: ...


@dataclass(frozen=True)
class _Item:
    """One validated buffer: the object itself, its size, and whether it is a tensor."""

    buffer: Any
    nbytes: int
    is_tensor: bool


def _torch_tensor_type() -> type | None:
    """``torch.Tensor`` if torch is already imported, else None (never imports it)."""
    torch = sys.modules.get("torch")
    tensor_type = getattr(torch, "Tensor", None)
    return tensor_type if isinstance(tensor_type, type) else None


class CpuBroadcastDispatcher:
    """Route ``broadcast_cpu`` to the UDS broadcaster or the collective engine.

    :param broadcaster: a ``CpuTpBroadcaster`` (or any object with
        ``initialize/broadcast/reset/is_initialized``); its ``is_initialized()``
        at call time decides the path, as upstream's singleton check does.
    :param engine: the collective engine of the fallback path.
    :param recorder: optional :class:`EngineRecorder`; the engine is then
        wrapped so every engine call is recorded, and UDS calls are noted as
        ``("uds", nbytes)``.
    :param group: the TP process group for the collective (None = the
        engine's own group, else the default group).
    :param rank: this rank, used only to name it in error messages.
    :param owns_engine: :meth:`teardown` closes the engine (and so a group it
        created).  False for an engine lent by the caller (the conformance
        suite's): teardown then leaves it, and its group, alone.

    Not thread-safe, like the engine loop it models: one caller at a time.
    """

    def __init__(
        self,
        broadcaster: UdsBroadcaster,
        engine: CollectiveEngine,
        *,
        recorder: EngineRecorder | None = None,
        group: Any = None,
        rank: int | None = None,
        owns_engine: bool = True,
    ) -> None:
        self._broadcaster = broadcaster
        self._raw_engine = engine
        self._owns_engine = owns_engine
        self._recorder = recorder
        self._engine: CollectiveEngine = recorder.wrap(engine) if recorder else engine
        self._group = group if group is not None else getattr(engine, "group", None)
        self._rank = rank
        self._closed = False
        self.last_bootstrap: BootstrapDecision | None = None

    @property
    def broadcaster(self) -> UdsBroadcaster:
        return self._broadcaster

    def bootstrap(
        self,
        *,
        tp_rank: int,
        tp_size: int,
        local_world_size: int,
        base_path: str,
        config: Any = None,
    ) -> BootstrapDecision:
        """Bring this dispatcher's broadcaster up on every TP rank, or agree on the fallback.

        Runs the bootstrap policy (:func:`._dispatch_bootstrap.bootstrap`) on this
        dispatcher's broadcaster, process group and engine timeout, and keeps the
        decision as :attr:`last_bootstrap`.  Call on every rank of the TP group.
        """
        decision = bootstrap(
            self._broadcaster,
            group=self._group,
            group_timeout=getattr(self._raw_engine, "timeout", None),
            tp_rank=tp_rank,
            tp_size=tp_size,
            local_world_size=local_world_size,
            base_path=base_path,
            config=config,
        )
        self.last_bootstrap = decision
        return decision

    @property
    def engine(self) -> CollectiveEngine:
        """The real engine (not the recording wrapper)."""
        return self._raw_engine

    @property
    def recorder(self) -> EngineRecorder | None:
        return self._recorder

    @property
    def group(self) -> Any:
        return self._group

    @property
    def path(self) -> DispatchPath:
        """The path a non-empty call would take right now."""
        if self._broadcaster.is_initialized():
            return DispatchPath.UDS
        return DispatchPath.COLLECTIVE

    def broadcast_cpu(
        self,
        buffers: Sequence[Any],
        root: int = 0,
        mode: ParallelMode = ParallelMode.TP,
    ) -> DispatchPath:
        """Broadcast ``buffers`` from rank 0 to every TP rank, in place on the others.

        Returns the path taken (``SKIPPED`` when there was nothing to send).
        Check order: root, mode, the buffer list (each one a tensor or a
        writable buffer), then the empty guard, then the path.
        """
        self._check_root(root)
        self._check_mode(mode)
        items = self._validate(buffers)
        if self._closed:
            raise NotInitializedError(
                "broadcast_cpu after teardown(): build a new dispatcher with a new engine",
                rank=self._rank,
                phase="dispatch",
            )
        total = sum(item.nbytes for item in items)
        if total == 0:
            return DispatchPath.SKIPPED
        if self._broadcaster.is_initialized():
            self._broadcast_uds(items, total)
            return DispatchPath.UDS
        self._broadcast_collective(items)
        return DispatchPath.COLLECTIVE

    def teardown(self) -> None:
        """Reset the broadcaster and close the engine if we own it (destroying a group it created).

        Idempotent.  Afterwards ``broadcast_cpu`` raises; a later bootstrap uses a
        new dispatcher (and, for an owned engine, a new engine) and may reuse the
        (now reset) broadcaster.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self._broadcaster.reset()
        finally:
            close = getattr(self._raw_engine, "close", None) if self._owns_engine else None
            if callable(close):
                close()

    # -- checks shared by both paths ------------------------------------------------

    def _check_root(self, root: object) -> None:
        if isinstance(root, bool) or not isinstance(root, int) or root != 0:
            raise UnsupportedRootError(
                f"broadcast_cpu supports only root=0; got root={root!r}",
                rank=self._rank,
                phase="dispatch",
            )

    def _check_mode(self, mode: object) -> None:
        if mode is not ParallelMode.TP:
            shown = f"ParallelMode.{mode.name}" if isinstance(mode, ParallelMode) else repr(mode)
            raise UnsupportedModeError(
                f"broadcast_cpu supports only ParallelMode.TP; got mode={shown}",
                rank=self._rank,
                phase="dispatch",
            )

    def _validate(self, buffers: object) -> tuple[_Item, ...]:
        tensor_type = _torch_tensor_type()
        single = (bytes, bytearray, memoryview) + ((tensor_type,) if tensor_type else ())
        if isinstance(buffers, single) or hasattr(buffers, "__array_interface__"):
            raise ConfigurationError(
                f"broadcast_cpu takes a list of buffers, got a single {type(buffers).__name__}; "
                "wrap it in a list",
                rank=self._rank,
                phase="dispatch",
            )
        if not isinstance(buffers, Sequence):
            raise ConfigurationError(
                f"broadcast_cpu takes a list of buffers, got {type(buffers).__name__}",
                rank=self._rank,
                phase="dispatch",
            )
        items: list[_Item] = []
        for index, buffer in enumerate(buffers):
            if tensor_type is not None and isinstance(buffer, tensor_type):
                tensor: Any = buffer
                nbytes = int(tensor.numel()) * int(tensor.element_size())
                items.append(_Item(buffer, nbytes, True))
                continue
            try:
                view = memoryview(buffer)
            except TypeError:
                raise ConfigurationError(
                    f"buffer {index} ({type(buffer).__name__}) is neither a torch tensor nor "
                    "a buffer-protocol object",
                    rank=self._rank,
                    phase="dispatch",
                ) from None
            with view:
                if view.readonly:
                    raise ConfigurationError(
                        f"buffer {index} ({type(buffer).__name__}) is read-only; non-root "
                        "ranks receive into it, so every rank must pass writable buffers",
                        rank=self._rank,
                        phase="dispatch",
                    )
                items.append(_Item(buffer, view.nbytes, False))
        return tuple(items)

    # -- the two paths -----------------------------------------------------------------

    def _broadcast_uds(self, items: Sequence[_Item], total: int) -> None:
        for index, item in enumerate(items):
            device = getattr(item.buffer, "device", None) if item.is_tensor else None
            if device is not None and getattr(device, "type", "cpu") != "cpu":
                raise UnsupportedDeviceError(
                    f"broadcast_cpu over UDS requires CPU tensors; buffer {index} is on "
                    f"device {device} ({item.nbytes} bytes)",
                    rank=self._rank,
                    phase="dispatch",
                    bytes_total=total,
                )
        if self._recorder is not None:
            self._recorder.note(DispatchPath.UDS.value, total)
        self._broadcaster.broadcast([item.buffer for item in items], 0)

    def _broadcast_collective(self, items: Sequence[_Item]) -> None:
        """ONE collective for all buffers, then sync_communication, then device_sync.

        Tensors go to the engine as they are (they may live on the engine's
        device).  Every other buffer goes through the broadcaster's own
        flattening (:func:`._buffers.prepare_buffers`), as a flat byte view
        shared with torch, so the collective path takes exactly what the UDS
        path takes: any dtype numpy cannot hand to torch (bytes, unicode,
        structured, longdouble), negative strides, strided memoryviews, empty
        buffers next to full ones.  Non-contiguous ones are staged and copied
        back once the result is visible.
        """
        import torch

        # a placeholder keeps the views aligned with ``items`` (and error indices right)
        plain = prepare_buffers(
            [bytearray() if item.is_tensor else item.buffer for item in items], writable=True
        )
        try:
            tensors = [
                item.buffer if item.is_tensor else _byte_tensor(torch, view)
                for item, view in zip(items, plain.views, strict=True)
            ]
            self._engine.broadcast(tensors, 0, self._group)
            self._engine.sync_communication()
            self._engine.device_sync()
            del tensors
            plain.finish()
        finally:
            plain.release()


def _byte_tensor(torch: Any, view: memoryview) -> Any:
    """A uint8 tensor sharing ``view``'s memory (torch.frombuffer refuses 0 bytes)."""
    if not view.nbytes:
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer(view, dtype=torch.uint8)
