"""The adapter contract (DESIGN.md) over vLLM's shared-memory broadcaster.

``vllm.distributed.device_communicators.shm_broadcast.MessageQueue`` is what vLLM's
``GroupCoordinator`` uses to broadcast Python objects from TP rank 0 to the other ranks of
a node every step.  This adapter only marshals; it sets the queue up as vLLM's
``parallel_state`` does (``MessageQueue.create_from_process_group(cpu_group, 1 << 22, 6)``:
writer = rank 0, every other rank a local reader, 4 MiB slots, 6 of them) with one
difference: the queue handle travels through a file next to the base path instead of a
``torch.distributed`` broadcast, because the adapter contract has no process group.

- ``initialize``: rank 0 creates the queue, writes its handle (``_handle``: JSON, 0600,
  tmp + ``os.replace``), then ``wait_until_ready()`` (which returns once every reader has
  subscribed, so rank 0 then removes the file); the other ranks poll for the file
  (the ``connect`` deadline), ``MessageQueue.create_from_handle(handle, rank)``, then
  ``wait_until_ready()``.  World size 1 creates no queue (parallel_state neither).
- ``broadcast``: rank 0 ``enqueue(bytes(buffer))`` (a torch tensor as itself, vLLM's own
  tensor path; a list of buffers as one list, one message), the others ``dequeue()`` and
  copy into the caller's buffer in place; a length mismatch raises naming both sizes.
- ``reset``: ``shutdown()`` (vLLM 0.33's only teardown call: it wakes an idle reader),
  then the reference is dropped as ``GroupCoordinator.destroy`` does
  (``self.mq_broadcaster = None``; vLLM's finalizer closes the zmq sockets, the ring's
  ``__del__`` unlinks the segment on the writer).  A failed ``initialize`` removes the
  handle file it wrote.

Whatever the contract passes, vLLM is asked where its API has a place for it, and its own
answer (an assertion, an error, a wait) is what the suite judges: a rank and a world size
go to ``MessageQueue`` (``n_reader = world_size - 1``) or ``create_from_handle(handle,
rank)`` unchecked, as ``create_from_process_group`` passes them; a second ``initialize``
builds the queue again (vLLM has no re-initialize; the new queue replaces the old, which
is torn down as ``reset`` does); a ``root`` other than 0, and any broadcast at world size
1, first goes through vLLM's own ``GroupCoordinator.broadcast_object`` (its ``src``
assertions and its world-size-1 bypass, on a coordinator holding this queue).

Only where vLLM has no place at all does the adapter answer, raising ``EngineNotAsked``
with the surface vLLM lacks (never PASS): ``lifecycle`` (``is_initialized``, and a broadcast
before ``initialize`` or after ``reset``: ``GroupCoordinator.destroy`` drops the queue, no
object is left to ask; the clauses about that state, BCAST-2, RESET-4 and INIT-12, FAIL),
``receive_buffers`` (a read-only or non-contiguous peer buffer, an object of another size
or kind than the buffer: vLLM delivers objects; BCAST-11 FAILs), ``process_group`` (a base
path that cannot name the handle file, non-int ranks, a handle file of another world size:
the handle file stands in for vLLM's process group), ``deadline_settings`` (a negative
deadline).

Deadlines (capability ``deadlines``), exactly as mapped:

- ``io`` -> the ``timeout`` argument of ``MessageQueue.enqueue`` / ``dequeue`` (vLLM
  applies it per wait: the ring-slot wait, then again to the overflow socket's recv).
  Default None: vLLM's default, wait forever.
- ``connect`` -> the readers' wait for the handle file (the adapter's stand-in for the
  process-group collective that carries the handle in vLLM).  Default 120 s.
- ``init`` -> accepted and NOT enforced: ``MessageQueue.wait_until_ready`` takes no
  timeout (a blocking zmq ``recv``), and nothing is faked around it.
  ``default_deadlines()`` says so (``init: None``).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import math
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any, Final

from tpbcast.harness.adapter import EngineNotAsked

from ._handle import (
    HandleFile,
    HandleFileError,
    handle_path,
    remove_if_ours,
    wait_for_handle,
    write_handle,
)

__all__ = [
    "CAPABILITIES",
    "MAX_CHUNKS",
    "MAX_CHUNK_BYTES",
    "NAME",
    "TRANSPORT",
    "VllmBroadcaster",
    "VllmMissingError",
    "make",
]

NAME: Final = "vllm MessageQueue"
TRANSPORT: Final = "shm"
CAPABILITIES: Final = frozenset({"deadlines", "multi_buffer", "tensors"})
# vllm/distributed/parallel_state.py (0.33.0): create_from_process_group(cpu_group, 1 << 22, 6)
# vLLM binds its zmq IPC sockets under VLLM_RPC_BASE_PATH (default: tempfile.gettempdir());
# the harness points it, with TMPDIR, at each rank's workdir (removed with the group).
TEMP_DIR_VARIABLES: Final = ("VLLM_RPC_BASE_PATH",)
MAX_CHUNK_BYTES: Final = 1 << 22
MAX_CHUNKS: Final = 6
DEFAULT_CONNECT: Final = 120.0
_MODULE: Final = "vllm.distributed.device_communicators.shm_broadcast"
_COORDINATOR_MODULE: Final = "vllm.distributed.parallel_state"  # imported by _MODULE
_USED_NONCES: set[str] = set()  # handles this process already joined (see _handle)
_ENGINE: Final = "vLLM's MessageQueue"


class VllmMissingError(ImportError):
    """vLLM (or one of the packages its shm_broadcast import needs) is not installed."""


def _shm_broadcast() -> Any:
    try:
        return importlib.import_module(_MODULE)
    except ImportError as exc:
        raise VllmMissingError(
            f"the vLLM adapter needs vLLM: importing {_MODULE} failed ({exc}). Install "
            "it without its dependencies plus the four packages its import needs, torch "
            "pinned to the CPU build: pip install -c constraints/torch.txt torch psutil "
            "pyzmq urllib3 regex && pip install --no-deps vllm==0.33.0 (or run "
            "`nox -s ecosystem`, which does exactly that)"
        ) from exc


def _vllm_version() -> str:
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _not_asked(check: str, detail: str, surface: str) -> EngineNotAsked:
    return EngineNotAsked(check, detail, _ENGINE, surface)


def _coordinator(world_size: int, queue: Any) -> Any:
    """A vLLM ``GroupCoordinator`` as far as ``broadcast_object`` reads it (its world size
    and its queue), built as vLLM's own ``create_from_handle`` builds a queue (``__new__``
    without ``__init__``): no process group exists to build one with."""
    coordinator_class = importlib.import_module(_COORDINATOR_MODULE).GroupCoordinator
    coordinator = coordinator_class.__new__(coordinator_class)
    coordinator.world_size = world_size
    coordinator.mq_broadcaster = queue
    return coordinator


def _seconds(name: str, value: float) -> float | None:
    if value == math.inf:
        return None
    if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise _not_asked(
            "deadline_range",
            f"{name} deadline must be >= 0 seconds or math.inf, got {value!r}",
            "deadline_settings",
        )
    return float(value)


def _torch_tensor(obj: object) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _payload(buffer: Any) -> Any:
    """What the root enqueues for one buffer: the bytes, or the tensor itself."""
    if _torch_tensor(buffer):
        return buffer.detach()
    return memoryview(buffer).tobytes()


def _writable_view(rank: int, index: int, buffer: Any) -> memoryview | None:
    """A peer's buffer as a flat writable byte view (None: a tensor, filled with copy_)."""
    if _torch_tensor(buffer):
        return None
    view = memoryview(buffer)
    if view.readonly:
        raise _not_asked(
            "read_only_buffer",
            f"rank {rank}: a peer receives in place: buffer {index} is a read-only "
            f"{type(buffer).__name__}",
            "receive_buffers",
        )
    if not view.c_contiguous:
        raise _not_asked(
            "non_contiguous_buffer",
            f"rank {rank}: buffer {index} is not C-contiguous",
            "receive_buffers",
        )
    return view.cast("B") if view.ndim != 1 or view.format != "B" else view


def _fill(rank: int, index: int, target: Any, view: memoryview | None, got: Any) -> None:
    if view is None:  # a torch tensor
        if not _torch_tensor(got):
            raise _not_asked(
                "buffer_kind",
                f"rank {rank}: buffer {index} is a tensor but the root sent a {type(got).__name__}",
                "receive_buffers",
            )
        want = target.numel() * target.element_size()
        have = got.numel() * got.element_size()
        if want != have or got.dtype != target.dtype:
            raise _not_asked(
                "size_mismatch",
                f"rank {rank}: buffer {index} size mismatch: the root sent {have} bytes "
                f"({got.dtype}, shape {tuple(got.shape)}), this rank's buffer has {want} "
                f"bytes ({target.dtype}, shape {tuple(target.shape)})",
                "receive_buffers",
            )
        target.copy_(got.reshape(target.shape))
        return
    if _torch_tensor(got):
        raise _not_asked(
            "buffer_kind",
            f"rank {rank}: buffer {index} is not a tensor but the root sent one",
            "receive_buffers",
        )
    data = memoryview(got).cast("B")
    if data.nbytes != view.nbytes:
        raise _not_asked(
            "size_mismatch",
            f"rank {rank}: buffer {index} size mismatch: the root sent {data.nbytes} bytes, "
            f"this rank's buffer has {view.nbytes} bytes",
            "receive_buffers",
        )
    view[:] = data


def _deliver(
    rank: int, buffers: list[Any], views: list[memoryview | None], many: bool, got: Any
) -> None:
    """Copy what vLLM delivered into the caller's buffers (vLLM delivers objects)."""
    received = list(got) if many and isinstance(got, list) else [got]
    if many != isinstance(got, list) or len(received) != len(buffers):
        sent = f"{len(got)} buffers" if isinstance(got, list) else "one buffer"
        raise _not_asked(
            "buffer_count",
            f"rank {rank}: the root sent {sent}, this rank has {len(buffers)}",
            "receive_buffers",
        )
    for i, (target, view, item) in enumerate(zip(buffers, views, received, strict=True)):
        _fill(rank, i, target, view, item)


class VllmBroadcaster:
    """One rank's side of a vLLM ``MessageQueue`` (writer on rank 0, reader elsewhere)."""

    name = NAME
    transport = TRANSPORT
    capabilities = CAPABILITIES
    # The writer completes one enqueue per free ring slot without any reader reading; an
    # overflow message (>= 4 MiB) takes a slot too (its bytes wait in zmq).
    buffered_broadcasts = MAX_CHUNKS

    def __init__(self) -> None:
        self.version = _vllm_version()
        self._deadlines: dict[str, float | None] = {
            "connect": DEFAULT_CONNECT,
            "init": None,
            "io": None,
        }
        self._config: tuple[int, int, str] | None = None
        self._queue: Any = None

    # ----------------------------------------------------------------- deadlines

    def set_deadlines(
        self, *, connect: float | None = None, init: float | None = None, io: float | None = None
    ) -> None:
        """Seconds; None keeps a value, ``math.inf`` waits forever.  ``init`` is stored but
        cannot be enforced: vLLM's ``wait_until_ready`` has no timeout (module docstring)."""
        for key, value in (("connect", connect), ("init", init), ("io", io)):
            if value is not None:
                self._deadlines[key] = _seconds(key, value)

    @staticmethod
    def default_deadlines() -> Mapping[str, float | None]:
        """connect: the handle-file wait; init: none in vLLM; io: vLLM's default, none."""
        return {"connect": DEFAULT_CONNECT, "init": None, "io": None}

    # ----------------------------------------------------------------- lifecycle

    def initialize(self, rank: int, world_size: int, base_path: str) -> None:
        """Build this rank's side of the queue, as ``create_from_process_group`` does.

        Nothing is range-checked here: rank 0 builds the writer for ``world_size - 1``
        readers, any other rank waits for the handle and joins with its rank, and vLLM
        answers whatever it is given.  Called again, it builds again (vLLM has no
        re-initialize); once the new queue is ready the old one is torn down.
        """
        if not isinstance(base_path, str) or not base_path or "\0" in base_path:
            # The base path names the adapter's handle file, its stand-in for the process
            # group that carries the handle in vLLM: vLLM itself has no base path.
            raise _not_asked(
                "base_path",
                f"base_path {base_path!r} cannot name the adapter's handle file",
                "process_group",
            )
        if not isinstance(rank, int) or not isinstance(world_size, int):
            raise _not_asked(
                "int_args",
                f"rank {rank!r} and world_size {world_size!r}: a process group's ranks are "
                "ints; the adapter cannot pass these on",
                "process_group",
            )
        config = (rank, world_size, base_path)
        queue = None if world_size == 1 else self._build(rank, world_size, base_path)
        old, self._queue, self._config = self._queue, queue, config
        if old is not None:  # a re-initialize: the queue it replaces goes as in reset
            self._teardown(old)

    def _build(self, rank: int, world_size: int, base_path: str) -> Any:
        mq_module = _shm_broadcast()
        path = handle_path(base_path)
        queue: Any = None
        written: tuple[str, HandleFile] | None = None
        try:
            if rank == 0:
                readers = list(range(1, world_size))
                queue = mq_module.MessageQueue(
                    n_reader=world_size - 1,
                    n_local_reader=world_size - 1,
                    local_reader_ranks=readers,
                    max_chunk_bytes=MAX_CHUNK_BYTES,
                    max_chunks=MAX_CHUNKS,
                )
                written = (path, write_handle(path, world_size, asdict(queue.export_handle())))
            else:
                connect = self._deadlines["connect"]
                try:
                    entry = wait_for_handle(
                        path,
                        rank=rank,
                        world_size=world_size,
                        deadline=math.inf if connect is None else connect,
                        used=_USED_NONCES,
                    )
                except HandleFileError as exc:  # the adapter's own rendezvous refused it
                    raise _not_asked("handle_file", str(exc), "process_group") from exc
                handle = mq_module.Handle(**entry.handle)
                queue = mq_module.MessageQueue.create_from_handle(handle, rank)
            queue.wait_until_ready()
        except BaseException:
            if queue is not None:
                queue.shutdown()
            del queue
            if written is not None:
                remove_if_ours(*written)
            raise
        # Every reader has read the handle once wait_until_ready returns on the writer (it
        # waits for each reader's subscription): the file has done its job.
        if written is not None:
            remove_if_ours(*written)
        return queue

    def broadcast(self, buffer: Any, root: int = 0) -> None:
        """Rank 0 enqueues, the others dequeue into ``buffer`` in place.

        ``buffer``: a bytes-like object (bytearray, memoryview, numpy array; read-only
        bytes on rank 0 only), a torch CPU tensor, or a list/tuple of them sent as one
        message.  A ``root`` other than 0 and any broadcast at world size 1 are vLLM's
        ``GroupCoordinator.broadcast_object``'s to answer (its ``src`` assertions, its
        bypass for a group of one).
        """
        if self._config is None:
            raise _not_asked(
                "not_initialized",
                "broadcast before initialize or after reset: there is no queue",
                "lifecycle",
            )
        rank, world_size, _ = self._config
        many = isinstance(buffer, list | tuple)
        buffers = list(buffer) if many else [buffer]
        if world_size == 1 or root != 0:
            self._through_coordinator(rank, world_size, buffers, many, root)
            return
        io = self._deadlines["io"]
        if rank == 0:
            payloads = [_payload(b) for b in buffers]
            started = time.monotonic()
            try:
                self._queue.enqueue(payloads if many else payloads[0], timeout=io)
            except TimeoutError as exc:
                raise TimeoutError(
                    f"rank 0: vLLM MessageQueue.enqueue timed out (io deadline {io} s, "
                    f"{time.monotonic() - started:.3f} s elapsed)"
                ) from exc
            return
        views = [_writable_view(rank, i, b) for i, b in enumerate(buffers)]
        started = time.monotonic()
        try:
            got = self._queue.dequeue(timeout=io)
        except TimeoutError as exc:
            raise TimeoutError(
                f"rank {rank}: vLLM MessageQueue.dequeue timed out (io deadline {io} s, "
                f"{time.monotonic() - started:.3f} s elapsed)"
            ) from exc
        _deliver(rank, buffers, views, many, got)

    def _through_coordinator(
        self, rank: int, world_size: int, buffers: list[Any], many: bool, root: int
    ) -> None:
        """``GroupCoordinator.broadcast_object(obj, src=root)`` over this queue, exactly as
        vLLM calls it: the root's object on rank 0, None elsewhere, no timeout (vLLM's call
        passes none)."""
        views = None if rank == 0 else [_writable_view(rank, i, b) for i, b in enumerate(buffers)]
        payloads = [_payload(b) for b in buffers] if rank == 0 else None
        obj = None if payloads is None else payloads if many else payloads[0]
        got = _coordinator(world_size, self._queue).broadcast_object(obj, src=root)
        if views is not None and world_size > 1:
            _deliver(rank, buffers, views, many, got)

    def reset(self) -> None:
        queue, self._queue, self._config = self._queue, None, None
        self._teardown(queue)

    @staticmethod
    def _teardown(queue: Any) -> None:
        if queue is not None:
            queue.shutdown()
        del queue  # GroupCoordinator.destroy: self.mq_broadcaster = None

    def is_initialized(self) -> bool:
        """vLLM has no such state to ask (a queue exists only while initialized): the answer
        would be the adapter's bookkeeping, so it is ``EngineNotAsked``."""
        held = "holds" if self._config is not None else "holds no"
        raise _not_asked(
            "is_initialized",
            f"vLLM's MessageQueue has no initialized state to ask (the adapter {held} queue)",
            "lifecycle",
        )


def make() -> VllmBroadcaster:
    """Factory for ``--tpbcast-impl tpbcast.conformance.adapters.vllm.adapter:make``.

    Imports vLLM here, in the process that loads the implementation, so forked ranks
    inherit the import (about 4 s) instead of each paying for it; a missing vLLM fails
    here, naming what to install.
    """
    _shm_broadcast()
    return VllmBroadcaster()
