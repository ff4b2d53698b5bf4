"""The ring: connections to both neighbours and the two all-reduce phases."""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import socket
import struct
import time
from collections.abc import Callable, Sequence

_DOUBLE = struct.Struct("=d")
_RETRY_INTERVAL = 0.02


class RingError(RuntimeError):
    """A neighbour failed; says which rank saw it, which peer, when and how far it got."""

    def __init__(
        self, rank: int, peer: int, phase: str, what: str, *, done: int = 0, total: int = 0
    ) -> None:
        self.rank, self.peer, self.phase = rank, peer, phase
        self.bytes_done, self.bytes_total = done, total
        super().__init__(f"rank {rank}: {what} (peer rank {peer}, {phase}, {done}/{total} bytes)")


class RingTimeoutError(RingError, TimeoutError):
    """A neighbour did not answer before the deadline (alive but stuck, e.g. SIGSTOPped)."""


def _remaining(deadline: float) -> float:
    """Seconds left for a socket timeout; never 0, which would mean non-blocking (and a
    BlockingIOError instead of a timeout) rather than "no time left"."""
    return max(0.001, deadline - time.monotonic())


def _path(directory: str, rank: int) -> str:
    return os.path.join(directory, f"r{rank}.sock")


class Ring:
    """One rank's two connections: ``right`` (we send) and ``left`` (we receive)."""

    def __init__(
        self,
        rank: int,
        world_size: int,
        right: socket.socket | None,
        left: socket.socket | None,
        timeout: float,
    ) -> None:
        self.rank, self.world_size, self.timeout = rank, world_size, timeout
        self._right, self._left = right, left

    @property
    def right_peer(self) -> int:
        return (self.rank + 1) % self.world_size

    @property
    def left_peer(self) -> int:
        return (self.rank - 1) % self.world_size

    def close(self) -> None:
        """Close both connections (idempotent); neighbours then see EOF at once."""
        for sock in (self._right, self._left):
            if sock is not None:
                sock.close()
        self._right = self._left = None

    def __enter__(self) -> Ring:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def allreduce(
        self, values: Sequence[float], *, on_step: Callable[[str], object] | None = None
    ) -> list[float]:
        """Return the element-wise sum of ``values`` over all ranks (same length everywhere).

        Reduce-scatter then all-gather, ``world_size - 1`` steps each; every step sends one
        chunk right while receiving one from the left, so no buffer can deadlock the ring.
        ``on_step(name)`` is called before each step ("reduce_scatter.0", "all_gather.1",
        ...): tests hang fault points on it.
        """
        data = [float(v) for v in values]
        n = self.world_size
        if n == 1:
            return data
        bounds = [len(data) * i // n for i in range(n + 1)]

        def chunk(i: int) -> slice:
            return slice(bounds[i % n], bounds[i % n + 1])

        for step in range(n - 1):
            name = f"reduce_scatter.{step}"
            if on_step is not None:
                on_step(name)
            got = self._exchange(
                data[chunk(self.rank - step)], len(data[chunk(self.rank - step - 1)]), name
            )
            target = chunk(self.rank - step - 1)
            data[target] = [a + b for a, b in zip(data[target], got, strict=True)]
        for step in range(n - 1):
            name = f"all_gather.{step}"
            if on_step is not None:
                on_step(name)
            target = chunk(self.rank - step)
            data[target] = self._exchange(
                data[chunk(self.rank + 1 - step)], len(data[target]), name
            )
        return data

    def _exchange(self, send: list[float], count: int, phase: str) -> list[float]:
        """Send ``send`` right and receive ``count`` doubles from the left, both at once."""
        assert self._right is not None and self._left is not None, "ring is closed"
        out = memoryview(b"".join(_DOUBLE.pack(v) for v in send))
        want = count * _DOUBLE.size
        inbox = bytearray()
        deadline = time.monotonic() + self.timeout
        with selectors.DefaultSelector() as sel:
            if out:
                sel.register(self._right, selectors.EVENT_WRITE)
            if want:
                sel.register(self._left, selectors.EVENT_READ)
            while out or len(inbox) < want:
                left_time = deadline - time.monotonic()
                if left_time <= 0:
                    stuck, peer, done, total = (
                        ("send", self.right_peer, len(send) * 8 - len(out), len(send) * 8)
                        if out
                        else ("receive", self.left_peer, len(inbox), want)
                    )
                    raise RingTimeoutError(
                        self.rank,
                        peer,
                        phase,
                        f"{stuck} timed out after {self.timeout:g}s",
                        done=done,
                        total=total,
                    )
                for key, _ in sel.select(left_time):
                    if key.fileobj is self._right:
                        out = self._send_some(out, phase, len(send) * 8)
                        if not out:
                            sel.unregister(self._right)
                    else:
                        piece = self._recv_some(want - len(inbox), phase, len(inbox), want)
                        inbox += piece
                        if len(inbox) == want:
                            sel.unregister(self._left)
        return [v for (v,) in _DOUBLE.iter_unpack(inbox)]

    def _send_some(self, out: memoryview, phase: str, total: int) -> memoryview:
        assert self._right is not None
        try:
            sent = self._right.send(out, socket.MSG_NOSIGNAL | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return out
        except OSError as exc:
            name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
            raise RingError(
                self.rank,
                self.right_peer,
                phase,
                f"right neighbour closed the connection ({name})",
                done=total - len(out),
                total=total,
            ) from exc
        return out[sent:]

    def _recv_some(self, nbytes: int, phase: str, done: int, total: int) -> bytes:
        assert self._left is not None
        try:
            piece = self._left.recv(nbytes, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return b""
        except OSError as exc:
            name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
            raise RingError(
                self.rank,
                self.left_peer,
                phase,
                f"left neighbour closed the connection ({name})",
                done=done,
                total=total,
            ) from exc
        if not piece:
            raise RingError(
                self.rank,
                self.left_peer,
                phase,
                "left neighbour closed the connection (EOF)",
                done=done,
                total=total,
            )
        return piece


def connect(rank: int, world_size: int, directory: str, *, timeout: float = 10.0) -> Ring:
    """Join the ring: listen at ``<directory>/r<rank>.sock``, connect right, accept left.

    Listening comes first on every rank and a connect completes on the listen backlog, so
    the order in which ranks arrive does not matter.  The directory must be private to the
    group (e.g. ``RankContext.workdir``).

    :raises RingTimeoutError: a neighbour did not show up within ``timeout`` seconds.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside world size {world_size}")
    if world_size == 1:
        return Ring(rank, world_size, None, None, timeout)
    deadline = time.monotonic() + timeout
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    right = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(_path(directory, rank))
        listener.listen(1)
        right_peer = (rank + 1) % world_size
        while True:
            # A blocking connect waits, without end, while the listener's backlog is full;
            # with a timeout set, Unix sockets report that as EAGAIN: retry it like the rest.
            right.settimeout(_remaining(deadline))
            try:
                right.connect(_path(directory, right_peer))
                break
            except (FileNotFoundError, ConnectionRefusedError, BlockingIOError, TimeoutError):
                if time.monotonic() >= deadline:
                    raise RingTimeoutError(
                        rank, right_peer, "connect", f"no listener after {timeout:g}s"
                    ) from None
                time.sleep(_RETRY_INTERVAL)  # retry loop with a deadline, not synchronisation
        right.setblocking(True)
        listener.settimeout(_remaining(deadline))
        try:
            left, _ = listener.accept()
        except TimeoutError:
            raise RingTimeoutError(
                rank, (rank - 1) % world_size, "accept", f"left neighbour absent after {timeout:g}s"
            ) from None
        left.setblocking(True)
        return Ring(rank, world_size, right, left, timeout)
    except BaseException:
        right.close()
        raise
    finally:
        listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_path(directory, rank))
