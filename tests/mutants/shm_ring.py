"""A shared-memory ring broadcaster (transport ``shm``), written for the suite from scratch.

The correct member of the ``shm`` mutant family: ``tools/mutants.py`` judges it as a
baseline (no MUST FAIL/ERROR, every ``uds-v1`` clause NOT_APPLICABLE) and the ``m_shm_*``
mutants each break one behaviour of it.  It shares no code with the reference (which
speaks wire v1 on a Unix socket) nor with vLLM's ``shm_broadcast``.

Layout.  Rank 0 (the only writer) creates a POSIX shared-memory segment
``/dev/shm/tpbshm-<pid>-<random>`` (``O_EXCL``, mode 0600) holding a header, one record per
reader and a ring of :data:`SLOTS` slots of :data:`CHUNK` bytes.  A payload of ``n`` bytes
is cut into ``ceil(n / CHUNK)`` chunks; chunk ``k`` (counted from 1 over the life of the
group) goes to slot ``(k - 1) % SLOTS`` once every reader has consumed chunk
``k - SLOTS``, and is published by writing ``k`` into the slot's sequence word last.
Reader ``r`` copies chunk ``k`` once the slot's sequence word says ``k`` and then stores
``k`` in its own ``consumed`` word.  Words are native, aligned 8-byte integers (single
stores and loads on x86-64, whose store order makes "data, then sequence" safe).

Rendezvous.  Rank 0 writes ``<base_path>.shm`` (JSON: segment name, a random 64-bit
nonce, world size, its pid) atomically (a 0600 temporary file renamed over it).  A
reader reads it, opens the segment, and accepts it only if the header carries the same
magic, nonce and world size, is not shut down, and its writer is alive: anything else is
a stale rendezvous of an earlier group, refused (the reader keeps looking until its
connect deadline, then raises).  Once every reader has attached, rank 0 unlinks both the
file and the segment name: from then on nothing named exists, so a SIGKILL of any rank
(or of its process group) leaves nothing behind; ``reset`` and an ``atexit`` hook unlink
them too if the group never completed.  A reader's ``initialize`` returns only once rank 0
has seen every reader attach (a barrier, as wire v1's probe is).  Limitation: a rank 0
SIGKILLed before every reader attached leaves both names until a reader that had attached
sees it dead, a reader that comes later refuses the stale rendezvous, or a new rank 0 at
the same base path starts: each of them removes them.

Liveness.  Every process holds a POSIX record lock on one byte of the segment's file
(the writer byte 0, reader ``r`` byte ``r``); the kernel drops it when the process dies
(before it is even reaped, so a zombie counts as dead).  A reader waiting for a chunk
tests the writer's byte, the writer waiting for room (and at the start of each
broadcast) tests each reader's byte, every :data:`LIVENESS_EVERY` seconds: a dead peer is
an error within milliseconds, whatever the I/O deadline.  A stopped (SIGSTOP) process
keeps its locks: the others wait for it until their I/O deadline.  ``reset`` sets the
header's ``shutdown`` word (writer) or the reader's ``detached`` state, so the other side
stops waiting for it, and a local flag ends a broadcast blocked in another thread.
A reader drains every chunk published before the writer's teardown before it looks at
the shutdown word: a payload broadcast before ``reset`` or exit is delivered.
A broadcast that fails on rank 0 sets the shutdown word too (the group is aborted), so
no reader waits for a payload that will never come.

Waits poll with short sleeps (50 us growing to 2 ms), so a waiting rank uses little CPU.
A list of buffers goes as one payload, back to back (``multi_buffer``).
A broadcast started while another call holds the instance (a broadcast pending in another
thread, initialize, reset) is refused at once with an error saying so, never queued.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import json
import math
import mmap
import os
import secrets
import struct
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Final

SHM_DIR: Final = "/dev/shm"
CHUNK: Final = 64 * 1024
SLOTS: Final = 8
MAGIC: Final = 0x3172_6D68_7362_7074  # b"tpbshmr1" in little-endian order
LIVENESS_EVERY: Final = 0.01
_WORD: Final = struct.Struct("@Q")
# Header words (offsets).
_H_MAGIC, _H_NONCE, _H_WORLD, _H_CHUNK, _H_SLOTS, _H_PID, _H_SHUTDOWN, _H_READY = (
    8 * i for i in range(8)
)
_READERS_AT: Final = 128
_READER_SIZE: Final = 64  # pid, state, consumed
_R_PID, _R_STATE, _R_CONSUMED = 0, 8, 16
_SLOT_META_SIZE: Final = 64  # seq, message, total, offset, length
_M_SEQ, _M_MSG, _M_TOTAL, _M_OFFSET, _M_LENGTH = 0, 8, 16, 24, 32
EMPTY, ATTACHED, DETACHED = 0, 1, 2

DEFAULTS: Final[Mapping[str, float | None]] = {"connect": 60.0, "init": 60.0, "io": 300.0}


class ShmError(Exception):
    """Every error of this broadcaster; carries rank/peer/phase/bytes attributes."""

    def __init__(
        self,
        message: str,
        *,
        rank: int | None = None,
        peer: int | None = None,
        phase: str = "",
        bytes_done: int | None = None,
        bytes_total: int | None = None,
        elapsed: float | None = None,
        path: str | None = None,
    ) -> None:
        super().__init__(message)
        self.rank = rank
        self.peer = peer
        self.phase = phase
        self.bytes_done = bytes_done
        self.bytes_total = bytes_total
        self.elapsed = elapsed
        self.path = path


class ShmConfigurationError(ShmError, ValueError):
    """Bad arguments."""


class ShmNotInitializedError(ShmError, RuntimeError):
    """broadcast before initialize / after reset."""


class ShmReinitMismatchError(ShmError, RuntimeError):
    """initialize again with other values."""


class ShmBrokenError(ShmError, RuntimeError):
    """A previous broadcast failed; reset first."""


class ShmBusyError(ShmError, RuntimeError):
    """A broadcast started while another call holds the instance."""


class ShmTimeoutError(ShmError, TimeoutError):
    """A deadline passed."""


class ShmPeerClosedError(ShmError, ConnectionError):
    """The other side died, reset or shut down."""


class ShmSecurityError(ShmError, PermissionError):
    """Something unexpected at the rendezvous path."""


def rendezvous_path(base_path: str) -> str:
    """The file rank 0 writes next to the base path."""
    return base_path + ".shm"


def _lock_free(fd: int, byte: int) -> bool:
    """True if nobody holds a lock on ``byte`` of ``fd``'s file (its holder died or left)."""
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, byte)
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    fcntl.lockf(fd, fcntl.LOCK_UN, 1, byte)
    return True


class _Backoff:
    """Sleeps of 50 us doubling to 2 ms between polls (reset after progress)."""

    def __init__(self) -> None:
        self.delay = 0.0

    def wait(self) -> None:
        self.delay = 0.00005 if self.delay == 0 else min(self.delay * 2, 0.002)
        time.sleep(self.delay)

    def progress(self) -> None:
        self.delay = 0.0


class _Segment:
    """An open segment: its fd (holding this process's lock), mapping and layout."""

    def __init__(self, fd: int, mm: mmap.mmap, world_size: int, name: str) -> None:
        self.fd = fd
        self.mm = mm
        self.world_size = world_size
        self.name = name
        self.meta_at = _READERS_AT + _READER_SIZE * max(world_size - 1, 0)
        self.data_at = _round_up(self.meta_at + _SLOT_META_SIZE * SLOTS, 4096)

    @staticmethod
    def size_for(world_size: int) -> int:
        meta = _READERS_AT + _READER_SIZE * max(world_size - 1, 0)
        return _round_up(meta + _SLOT_META_SIZE * SLOTS, 4096) + CHUNK * SLOTS

    def get(self, offset: int) -> int:
        return int(_WORD.unpack_from(self.mm, offset)[0])

    def put(self, offset: int, value: int) -> None:
        _WORD.pack_into(self.mm, offset, value)

    def reader(self, rank: int, field: int) -> int:
        return _READERS_AT + _READER_SIZE * (rank - 1) + field

    def meta(self, slot: int, field: int) -> int:
        return self.meta_at + _SLOT_META_SIZE * slot + field

    def close(self) -> None:
        try:
            self.mm.close()
        finally:
            os.close(self.fd)  # also drops this process's locks on the file


def _round_up(value: int, unit: int) -> int:
    return (value + unit - 1) // unit * unit


_LIVE: weakref.WeakSet[ShmRingBroadcaster] = weakref.WeakSet()


def _reset_all_at_exit() -> None:
    for bcast in list(_LIVE):
        with contextlib.suppress(Exception):  # best effort at interpreter exit
            bcast.reset()


atexit.register(_reset_all_at_exit)


class ShmRingBroadcaster:
    """The adapter-contract object (DESIGN.md): one group membership at a time."""

    name = "tpbcast-shm-ring"
    version = "1"
    transport = "shm"
    # The writer runs ahead of its slowest reader by at most one ring of one-chunk slots.
    buffered_broadcasts = SLOTS
    capabilities: frozenset[str] = frozenset({"deadlines", "generation", "multi_buffer"})
    segment_mode = 0o600

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closing = False
        self._deadlines: dict[str, float | None] = dict(DEFAULTS)
        self._generation = 0
        self._seg: _Segment | None = None
        self._rank = -1
        self._world_size = 0
        self._base_path = ""
        self._initialized = False
        self._broken: str | None = None
        self._chunks = 0  # chunks written (root) or consumed (reader) so far
        self._messages = 0
        self._named: list[str] = []  # names this rank 0 created and has not unlinked yet
        self._rdv_ident: tuple[int, int] | None = None
        _LIVE.add(self)

    # ------------------------------------------------------------------ contract extras

    def set_deadlines(
        self, *, connect: float | None = None, init: float | None = None, io: float | None = None
    ) -> None:
        """Seconds; None keeps a value; ``math.inf`` disables the I/O deadline."""
        for key, value in (("connect", connect), ("init", init), ("io", io)):
            if value is None:
                continue
            if value <= 0 or (value == math.inf and key != "io"):
                raise ShmConfigurationError(f"{key} deadline must be positive, got {value!r}")
            self._deadlines[key] = None if value == math.inf else float(value)

    def default_deadlines(self) -> Mapping[str, float | None]:
        return dict(DEFAULTS)

    @property
    def generation(self) -> int:
        return self._generation

    def chunk_size(self) -> int:
        """Bytes per ring slot (a payload above it takes several chunks)."""
        return CHUNK

    def is_initialized(self) -> bool:
        return self._initialized

    # ------------------------------------------------------------------ initialize

    def initialize(self, rank: int, world_size: int, base_path: str) -> None:
        _check_arguments(rank, world_size, base_path)
        with self._lock:
            if self._initialized:
                if (rank, world_size, base_path) == (
                    self._rank,
                    self._world_size,
                    self._base_path,
                ):
                    return
                raise ShmReinitMismatchError(
                    f"re-init mismatch: was rank={self._rank} world_size={self._world_size} "
                    f"base_path={self._base_path!r}, now rank={rank} world_size={world_size} "
                    f"base_path={base_path!r}; call reset() first",
                    rank=self._rank,
                    phase="initialize",
                )
            self._closing = False
            self._broken = None
            self._chunks = self._messages = 0
            self._rank, self._world_size, self._base_path = rank, world_size, base_path
            if world_size > 1:
                try:
                    if rank == 0:
                        self._seg = self._create(world_size, base_path)
                    else:
                        self._seg = self._attach(rank, world_size, base_path)
                except BaseException:
                    self._teardown()
                    raise
            self._initialized = True

    def _create(self, world_size: int, base_path: str) -> _Segment:
        start = time.monotonic()
        deadline = _deadline(self._deadlines["init"])
        rdv = rendezvous_path(base_path)
        _sweep_stale(rdv)
        name = f"tpbshm-{os.getpid()}-{secrets.token_hex(6)}"
        path = os.path.join(SHM_DIR, name)
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(path, flags, self.segment_mode)
        self._named.append(path)
        try:
            os.fchmod(fd, self.segment_mode)
            size = _Segment.size_for(world_size)
            os.ftruncate(fd, size)
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
            seg = _Segment(fd, mmap.mmap(fd, size), world_size, name)
        except BaseException:
            os.close(fd)
            raise
        nonce = secrets.randbits(63) | 1
        for offset, value in (
            (_H_NONCE, nonce),
            (_H_WORLD, world_size),
            (_H_CHUNK, CHUNK),
            (_H_SLOTS, SLOTS),
            (_H_PID, os.getpid()),
            (_H_MAGIC, MAGIC),
        ):
            seg.put(offset, value)
        self._seg = seg
        record = {"name": name, "nonce": nonce, "world_size": world_size, "pid": os.getpid()}
        tmp = f"{rdv}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        tfd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
        self._named.append(tmp)
        with os.fdopen(tfd, "w") as fh:
            json.dump(record, fh)
        os.replace(tmp, rdv)
        self._named[-1] = rdv
        st = os.lstat(rdv)
        self._rdv_ident = (st.st_dev, st.st_ino)
        # Wait until every reader has attached (the bootstrap barrier).
        backoff = _Backoff()
        next_check = 0.0
        while True:
            # A reader that attached and already reset (DETACHED) did join: the bootstrap is
            # complete, and the next broadcast reports it gone.
            missing = [r for r in range(1, world_size) if seg.get(seg.reader(r, _R_STATE)) == EMPTY]
            if not missing:
                break
            if time.monotonic() >= next_check:
                self._check_joined(seg, missing, start)
                next_check = time.monotonic() + LIVENESS_EVERY
            if self._closing:
                raise ShmPeerClosedError(
                    "rank 0: initialize ended by reset() (closed)", rank=0, phase="initialize"
                )
            if time.monotonic() >= deadline:
                raise ShmTimeoutError(
                    f"rank 0: init deadline ({self._deadlines['init']}s) passed waiting for "
                    f"peer rank(s) {missing} to attach to {path} (rendezvous {rdv})",
                    rank=0,
                    peer=missing[0],
                    phase="initialize",
                    elapsed=time.monotonic() - start,
                    path=rdv,
                )
            backoff.wait()
        seg.put(_H_READY, 1)  # the readers' initialize returns now
        self._unlink_names()  # every reader is in: no name is needed any more
        return seg

    def _check_joined(self, seg: _Segment, missing: list[int], start: float) -> None:
        """A reader that attached and died while rank 0 waits for the others fails the
        bootstrap at once (FAULT-7), naming it."""
        for r in range(1, seg.world_size):
            if r in missing or seg.get(seg.reader(r, _R_STATE)) != ATTACHED:
                continue
            if self._reader_gone(seg, r):
                pid = seg.get(seg.reader(r, _R_PID))
                raise ShmPeerClosedError(
                    f"rank 0: initialize failed: peer {r} (pid {pid}) attached and died during "
                    f"the bootstrap (closed); still waiting for peer rank(s) {missing}",
                    rank=0,
                    peer=r,
                    phase="initialize",
                    elapsed=time.monotonic() - start,
                )

    def _unlink_names(self) -> None:
        for path in self._named:
            try:
                if path.endswith(".shm") and self._rdv_ident is not None:
                    st = os.lstat(path)
                    if (st.st_dev, st.st_ino) != self._rdv_ident:
                        continue  # another group's file now: not ours to remove
                os.unlink(path)
            except FileNotFoundError:
                pass
        self._named.clear()
        self._rdv_ident = None

    def _attach(self, rank: int, world_size: int, base_path: str) -> _Segment:
        start = time.monotonic()
        deadline = _deadline(self._deadlines["connect"])
        rdv = rendezvous_path(base_path)
        backoff = _Backoff()
        why = "no rendezvous file"
        while True:
            if self._closing:
                raise ShmPeerClosedError(
                    f"rank {rank}: initialize ended by reset() (closed)", rank=rank
                )
            got = _try_open(rdv, world_size, self._stale_reason)
            if isinstance(got, _Segment):
                seg = got
                break
            why = got
            if time.monotonic() >= deadline:
                raise ShmTimeoutError(
                    f"rank {rank}: connect deadline ({self._deadlines['connect']}s) passed "
                    f"waiting for rank 0's segment at {rdv}: {why}",
                    rank=rank,
                    peer=0,
                    phase="connect",
                    elapsed=time.monotonic() - start,
                    path=rdv,
                )
            backoff.wait()
        attached = False
        try:
            try:
                fcntl.lockf(seg.fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, rank)
            except OSError as exc:
                raise ShmConfigurationError(
                    f"rank {rank}: another process already attached as rank {rank} to {rdv}",
                    rank=rank,
                    phase="attach",
                    path=rdv,
                ) from exc
            if not self._slot_free(seg, rank):
                raise ShmConfigurationError(
                    f"rank {rank}: rank {rank} was already attached to this group ({rdv})",
                    rank=rank,
                    phase="attach",
                    path=rdv,
                )
            seg.put(seg.reader(rank, _R_PID), os.getpid())
            seg.put(seg.reader(rank, _R_CONSUMED), 0)
            seg.put(seg.reader(rank, _R_STATE), ATTACHED)
            attached = True
            self._await_group(seg, rank, start)
        except BaseException:
            if attached:
                seg.put(seg.reader(rank, _R_STATE), DETACHED)
            seg.close()
            raise
        return seg

    def _await_group(self, seg: _Segment, rank: int, start: float) -> None:
        """A reader waits until rank 0 has seen every reader attach (the bootstrap is a
        barrier for every rank, as wire v1's probe is), or fails: rank 0 died, gave up
        (its shutdown word) or the init deadline passed."""
        deadline = _deadline(self._deadlines["init"])
        backoff = _Backoff()
        next_check = 0.0
        while not seg.get(_H_READY):
            now = time.monotonic()

            def fail(cls: type[ShmError], what: str) -> ShmError:
                return cls(
                    f"rank {rank}: initialize failed: {what}",
                    rank=rank,
                    peer=0,
                    phase="initialize",
                    elapsed=time.monotonic() - start,
                )

            if self._closing:
                raise fail(ShmPeerClosedError, "ended by reset() (closed)")
            if seg.get(_H_SHUTDOWN) and not seg.get(_H_READY):
                raise fail(ShmPeerClosedError, "rank 0 gave up its bootstrap (closed)")
            if now >= next_check:
                if self._root_gone(seg) and not seg.get(_H_READY):
                    # Nobody else will remove what the dead rank 0 published.
                    _remove_rendezvous(self._base_path, seg.name)
                    raise fail(ShmPeerClosedError, "rank 0 died during the bootstrap (closed)")
                next_check = now + LIVENESS_EVERY
            if now >= deadline:
                raise fail(
                    ShmTimeoutError,
                    f"init deadline ({self._deadlines['init']}s) passed waiting for rank 0 to "
                    "see every peer attach",
                )
            backoff.wait()

    # ------------------------------------------------------------------ broadcast

    def broadcast(self, buffer: Any, root: int = 0) -> None:
        # One call at a time, refused rather than queued (BCAST-15): a second broadcast
        # waiting behind a stalled one would only add a second stalled caller.
        if not self._lock.acquire(blocking=False):
            raise ShmBusyError(
                f"rank {self._rank}: another call (broadcast, initialize or reset) is in "
                "flight on this instance; one broadcast at a time",
                rank=self._rank,
                phase="broadcast",
            )
        try:
            self._broadcast_locked(buffer, root)
        finally:
            self._lock.release()

    def _broadcast_locked(self, buffer: Any, root: int) -> None:
        if isinstance(buffer, list | tuple):
            self._broadcast_list(list(buffer), root)
            return
        if not self._initialized:
            raise ShmNotInitializedError(
                "broadcast before initialize (or after reset)", phase="broadcast"
            )
        if self._broken is not None:
            raise ShmBrokenError(
                f"rank {self._rank}: broadcaster is broken by an earlier failure "
                f"({self._broken}); call reset()",
                rank=self._rank,
                phase="broadcast",
            )
        if isinstance(root, bool) or root != 0:
            raise ShmConfigurationError(
                f"root must be 0 (rank 0 is the only writer), got {root!r}",
                rank=self._rank,
                phase="broadcast",
            )
        view = _flat(buffer, writable=self._rank != 0)
        if self._world_size == 1 or view.nbytes == 0:
            return
        seg = self._seg
        assert seg is not None
        try:
            if self._rank == 0:
                self._write(seg, view)
            else:
                self._read(seg, view)
        except ShmError as exc:
            self._broken = str(exc)
            if self._rank == 0:
                seg.put(_H_SHUTDOWN, 1)  # abort: the other readers stop waiting (FAULT-8)
            raise

    def _broadcast_list(self, buffers: list[Any], root: int) -> None:
        """Several buffers back to back as one payload (capability ``multi_buffer``); every
        buffer is checked before a byte moves, and a peer's are filled only once the whole
        payload has arrived."""
        views = [_flat(b, writable=self._rank != 0) for b in buffers]
        if self._rank == 0:
            self._broadcast_locked(b"".join(v.tobytes() for v in views), root)
            return
        joined = bytearray(sum(v.nbytes for v in views))
        self._broadcast_locked(joined, root)
        done = 0
        for view in views:
            view[:] = joined[done : done + view.nbytes]
            done += view.nbytes

    def _write(self, seg: _Segment, view: memoryview) -> None:
        total = view.nbytes
        start = time.monotonic()
        deadline = _deadline(self._deadlines["io"])
        self._messages += 1
        done = 0
        self._check_readers(seg, total, done, start)
        with memoryview(seg.mm) as shared:
            while done < total:
                k = self._chunks + 1
                slot = (k - 1) % SLOTS
                backoff = _Backoff()
                next_check = 0.0
                while True:
                    lagging = [
                        r
                        for r in range(1, seg.world_size)
                        if seg.get(seg.reader(r, _R_CONSUMED)) < k - SLOTS
                    ]
                    if not lagging:
                        break
                    now = time.monotonic()
                    if self._closing:
                        raise self._error(
                            ShmPeerClosedError,
                            "reset() while sending (closed)",
                            None,
                            (done, total, start),
                        )
                    if now >= next_check:
                        self._check_readers(seg, total, done, start)
                        next_check = now + LIVENESS_EVERY
                    if now >= deadline:
                        raise self._error(
                            ShmTimeoutError,
                            f"I/O deadline ({self._deadlines['io']}s) passed waiting for peer "
                            f"{lagging[0]} to read (ring full)",
                            lagging[0],
                            (done, total, start),
                        )
                    backoff.wait()
                length = min(CHUNK, total - done)
                at = seg.data_at + slot * CHUNK
                shared[at : at + length] = view[done : done + length]
                seg.put(seg.meta(slot, _M_MSG), self._messages)
                seg.put(seg.meta(slot, _M_TOTAL), total)
                seg.put(seg.meta(slot, _M_OFFSET), done)
                seg.put(seg.meta(slot, _M_LENGTH), length)
                seg.put(seg.meta(slot, _M_SEQ), k)  # publish: last
                self._chunks = k
                done += length

    def _check_readers(self, seg: _Segment, total: int, done: int, start: float) -> None:
        for r in range(1, seg.world_size):
            state = seg.get(seg.reader(r, _R_STATE))
            if state == DETACHED:
                raise self._error(
                    ShmPeerClosedError,
                    "peer reset and left the group (closed)",
                    r,
                    (done, total, start),
                )
            if self._reader_gone(seg, r):
                pid = seg.get(seg.reader(r, _R_PID))
                raise self._error(
                    ShmPeerClosedError,
                    f"peer process (pid {pid}) is gone (closed: its lock on the segment was "
                    "released)",
                    r,
                    (done, total, start),
                )

    def _read(self, seg: _Segment, view: memoryview) -> None:
        total = view.nbytes
        start = time.monotonic()
        deadline = _deadline(self._deadlines["io"])
        self._messages += 1
        done = 0
        rank = self._rank
        with memoryview(seg.mm) as shared:
            while done < total:
                k = self._chunks + 1
                slot = (k - 1) % SLOTS
                backoff = _Backoff()
                next_check = 0.0
                while seg.get(seg.meta(slot, _M_SEQ)) != k:
                    # Nothing to read: only now look at teardown and liveness.
                    now = time.monotonic()
                    if self._closing:
                        raise self._error(
                            ShmPeerClosedError,
                            "reset() while receiving (closed)",
                            0,
                            (done, total, start),
                        )
                    ended = ""
                    if seg.get(_H_SHUTDOWN):
                        ended = "root reset the group (closed)"
                    elif now >= next_check:
                        if self._root_gone(seg):
                            pid = seg.get(_H_PID)
                            ended = (
                                f"root process (pid {pid}) is gone (closed: its lock on the "
                                "segment was released)"
                            )
                        next_check = now + LIVENESS_EVERY
                    if ended:
                        if seg.get(seg.meta(slot, _M_SEQ)) == k:
                            break  # published just before the root's end: deliver it
                        raise self._error(ShmPeerClosedError, ended, 0, (done, total, start))
                    if now >= deadline:
                        raise self._error(
                            ShmTimeoutError,
                            f"I/O deadline ({self._deadlines['io']}s) passed waiting for root "
                            "to write",
                            0,
                            (done, total, start),
                        )
                    backoff.wait()
                msg = seg.get(seg.meta(slot, _M_MSG))
                sent = seg.get(seg.meta(slot, _M_TOTAL))
                offset = seg.get(seg.meta(slot, _M_OFFSET))
                length = seg.get(seg.meta(slot, _M_LENGTH))
                if msg != self._messages or sent != total or offset != done:
                    raise self._error(
                        ShmConfigurationError,
                        f"size mismatch: root broadcast {sent} bytes (message {msg}, offset "
                        f"{offset}), this rank expects {total} (message {self._messages})",
                        0,
                        (done, total, start),
                    )
                at = seg.data_at + slot * CHUNK
                self._copy_out(view, done, shared[at : at + length])
                seg.put(seg.reader(rank, _R_CONSUMED), k)
                self._chunks = k
                done += length

    def _error(
        self,
        cls: type[ShmError],
        what: str,
        peer: int | None,
        progress: tuple[int, int, float],
    ) -> ShmError:
        done, total, start = progress
        elapsed = time.monotonic() - start
        who = "" if peer is None else f"peer {peer}: " if self._rank == 0 else f"rank {peer}: "
        return cls(
            f"rank {self._rank}: broadcast failed: {who}{what}; {done} of {total} bytes done "
            f"after {elapsed:.3f}s",
            rank=self._rank,
            peer=peer,
            phase="broadcast",
            bytes_done=done,
            bytes_total=total,
            elapsed=elapsed,
        )

    # ------------------------------------------------------------------ one-line hooks
    # (each the single place a mutant of tests/mutants/m_shm_*.py changes)

    def _root_gone(self, seg: _Segment) -> bool:
        """A reader's test of the writer: its lock byte is free (the process died)."""
        return _lock_free(seg.fd, 0)

    def _reader_gone(self, seg: _Segment, rank: int) -> bool:
        """The writer's test of reader ``rank``: its lock byte is free."""
        return _lock_free(seg.fd, rank)

    def _copy_out(self, view: memoryview, done: int, chunk: memoryview) -> None:
        """A reader copies one chunk into the caller's buffer at ``done``."""
        view[done : done + len(chunk)] = chunk

    def _slot_free(self, seg: _Segment, rank: int) -> bool:
        """Reader ``rank``'s record was never used in this segment."""
        return seg.get(seg.reader(rank, _R_STATE)) == EMPTY

    def _stale_reason(self, seg: _Segment, nonce: int, world_size: int) -> str:
        """Why an opened segment is not the live group the rendezvous promised."""
        return _stale(seg, nonce, world_size)

    # ------------------------------------------------------------------ reset

    def reset(self) -> None:
        self._closing = True  # a broadcast blocked in another thread ends at its next poll
        with self._lock:
            self._teardown()
            self._initialized = False
            self._broken = None
            self._closing = False
            self._generation += 1

    def _teardown(self) -> None:
        seg, self._seg = self._seg, None
        try:
            if seg is not None:
                if self._rank == 0:
                    seg.put(_H_SHUTDOWN, 1)
                elif self._rank > 0:
                    seg.put(seg.reader(self._rank, _R_STATE), DETACHED)
        finally:
            self._unlink_names()
            if seg is not None:
                seg.close()
        self._rank, self._world_size, self._base_path = -1, 0, ""


def _check_arguments(rank: object, world_size: object, base_path: object) -> None:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ShmConfigurationError(f"world_size must be an int >= 1, got {world_size!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ShmConfigurationError(
            f"rank must be in [0, {world_size}), got {rank!r}", phase="initialize"
        )
    if not isinstance(base_path, str) or not base_path or "\0" in base_path:
        raise ShmConfigurationError(f"base_path must be a non-empty path, got {base_path!r}")


def _deadline(seconds: float | None) -> float:
    return math.inf if seconds is None else time.monotonic() + seconds


def _flat(buffer: Any, *, writable: bool) -> memoryview:
    try:
        view = memoryview(buffer)
    except TypeError as exc:
        raise ShmConfigurationError(f"not a buffer: {type(buffer).__name__}") from exc
    if not view.c_contiguous:
        raise ShmConfigurationError("the buffer must be contiguous")
    if writable and view.readonly:
        raise ShmConfigurationError("a peer's buffer must be writable")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


_DEAD_ROOT: Final = "its root process is gone"


def _try_open(  # noqa: PLR0911
    rdv: str, world_size: int, stale: Callable[[_Segment, int, int], str]
) -> _Segment | str:
    """The segment ``rdv`` names if it is a live group of ``world_size``, else why not."""
    try:
        with open(rdv) as fh:
            record = json.load(fh)
        name = str(record["name"])
        nonce = int(record["nonce"])
    except FileNotFoundError:
        return "no rendezvous file"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"unreadable rendezvous file ({exc})"
    if "/" in name:
        return f"rendezvous names an odd segment {name!r}"
    try:
        fd = os.open(os.path.join(SHM_DIR, name), os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        return f"stale rendezvous: segment {name} cannot be opened ({exc.strerror})"
    try:
        size = os.fstat(fd).st_size
        if size != _Segment.size_for(world_size):
            os.close(fd)
            return f"stale rendezvous: segment {name} is {size} bytes (another world size?)"
        seg = _Segment(fd, mmap.mmap(fd, size), world_size, name)
    except BaseException:
        os.close(fd)
        raise
    problem = stale(seg, nonce, world_size)
    if problem == _DEAD_ROOT:
        # Left by a rank 0 killed during its bootstrap: nobody else will remove it.
        _remove_rendezvous(rdv[: -len(".shm")], name)
    if problem:
        seg.close()
        return f"stale rendezvous refused: segment {name}: {problem}"
    return seg


def _stale(seg: _Segment, nonce: int, world_size: int) -> str:
    """Why an opened segment is not the live group the rendezvous promised ("" if it is)."""
    if seg.get(_H_MAGIC) != MAGIC or seg.get(_H_NONCE) != nonce:
        return "its header does not match the rendezvous (magic/nonce)"
    if seg.get(_H_WORLD) != world_size:
        return f"it is a group of {seg.get(_H_WORLD)} ranks"
    if seg.get(_H_SHUTDOWN):
        return "its root has reset"
    if _lock_free(seg.fd, 0):
        return _DEAD_ROOT
    return ""


def _remove_rendezvous(base_path: str, name: str) -> None:
    """Unlink segment ``name`` and the rendezvous file at ``base_path`` if it names it."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(SHM_DIR, name))
    rdv = rendezvous_path(base_path)
    try:
        with open(rdv) as fh:
            named = str(json.load(fh)["name"])
    except (OSError, ValueError, KeyError, TypeError):
        return
    if named == name:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(rdv)


def _sweep_stale(rdv: str) -> None:
    """Remove a rendezvous (and its segment) left by a dead rank 0 at this base path."""
    try:
        with open(rdv) as fh:
            name = str(json.load(fh)["name"])
    except FileNotFoundError:
        return
    except (OSError, ValueError, KeyError, TypeError):
        return  # not ours to judge; os.replace takes its place
    if "/" in name:
        return
    path = os.path.join(SHM_DIR, name)
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if _lock_free(fd, 0):
            os.unlink(path)
    finally:
        os.close(fd)


def make() -> ShmRingBroadcaster:
    return ShmRingBroadcaster()
