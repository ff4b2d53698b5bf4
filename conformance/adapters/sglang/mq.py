"""The adapter contract (DESIGN.md) over SGLang's shared-memory ``MessageQueue``.

``sglang.srt.distributed.device_communicators.shm_broadcast.MessageQueue`` (adapted from
vLLM's) is what SGLang's ``GroupCoordinator`` broadcasts with when it is asked for a
message-queue broadcaster: ``MessageQueue.create_from_process_group(cpu_group, 1 << 22,
6)``: writer = rank 0, every other rank a local reader, 4 MiB slots, 6 of them, a zmq
XPUB/SUB pair on ``tcp://127.0.0.1`` for payloads of 4 MiB and more.  Same shape as the
vLLM adapter (``..vllm``): the handle travels through a JSON file next to the base path
(``..vllm._handle``: 0600, tmp + ``os.replace``, the writer's pid, start time and a nonce)
because the adapter contract has no process group.  SGLang's handle holds the ring itself
(``ShmRingBuffer``, pickled by its constructor arguments); the file carries those
arguments, and a reader rebuilds the ring with SGLang's own constructor, exactly what
unpickling it does.  This adapter only marshals: no argument checks, no re-init rules.
A rank and a world size go unchecked to ``MessageQueue`` (``n_reader = world_size - 1``)
or ``create_from_handle(handle, rank)``; a second ``initialize`` builds the queue again; a
``root`` other than 0, and any broadcast at world size 1, first goes through SGLang's own
``GroupCoordinator.broadcast_object`` (its ``src`` assertions, its bypass for a group of
one) on a coordinator holding this queue.  The adapter answers (``EngineNotAsked``) only
where SGLang has no place: ``is_initialized`` and a broadcast before ``initialize`` or
after ``reset`` (``lifecycle``), the caller's buffers (``receive_buffers``), a handle file
of another group (``process_group``).

- ``initialize``: rank 0 ``MessageQueue(n_reader=n-1, n_local_reader=n-1,
  local_reader_ranks=[1..n-1], 1 << 22, 6)``, handle file, ``wait_until_ready()``, file
  removed; rank k polls for the file (the ``connect`` deadline),
  ``MessageQueue.create_from_handle(handle, k)``, ``wait_until_ready()``.
- ``broadcast``: rank 0 ``enqueue`` of the bytes (a tensor as itself, a list as one list);
  the others ``dequeue()`` and copy in place (a length mismatch raises naming both sizes).
- ``reset``: the reference is dropped (``GroupCoordinator.destroy``: ``self.mq_broadcaster
  = None``; SGLang 0.5.23's queue has no shutdown or close).

No ``deadlines`` capability: SGLang's ``enqueue``/``dequeue``/``wait_until_ready`` take no
timeout, so every TIME clause is UNSUPPORTED for it rather than judged on the adapter's own
wait for the handle file (a fixed 120 s).  World size 1 creates no queue (neither does
``GroupCoordinator``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from tpbcast.conformance.adapters.vllm._handle import (
    HandleFile,
    HandleFileError,
    remove_if_ours,
    wait_for_handle,
    write_handle,
)

from ._shim import import_sglang_module, sglang_version

__all__ = ["CAPABILITIES", "NAME", "TRANSPORT", "SglangMessageQueue", "make"]

NAME: Final = "sglang MessageQueue"
TRANSPORT: Final = "shm"
# No ``deadlines``: SGLang's queue has none (enqueue, dequeue and wait_until_ready take no
# timeout), and the only wait it could bound is the adapter's own handle-file wait, whose
# PASS would be the adapter's, not SGLang's.
CAPABILITIES: Final = frozenset({"multi_buffer", "tensors"})
MAX_CHUNK_BYTES: Final = 1 << 22  # parallel_state.py: create_from_process_group(.., 1 << 22, 6)
MAX_CHUNKS: Final = 6
HANDLE_WAIT: Final = 120.0  # the readers' wait for the handle file (the adapter's own)
SUFFIX: Final = "_sglang_handle.json"
MODULE: Final = "sglang.srt.distributed.device_communicators.shm_broadcast"
COORDINATOR_MODULE: Final = "sglang.srt.distributed.parallel_state"  # imported by MODULE
_USED_NONCES: set[str] = set()
_SOLO: Final = object()  # a group of one: no queue (GroupCoordinator: world_size > 1 only)


def _export(handle: Any) -> dict[str, Any]:
    """The handle as JSON data: its fields, the ring by its constructor arguments."""
    ring = handle.buffer
    return {
        "connect_ip": handle.connect_ip,
        "local_reader_ranks": list(handle.local_reader_ranks),
        "local_subscribe_port": handle.local_subscribe_port,
        "remote_subscribe_port": handle.remote_subscribe_port,
        "ring": [ring.n_reader, ring.max_chunk_bytes, ring.max_chunks, ring.shared_memory.name],
    }


def _import(mq: Any, data: Mapping[str, Any]) -> Any:
    n_reader, chunk_bytes, chunks, name = data["ring"]
    return mq.Handle(
        connect_ip=data["connect_ip"],
        local_reader_ranks=list(data["local_reader_ranks"]),
        buffer=mq.ShmRingBuffer(n_reader, chunk_bytes, chunks, name),
        local_subscribe_port=data["local_subscribe_port"],
        remote_subscribe_port=data["remote_subscribe_port"],
    )


class SglangMessageQueue:
    """One rank's side of SGLang's ``MessageQueue`` (writer on rank 0, reader elsewhere)."""

    name = NAME
    transport = TRANSPORT
    capabilities = CAPABILITIES
    buffered_broadcasts = MAX_CHUNKS

    def __init__(self) -> None:
        self.version = sglang_version()
        self._queue: Any = None
        self._rank = 0
        self._world_size = 0
        self._written: tuple[str, HandleFile] | None = None

    def initialize(self, rank: int, world_size: int, base_path: str) -> None:
        from .adapter import not_asked

        if world_size == 1:  # GroupCoordinator creates no queue for a group of one
            self._queue, self._rank, self._world_size = _SOLO, rank, world_size
            return
        mq = import_sglang_module(MODULE)
        path = base_path + SUFFIX
        queue: Any = None
        try:
            if rank == 0:
                queue = mq.MessageQueue(
                    n_reader=world_size - 1,
                    n_local_reader=world_size - 1,
                    local_reader_ranks=list(range(1, world_size)),
                    max_chunk_bytes=MAX_CHUNK_BYTES,
                    max_chunks=MAX_CHUNKS,
                )
                entry = write_handle(path, world_size, _export(queue.export_handle()))
                self._written = (path, entry)
            else:
                # Any rank is passed on: as create_from_process_group, a rank other than the
                # writer waits for the handle, then SGLang decides what its rank means.
                try:
                    entry = wait_for_handle(
                        path,
                        rank=rank,
                        world_size=world_size,
                        deadline=HANDLE_WAIT,
                        used=_USED_NONCES,
                    )
                except HandleFileError as exc:  # the adapter's own rendezvous refused it
                    raise not_asked("handle_file", str(exc), "process_group") from exc
                queue = mq.MessageQueue.create_from_handle(_import(mq, entry.handle), rank)
            queue.wait_until_ready()
        except BaseException:
            del queue
            self._remove_handle_file()
            raise
        self._queue, self._rank, self._world_size = queue, rank, world_size
        self._remove_handle_file()  # every reader has read it once wait_until_ready returns

    def broadcast(self, buffer: Any, root: int = 0) -> None:
        """Rank 0 enqueues, the others dequeue into ``buffer`` in place; a ``root`` other
        than 0 and a group of one are SGLang's ``GroupCoordinator.broadcast_object``'s to
        answer."""
        from .adapter import _fill, _payload, not_asked

        many = isinstance(buffer, list | tuple)
        buffers = list(buffer) if many else [buffer]
        queue = self._queue
        if queue is None:
            raise not_asked(
                "not_initialized",
                f"rank {self._rank}: broadcast before initialize or after reset: there is no queue",
                "lifecycle",
            )
        payloads = [_payload(b) for b in buffers] if self._rank == 0 else None
        obj = None if payloads is None else payloads if many else payloads[0]
        if queue is _SOLO or root != 0:
            got = self._coordinator().broadcast_object(obj, src=root)
            if queue is _SOLO or self._rank == 0:
                return
        elif self._rank == 0:
            queue.enqueue(obj)
            return
        else:
            got = queue.dequeue()
        received = list(got) if many and isinstance(got, list) else [got]
        if len(received) != len(buffers):
            raise not_asked(
                "buffer_count",
                f"rank {self._rank}: the root sent {len(received)} buffers, this rank has "
                f"{len(buffers)}",
            )
        for index, (target, item) in enumerate(zip(buffers, received, strict=True)):
            _fill(self._rank, index, target, item)

    def _coordinator(self) -> Any:
        """SGLang's ``GroupCoordinator`` as far as ``broadcast_object`` reads it (world size,
        queue), made as SGLang's ``create_from_handle`` makes a queue (``__new__`` without
        ``__init__``): no process group exists to build one with."""
        coordinator_class = import_sglang_module(COORDINATOR_MODULE).GroupCoordinator
        coordinator = coordinator_class.__new__(coordinator_class)
        coordinator.world_size = self._world_size
        coordinator.mq_broadcaster = None if self._queue is _SOLO else self._queue
        return coordinator

    def reset(self) -> None:
        self._queue = None  # GroupCoordinator.destroy: self.mq_broadcaster = None
        self._remove_handle_file()

    def _remove_handle_file(self) -> None:
        written, self._written = self._written, None
        if written is not None:
            path, entry = written
            remove_if_ours(path, entry)

    def is_initialized(self) -> bool:
        """SGLang has no such state to ask (a queue exists only while initialized): the
        answer would be the adapter's bookkeeping, so it is ``EngineNotAsked``."""
        from .adapter import not_asked

        raise not_asked(
            "is_initialized",
            "SGLang's MessageQueue has no initialized state to ask (the adapter "
            f"{'holds' if self._queue is not None else 'holds no'} queue)",
            "lifecycle",
        )


def make() -> SglangMessageQueue:
    """Factory for ``--tpbcast-impl tpbcast.conformance.adapters.sglang.mq:make``."""
    import_sglang_module(MODULE)
    return SglangMessageQueue()
