"""The collective-engine seam behind the fallback path of ``broadcast_cpu``.

When the UDS broadcaster is not initialized (TP spans nodes, TP=1, or bootstrap
was skipped or failed), upstream's ``execBroadcastCpu`` hands the buffers to the
engine's collective broadcast, then calls ``execSyncCommunication`` and then a
device sync.  This module is that engine, made small and observable:

- :class:`CollectiveEngine` is the protocol the dispatcher codes against
  (``broadcast``, ``sync_communication``, ``device_sync``, ``name``).
- :class:`TorchDistributedEngine` is the real implementation over
  ``torch.distributed``: gloo on CPU with a ``FileStore`` in a private directory
  (no TCP port), or NCCL plus ``torch.cuda.synchronize()`` when the device is CUDA.
- :class:`EngineRecorder` observes a real engine call by call, so tests can
  assert the order and count of collective / sync-communication / device-sync
  calls while the collective really runs over gloo.  Nothing in torch is mocked.

Several buffers, one collective.  ``broadcast`` always issues exactly ONE
collective per call, whatever the number of tensors: a single contiguous tensor
already on the communication device is broadcast in place (as bytes); anything
else (several tensors, a non-contiguous tensor, a CPU tensor on an NCCL engine)
is packed back to back, in list order and without padding, into one uint8
staging tensor that is broadcast once and unpacked on the non-roots.  This keeps
the fallback at one collective and one sync per call (the PR #960 review asked
not to split one broadcast into several) and makes the recorder's count mean
"calls", not "tensors".

Why ``broadcast`` is asynchronous.  The collective is started with
``async_op=True`` and its work handle is kept; :meth:`sync_communication` waits
on it and only then copies staged bytes back into the caller's tensors.  So on
this engine the sync call is load-bearing -- it is what makes the collective's
result visible -- exactly the contract the review said the fallback must not
lose.  On CPU/gloo :meth:`device_sync` has nothing to wait for (gloo completes on
the host) and is a documented no-op that is still recorded; on NCCL it is
``torch.cuda.synchronize(device)``, the analogue of upstream's
``cudaSyncAndCheck``.

torch is imported lazily: importing this module never imports torch.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, Protocol, runtime_checkable

from ._errors import BroadcastError, ConfigurationError

__all__ = [
    "CollectiveEngine",
    "CollectiveError",
    "EngineRecorder",
    "RecordingEngine",
    "TorchDistributedEngine",
    "all_gather_status",
]

#: Default deadline for every gloo/NCCL operation of a group we create.  Short on
#: purpose: a bug must fail in seconds instead of hanging a test run.
DEFAULT_GROUP_TIMEOUT: Final = 30.0

#: Event kinds recorded by :class:`EngineRecorder`, in the order a fallback call
#: must produce them.
COLLECTIVE: Final = "collective"
SYNC_COMMUNICATION: Final = "sync_communication"
DEVICE_SYNC: Final = "device_sync"
ENGINE_EVENT_KINDS: Final = frozenset({COLLECTIVE, SYNC_COMMUNICATION, DEVICE_SYNC})

Event = tuple[Any, ...]


class CollectiveError(BroadcastError, RuntimeError):
    """A collective (or its completion wait) failed inside the engine."""


@runtime_checkable
class CollectiveEngine(Protocol):
    """What the fallback path of the dispatcher needs from a collective engine.

    ``broadcast`` may return before the data is visible; ``sync_communication``
    is what makes the results of every broadcast since the last sync visible;
    ``device_sync`` waits for all device work (a no-op on a CPU-only engine).
    """

    @property
    def name(self) -> str:
        """Short label for reports, e.g. ``"torch.distributed/gloo"``."""
        ...

    def broadcast(self, tensors: Sequence[Any], root: int, group: Any) -> None:
        """Start ONE collective broadcast of ``tensors`` from group-local ``root``."""
        ...

    def sync_communication(self) -> None:
        """Make the results of the pending collectives visible to the caller."""
        ...

    def device_sync(self) -> None:
        """Wait for all outstanding device work (cudaDeviceSynchronize analogue)."""
        ...


def tensor_nbytes(tensor: Any) -> int:
    """Bytes a tensor carries (numel x element size), without touching its data."""
    return int(tensor.numel()) * int(tensor.element_size())


def _byte_view(tensor: Any) -> Any:
    """A flat uint8 view of a contiguous tensor (shares its storage)."""
    import torch

    return tensor.reshape(-1).view(torch.uint8)


@dataclass(frozen=True)
class _Unpack:
    """One non-root tensor to refill from the staging buffer after the wait."""

    tensor: Any
    offset: int
    nbytes: int


@dataclass(frozen=True)
class _Pending:
    """A started collective whose result is not yet visible to the caller."""

    work: Any
    staging: Any
    unpack: tuple[_Unpack, ...]
    nbytes: int
    started: float


class TorchDistributedEngine:
    """A :class:`CollectiveEngine` over ``torch.distributed`` (gloo or NCCL).

    Build one with :meth:`create` (it initializes the default process group from
    a ``FileStore`` and owns it: :meth:`close` destroys it) or wrap an existing
    group with the constructor (``owns_group=False``: :meth:`close` leaves it).

    The backend follows the device: ``"cpu"`` -> gloo, ``"cuda"``/``"cuda:N"``
    -> NCCL.  The NCCL branch is written and type-checked but cannot run on a
    machine without a GPU; its test is skipped there with that reason.
    """

    def __init__(
        self,
        *,
        device: str = "cpu",
        group: Any = None,
        owns_group: bool = False,
        timeout: float | None = None,
    ) -> None:
        self._device = _normalise_device(device)
        self._backend = "nccl" if self._device.startswith("cuda") else "gloo"
        self._group = group
        self._owns_group = owns_group
        self._timeout = timeout
        self._pending: list[_Pending] = []
        self._closed = False

    @classmethod
    def create(
        cls,
        rank: int,
        world_size: int,
        store_dir: str,
        *,
        device: str = "cpu",
        store_name: str = "pg.store",
        timeout: float = DEFAULT_GROUP_TIMEOUT,
    ) -> TorchDistributedEngine:
        """Initialize the default process group over a ``FileStore`` and own it.

        :param store_dir: an existing private directory shared by the ranks;
            the store file is ``<store_dir>/<store_name>``.  torch deletes the
            file when the last rank releases it, but a rank that re-creates a
            group immediately after a teardown may still race a slower rank
            holding the old file: use a fresh ``store_name`` per incarnation.
        :param timeout: seconds, applied by torch to every collective of the
            group (so a lost peer fails the call instead of hanging it).
        """
        import torch.distributed as dist

        if world_size < 1 or not 0 <= rank < world_size:
            raise ConfigurationError(
                f"invalid process group rank {rank} for world_size {world_size}",
                rank=rank,
                phase="engine-create",
            )
        if not os.path.isdir(store_dir):
            raise ConfigurationError(
                "the FileStore directory does not exist",
                rank=rank,
                phase="engine-create",
                path=store_dir,
            )
        if dist.is_initialized():
            raise ConfigurationError(
                "a default process group already exists in this process; wrap it with "
                "TorchDistributedEngine(group=...) instead of create()",
                rank=rank,
                phase="engine-create",
            )
        engine = cls(device=device, owns_group=True, timeout=timeout)
        store = dist.FileStore(  # type: ignore[attr-defined]  # re-exported from torch._C
            os.path.join(store_dir, store_name), world_size
        )
        kwargs: dict[str, Any] = {}
        if engine._backend == "nccl":  # pragma: no cover - needs a GPU
            import torch

            kwargs["device_id"] = torch.device(engine._device)
        dist.init_process_group(
            backend=engine._backend,
            store=store,
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=timeout),
            **kwargs,
        )
        return engine

    # -- descriptive properties -------------------------------------------------

    @property
    def name(self) -> str:
        return f"torch.distributed/{self._backend}"

    @property
    def backend(self) -> str:
        return self._backend

    @property
    def device(self) -> str:
        return self._device

    @property
    def group(self) -> Any:
        """The group collectives default to (None = the default/WORLD group)."""
        return self._group

    @property
    def timeout(self) -> float | None:
        """Per-collective deadline in seconds, when this engine created the group."""
        return self._timeout

    @property
    def owns_group(self) -> bool:
        return self._owns_group and not self._closed

    @property
    def pending(self) -> int:
        """Collectives started but not yet made visible by :meth:`sync_communication`."""
        return len(self._pending)

    # -- CollectiveEngine ---------------------------------------------------------

    def broadcast(self, tensors: Sequence[Any], root: int, group: Any) -> None:
        """Start one broadcast of all ``tensors`` (see the module docstring)."""
        import torch
        import torch.distributed as dist

        self._check_open()
        my_rank = dist.get_rank(group)
        is_root = my_rank == root
        total = 0
        for index, tensor in enumerate(tensors):
            if not isinstance(tensor, torch.Tensor):
                raise ConfigurationError(
                    f"tensor {index} is a {type(tensor).__name__}, not a torch.Tensor",
                    rank=my_rank,
                    phase="collective",
                )
            if tensor.device.type not in ("cpu", torch.device(self._device).type):
                raise ConfigurationError(
                    f"{self.name} cannot broadcast tensor {index} on device "
                    f"{tensor.device} (expected cpu or {self._device})",
                    rank=my_rank,
                    phase="collective",
                )
            total += tensor_nbytes(tensor)
        live = [t for t in tensors if t.numel() > 0]
        src = root if group is None else dist.get_global_rank(group, root)
        staging, unpack = self._stage(live, is_root)
        started = time.monotonic()
        try:
            work = dist.broadcast(staging, src=src, group=group, async_op=True)
        except Exception as exc:
            raise CollectiveError(
                f"{self.name} broadcast could not start: {type(exc).__name__}: {exc}",
                rank=my_rank,
                peer=root,
                phase="collective",
                bytes_done=0,
                bytes_total=total,
            ) from exc
        self._pending.append(_Pending(work, staging, unpack, total, started))

    def sync_communication(self) -> None:
        """Wait for every pending collective, then unpack staged bytes.

        gloo: waiting on the work handle is what completes the host-side
        transfer, so this is where the data becomes visible.  NCCL: the wait
        orders the current stream after the NCCL stream and the stream is then
        synchronized, so the staged bytes are on the device before the copy back.
        """
        import torch.distributed as dist

        pending, self._pending = self._pending, []
        for item in pending:
            try:
                item.work.wait()
            except Exception as exc:
                raise CollectiveError(
                    f"{self.name} broadcast did not complete: {type(exc).__name__}: {exc}",
                    rank=dist.get_rank(self._group) if dist.is_initialized() else None,
                    phase="sync_communication",
                    bytes_done=0,
                    bytes_total=item.nbytes,
                    elapsed=time.monotonic() - item.started,
                ) from exc
            if self._backend == "nccl":  # pragma: no cover - needs a GPU
                import torch

                torch.cuda.current_stream(torch.device(self._device)).synchronize()
            for entry in item.unpack:
                _unpack_into(entry, item.staging)

    def device_sync(self) -> None:
        """NCCL: ``torch.cuda.synchronize``.  gloo on CPU: nothing to wait for.

        The CPU no-op is deliberate and still observable through the recorder, so
        the fallback's three-step contract is asserted on this machine too.
        """
        if self._backend == "nccl":  # pragma: no cover - needs a GPU
            import torch

            torch.cuda.synchronize(torch.device(self._device))

    # -- consensus and lifetime -----------------------------------------------------

    def close(self) -> None:
        """Drop pending work and destroy the process group if this engine created it.

        Idempotent.  A group passed in by the caller is left alone.
        """
        if self._closed:
            return
        self._closed = True
        self._pending.clear()
        if self._owns_group:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()

    # -- internals ------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise CollectiveError(f"{self.name} engine is closed", phase="collective")

    def _stage(self, live: Sequence[Any], is_root: bool) -> tuple[Any, tuple[_Unpack, ...]]:
        """Return the one tensor to broadcast and what to unpack afterwards."""
        import torch

        comm_device = torch.device(self._device)
        if len(live) == 1:
            only = live[0]
            if only.is_contiguous() and only.device == comm_device:
                return _byte_view(only), ()
        total = sum(tensor_nbytes(t) for t in live)
        staging = torch.empty(total, dtype=torch.uint8, device=comm_device)
        unpack: list[_Unpack] = []
        offset = 0
        for tensor in live:
            size = tensor_nbytes(tensor)
            if is_root:
                staging[offset : offset + size].copy_(_byte_view(tensor.contiguous()))
            else:
                unpack.append(_Unpack(tensor, offset, size))
            offset += size
        return staging, tuple(unpack)


def _unpack_into(entry: _Unpack, staging: Any) -> None:
    """Copy one tensor's bytes out of the staging buffer, into the caller's tensor."""
    import torch

    tensor = entry.tensor
    chunk = staging[entry.offset : entry.offset + entry.nbytes]
    if tensor.is_contiguous():
        _byte_view(tensor).copy_(chunk)
        return
    scratch = torch.empty(tensor.shape, dtype=tensor.dtype, device=staging.device)
    _byte_view(scratch).copy_(chunk)
    tensor.copy_(scratch)


def _normalise_device(device: str) -> str:
    text = str(device).strip().lower()
    if text in {"cpu", "cuda"} or (text.startswith("cuda:") and text[5:].isdigit()):
        return text
    raise ConfigurationError(
        f"unsupported engine device {device!r}: use 'cpu' (gloo) or 'cuda[:N]' (NCCL)",
        phase="engine-create",
    )


def all_gather_status(
    status: int, detail: object, group: Any = None
) -> tuple[tuple[int, Any], ...]:
    """Gather ``(status, detail)`` from every rank of ``group``, index = group rank.

    The status ints travel in one ``all_gather`` of an int64 tensor over the real
    group; the (picklable) details travel (``all_gather_object``) only when some rank
    reported a non-zero status, so the common all-OK case costs one collective.
    Every rank takes the same branch because every rank sees the same statuses.
    On an NCCL group the tensor lives on the current CUDA device.
    """
    import torch
    import torch.distributed as dist

    size = dist.get_world_size(group)
    device = torch.device("cpu")
    if dist.get_backend(group) == "nccl":  # pragma: no cover - needs a GPU
        device = torch.device("cuda", torch.cuda.current_device())
    mine = torch.tensor([status], dtype=torch.int64, device=device)
    slots = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(size)]
    dist.all_gather(slots, mine, group=group)
    statuses = [int(slot.item()) for slot in slots]
    if not any(statuses):
        return tuple((code, None) for code in statuses)
    details: list[Any] = [None] * size
    dist.all_gather_object(details, detail, group=group)
    return tuple(zip(statuses, details, strict=True))


class EngineRecorder:
    """Records, in order, each call made through engines it wrapped.

    Events: ``("collective", nbytes)``, ``("sync_communication",)``,
    ``("device_sync",)``; the dispatcher adds ``("uds", nbytes)`` when it takes
    the UDS path.  The event is recorded when the call is made (before the real
    engine runs), so a call that then raises is still visible.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[Event] = []

    @property
    def events(self) -> tuple[Event, ...]:
        with self._lock:
            return tuple(self._events)

    def engine_calls(self) -> tuple[Event, ...]:
        """Only the collective / sync_communication / device_sync events."""
        return tuple(event for event in self.events if event[0] in ENGINE_EVENT_KINDS)

    def note(self, *event: Any) -> None:
        """Append one event (used by the engine wrapper and the dispatcher)."""
        with self._lock:
            self._events.append(tuple(event))

    def clear(self) -> None:
        with self._lock:
            self._events.clear()

    def wrap(self, engine: CollectiveEngine) -> RecordingEngine:
        """Return ``engine`` observed by this recorder (idempotent for a wrapper)."""
        if isinstance(engine, RecordingEngine) and engine.recorder is self:
            return engine
        return RecordingEngine(engine, self)


class RecordingEngine:
    """A :class:`CollectiveEngine` that forwards to a real engine and records each call."""

    def __init__(self, inner: CollectiveEngine, recorder: EngineRecorder) -> None:
        self._inner = inner
        self._recorder = recorder

    @property
    def inner(self) -> CollectiveEngine:
        return self._inner

    @property
    def recorder(self) -> EngineRecorder:
        return self._recorder

    @property
    def name(self) -> str:
        return self._inner.name

    def broadcast(self, tensors: Sequence[Any], root: int, group: Any) -> None:
        nbytes = sum(tensor_nbytes(t) for t in tensors if hasattr(t, "element_size"))
        self._recorder.note(COLLECTIVE, nbytes)
        self._inner.broadcast(tensors, root, group)

    def sync_communication(self) -> None:
        self._recorder.note(SYNC_COMMUNICATION)
        self._inner.sync_communication()

    def device_sync(self) -> None:
        self._recorder.note(DEVICE_SYNC)
        self._inner.device_sync()

    def __getattr__(self, attribute: str) -> Any:
        # Everything else (group, close, timeout, ...) is the real engine's.
        return getattr(self._inner, attribute)
