"""Helpers shared by the reference self-tests: fast configs, payloads, raw sockets' deadline.

The raw ranks of these tests speak the bytes of wire protocol v1 through
``tpbcast.harness.wire`` -- deliberately NOT through tpbcast.reference_impl -- so
that a mixed group (reference rank + raw rank) checks the protocol, not our class
against itself.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tpbcast.harness import wire
from tpbcast.reference_impl import BroadcasterConfig, CpuTpBroadcaster
from tpbcast.reference_impl._io import make_poller

#: ``run_ranks`` keywords of the reference self-tests' groups: one 20 s deadline, and
#: once a process failed the others get 10 s more (they usually learn of the failure
#: through a closed socket within milliseconds; some tests kill a process on purpose).
RUN: dict[str, Any] = {"timeout": 20.0, "fail_fast_grace": 10.0}
#: How long a raw socket in these tests waits for the other end.
RAW_WAIT = 10.0


def have(module: str) -> bool:
    """Whether ``module`` is installed, WITHOUT importing it in this (forking) process.

    ``pytest.importorskip("torch")`` would import torch in the pytest parent;
    the ranks import it themselves after the fork (DESIGN.md: never let torch's
    thread pools exist in a process that forks ranks).
    """
    return importlib.util.find_spec(module) is not None


needs_numpy = pytest.mark.skipif(not have("numpy"), reason="numpy is not installed")
needs_torch = pytest.mark.skipif(not have("torch"), reason="torch is not installed")


def fast_config(**changes: object) -> BroadcasterConfig:
    """Short deadlines so that a hang fails in seconds, not minutes."""
    base: dict[str, object] = {
        "connect_timeout": 10.0,
        "connect_retry_interval": 0.01,
        "init_timeout": 10.0,
        "io_timeout": 10.0,
    }
    base.update(changes)
    return BroadcasterConfig(**base)  # type: ignore[arg-type]


def payload(seed: int, size: int) -> bytes:
    """Deterministic random bytes: every rank can compute what rank 0 sends."""
    return random.Random(seed).randbytes(size)


def list_fds() -> set[int]:
    """Open fds of this process (the listing's own fd excluded)."""
    fds = {int(x) for x in os.listdir("/proc/self/fd")}
    return {fd for fd in fds if os.path.exists(f"/proc/self/fd/{fd}")}


def rest_until_closed(sock: socket.socket, *, allow_reset: bool = True) -> bytes:
    """Wait for the other end to close ``sock``; return the byte it sent first, if any.

    ``b""`` means it closed without sending anything (EOF, or a reset when
    ``allow_reset``); a byte that arrived first is returned for the test to judge (a
    probe sent to a peer that should have been refused).  A stream still open after
    :data:`RAW_WAIT`, or a reset when not allowed, fails the calling rank.
    """
    seen = wire.expect_closed(sock, wire.Deadline.after(RAW_WAIT), stop_after=1)
    if seen.extra:
        return seen.extra
    if seen.kind is wire.CloseKind.EOF or (allow_reset and seen.kind is wire.CloseKind.RESET):
        return b""
    raise AssertionError(f"the other end did not close cleanly: {seen}")


class Event:
    """A one-way point between processes of DIFFERENT groups (a pipe made before forking).

    Within one group, ordering is ``ctx.notify``/``ctx.wait``; but two launchers that
    each run their own group (``run_ranks`` inside a rank) have no sync point in common,
    and their grandchildren order themselves with this.  ``notify(n)`` releases ``n``
    waits; the test process closes both ends afterwards (``close``).
    """

    def __init__(self) -> None:
        self.r, self.w = os.pipe()

    def notify(self, times: int = 1) -> None:
        os.write(self.w, b"x" * times)

    def wait(self, timeout: float = 20.0) -> None:
        ready, _, _ = select.select([self.r], [], [], timeout)
        if not ready or os.read(self.r, 1) != b"x":
            raise TimeoutError(f"event not notified within {timeout} s")

    def close(self) -> None:
        os.close(self.r)
        os.close(self.w)


def when_broadcasting(bcast: CpuTpBroadcaster, timeout: float = 10.0) -> None:
    """Wait until another thread is inside ``bcast.broadcast`` (white-box: nothing public
    says so), polling with a deadline while that thread enters the call."""
    deadline = time.monotonic() + timeout
    while bcast._busy != "broadcast":
        assert time.monotonic() < deadline, "the broadcast never started"
        time.sleep(0.001)


#: The peer of :func:`peer_of_a_wire_root`: deadlines far above any test's own waits.
_WIRE_ROOT_PEER = BroadcasterConfig(connect_timeout=10.0, init_timeout=10.0, io_timeout=10.0)


@contextlib.contextmanager
def peer_of_a_wire_root(
    base_path: str, before_probe: Callable[[], None] = lambda: None
) -> Iterator[CpuTpBroadcaster]:
    """Rank 1 initialized against a wire-v1 rank 0 in a thread of this process, which
    reads the rank announcement, runs ``before_probe`` (rank 1 is then blocked waiting
    for the probe byte, allocating nothing) and sends the probe.  The root's link stays
    open until the block ends; rank 1 is reset then."""
    done = threading.Event()
    failed: list[BaseException] = []
    listener = wire.listen(wire.socket_path(base_path), 1)

    def root() -> None:
        try:
            with wire.accept(listener, wire.Deadline.after(10.0)) as conn:
                assert wire.recv_exact(conn, 4, wire.Deadline.after(10.0)) == wire.pack_rank(1)
                before_probe()
                wire.send_all(conn, bytes([wire.PROBE]), wire.Deadline.after(10.0))
                assert done.wait(20.0), "the test never finished"
        except BaseException as exc:  # reported in the rank's main thread
            failed.append(exc)

    thread = threading.Thread(target=root, daemon=True)
    thread.start()
    peer = CpuTpBroadcaster(_WIRE_ROOT_PEER)
    try:
        peer.initialize(1, 2, base_path)
        yield peer
    finally:
        peer.reset()
        done.set()
        thread.join(20.0)
        listener.close()
        os.unlink(wire.socket_path(base_path))
    assert not thread.is_alive() and not failed, failed


class CountingPoller:
    """A caller's poller (``make_poller``) that counts its polls and keeps their timeouts."""

    def __init__(
        self, sock: socket.socket, *, writing: bool = False, on_poll: Callable[[], object] = int
    ) -> None:
        self._real = make_poller(sock, writing=writing, abort_fd=None)
        self._on_poll = on_poll  # run before each poll (after its timeout was chosen)
        self.timeouts: list[int | None] = []

    @property
    def polls(self) -> int:
        return len(self.timeouts)

    def poll(self, timeout: int | None = None) -> list[tuple[int, int]]:
        self.timeouts.append(timeout)
        self._on_poll()
        return self._real.poll(timeout)


def reset_during_a_broadcast(peer: CpuTpBroadcaster, timeout: float = 20.0) -> BaseException:
    """Run ``peer.broadcast`` in a thread (rank 0 sends nothing, so it waits), call
    ``peer.reset()`` from this thread while it does, and return what the broadcast raised."""
    caught: list[BaseException] = []

    def receive() -> None:
        try:
            peer.broadcast(bytearray(8))
        except BaseException as exc:
            caught.append(exc)

    thread = in_thread(receive)
    when_broadcasting(peer, timeout)
    peer.reset()
    thread.join(timeout)
    assert not thread.is_alive(), f"the broadcast did not end within {timeout} s of reset()"
    assert caught, "the broadcast returned although rank 0 sent nothing"
    return caught[0]


def in_thread(target: Callable[[], None]) -> threading.Thread:
    """``target`` in a daemon thread, started (the caller joins it with a deadline)."""
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def fill_send_buffer(sock: socket.socket) -> int:
    """Write into ``sock`` until its buffer is full (the peer is not reading); bytes written.
    Through ``socket.socket.send`` itself, so a test's scripted socket subclass is bypassed."""
    size = 0
    with contextlib.suppress(BlockingIOError):
        while True:
            size += socket.socket.send(sock, bytes(65536), socket.MSG_DONTWAIT)
    return size
