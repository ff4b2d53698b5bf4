"""``CpuTpBroadcaster.reset`` against a broadcast in flight, found by mutation testing.

Like test_mutation_kills.py (same purpose, same rules): what ``reset()`` does when a
broadcast holds the instance -- refused from a signal handler of the broadcasting
thread, and from another thread it asks the broadcast to stop and gives up after
``_ABORT_WAIT`` when the broadcast cannot leave (its thread is stuck in a signal
handler), with an error that names the rank and the phase -- plus what a reset leaves
behind (a world of one works after it) and the singleton in a forked child.

The broadcast that holds the instance runs in the pytest process's main thread (signal
handlers run only there): rank 1 of a group of two whose rank 0 sends nothing, so it
waits until a SIGUSR1 handler, run inside it, raises.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import signal
import termios
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from tpbcast.harness import RankContext, run_ranks
from tpbcast.reference_impl import BroadcasterConfig, BroadcastError, CpuTpBroadcaster, instance
from tpbcast.reference_impl import _broadcaster as broadcaster_module

from ._helpers import in_thread, when_broadcasting

_WAIT = 10.0  # how long any step of these tests waits for another thread


class _StopError(Exception):
    """Raised by the SIGUSR1 handler: ends the broadcast it interrupted."""


@contextlib.contextmanager
def _pair(base: str) -> Iterator[CpuTpBroadcaster]:
    """Rank 1 of an initialized group of two (rank 0 initializes in a thread)."""
    config = BroadcasterConfig(connect_timeout=_WAIT, init_timeout=_WAIT, io_timeout=30.0)
    root, peer = CpuTpBroadcaster(config), CpuTpBroadcaster(config)
    thread = in_thread(lambda: root.initialize(0, 2, base))
    try:
        peer.initialize(1, 2, base)
        thread.join(_WAIT)
        assert root.is_initialized()
        yield peer
    finally:
        peer.reset()
        thread.join(_WAIT)
        root.reset()


def _in_a_handler_during_broadcast(peer: CpuTpBroadcaster, body: Callable[[], None]) -> None:
    """Run ``body`` in a SIGUSR1 handler of this (the main) thread while ``peer.broadcast``
    waits for rank 0's bytes; the handler then raises, which ends the broadcast."""
    main = threading.get_ident()

    def handler(signum: int, frame: object) -> None:
        body()
        raise _StopError

    def signaller() -> None:
        when_broadcasting(peer, _WAIT)
        signal.pthread_kill(main, signal.SIGUSR1)

    old = signal.signal(signal.SIGUSR1, handler)
    try:
        thread = in_thread(signaller)
        with pytest.raises(_StopError):  # the handler ran inside the broadcast
            peer.broadcast(bytearray(4))
        thread.join(_WAIT)
    finally:
        signal.signal(signal.SIGUSR1, old)


class _Reset:
    """``bcast.reset()`` in a thread of its own; ``error`` is what it raised (None: none)."""

    def __init__(self, bcast: CpuTpBroadcaster) -> None:
        self.error: BaseException | None = None
        self.thread = in_thread(lambda: self._run(bcast))

    def _run(self, bcast: CpuTpBroadcaster) -> None:
        try:
            bcast.reset()
        except BaseException as exc:
            self.error = exc

    def finished(self, timeout: float = _WAIT) -> bool:
        self.thread.join(timeout)
        return not self.thread.is_alive()


def _until_resets_wait(bcast: CpuTpBroadcaster, count: int) -> None:
    """Wait until ``count`` resets wait for the broadcast to leave (white-box: the order
    of two waiting resets cannot be forced through the public API).  Each one writes a
    byte to the abort pipe while it holds ``_state`` and lets ``_state`` go only in its
    wait: ``count`` bytes unread, then ``_state`` free, means all of them wait."""
    deadline = time.monotonic() + _WAIT
    unread = array.array("i", [0])
    while True:
        fcntl.ioctl(bcast._links.abort_r, termios.FIONREAD, unread)
        if unread[0] >= count:
            break
        assert time.monotonic() < deadline, f"{unread[0]} of {count} resets asked to stop"
        time.sleep(0.001)  # polling with a deadline: the reset threads are starting
    assert bcast._state.acquire(timeout=_WAIT), "a reset holds _state instead of waiting"
    bcast._state.release()


def test_reset_from_a_signal_handler_of_the_broadcasting_thread_is_refused(
    base_path: str,
) -> None:
    """reset() in a signal handler of the thread that is broadcasting cannot wait for that
    broadcast: it is refused at once, word for word, naming the rank (1: initialized) and
    the phase.  Kills reset 1 (the caller's thread not recorded: it waits 10 s for itself
    and then gives up with another message), 13 and 16 (rank None / not passed)."""
    refused: list[BaseException] = []

    def body() -> None:
        try:
            peer.reset()
        except BaseException as exc:
            refused.append(exc)

    with _pair(base_path) as peer:
        _in_a_handler_during_broadcast(peer, body)
    (err,) = refused
    assert type(err) is BroadcastError
    assert str(err) == (
        "rank 1: in phase 'reset': reset() called while broadcast() is running (a signal "
        "handler, or another thread during initialize); a broadcaster is not re-entrant"
    )
    assert (err.rank, err.phase) == (1, "reset")


def test_reset_from_another_thread_gives_up_on_a_broadcast_that_cannot_stop(
    base_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broadcast whose thread is stuck in a signal handler cannot see the abort: reset()
    from another thread gives up after ``_ABORT_WAIT`` seconds with a BroadcastError that
    says so and names the rank and the phase.  ``_ABORT_WAIT`` is patched to 0.25 s (the
    real 10 s would make this test wait 10 s).  Kills reset 27 and 29 (no time limit: the
    reset waits for the broadcast and succeeds), 31 (a wait that never waits: it spins
    until the broadcast leaves), 37/40 (message), 38/41 (rank), 39/43/44 (phase)."""
    monkeypatch.setattr(broadcaster_module, "_ABORT_WAIT", 0.25)
    resets: list[_Reset] = []

    def body() -> None:
        resets.append(_Reset(peer))
        assert resets[0].finished(_WAIT)  # the broadcast stays stuck until the reset gave up

    with _pair(base_path) as peer:
        _in_a_handler_during_broadcast(peer, body)
        assert resets[0].finished()
    err = resets[0].error
    assert type(err) is BroadcastError
    assert str(err) == (
        "rank 1: in phase 'reset': reset() asked the in-flight broadcast to stop, but it did "
        "not within 0.25 s"
    )
    assert (err.rank, err.phase) == (1, "reset")


def test_a_reset_still_waiting_when_another_gives_up_is_woken_when_the_broadcast_leaves(
    base_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two resets from other threads wait for a stuck broadcast; the first gives up (1 s),
    the second (30 s) is still waiting when the broadcast leaves and must be woken then:
    it resets the broadcaster well before its own 30 s.  Kills reset 22
    (``_resets_waiting = 1``: the count of waiting resets drops to 0 when the first gives
    up, so the leaving broadcast wakes nobody).  ``_ABORT_WAIT`` is patched per reset (each
    reads it when it starts waiting) to choose which one gives up; the first waits 1 s so
    that the second surely waits before the first gives up (checked: the first is still
    waiting when both are)."""
    monkeypatch.setattr(broadcaster_module, "_ABORT_WAIT", 3.0)
    resets: list[_Reset] = []

    def body() -> None:
        resets.append(_Reset(peer))
        _until_resets_wait(peer, 1)
        monkeypatch.setattr(broadcaster_module, "_ABORT_WAIT", 30.0)
        resets.append(_Reset(peer))
        _until_resets_wait(peer, 2)
        # Both wait at once (else the mutant could pass): the first has not given up yet.
        assert resets[0].thread.is_alive(), "the first reset gave up before the second waited"
        assert resets[0].finished(_WAIT)  # gave up; the second still waits

    with _pair(base_path) as peer:
        try:
            _in_a_handler_during_broadcast(peer, body)
            woken = resets[1].finished()
        finally:  # a reset left waiting (the bug) is woken, so no thread outlives the test
            with peer._state:
                peer._idle.notify_all()
            stuck = [reset for reset in resets if not reset.finished()]
        assert not stuck, f"{len(stuck)} reset thread(s) still running"
    assert type(resets[0].error) is BroadcastError
    assert "asked the in-flight broadcast to stop, but it did not" in str(resets[0].error)
    assert woken and resets[1].error is None
    assert peer.generation == 2 and not peer.is_initialized()  # the second reset, then _pair's


def test_after_a_reset_that_waited_a_broadcast_takes_no_lock_again(base_path: str) -> None:
    """A broadcast takes no lock unless a reset() is waiting for it: its exit touches
    ``_state`` only while the count of waiting resets is non-zero.  After a reset that had
    to wait (proven: it waited, then completed when the broadcast left), the count must be
    0 again, so a broadcast of the re-initialized broadcaster returns while another thread
    holds ``_state`` (white-box: the lock is not public; a signal handler that runs inside
    reset's critical section and waits for a broadcast would deadlock otherwise).  Kills
    reset 23/24 (the entry count -1 / +2) and 33/34 (the exit sets 1 / adds 1): each leaves
    the count non-zero for good."""
    resets: list[_Reset] = []

    def body() -> None:
        resets.append(_Reset(peer))
        _until_resets_wait(peer, 1)

    with _pair(base_path) as peer:
        _in_a_handler_during_broadcast(peer, body)  # the broadcast leaves: the reset goes on
        assert resets[0].finished(_WAIT) and resets[0].error is None
        peer.initialize(0, 1, base_path + "-alone")
        assert peer._state.acquire(timeout=_WAIT)
        try:
            other = in_thread(lambda: peer.broadcast(bytearray(1)))
            other.join(_WAIT)
            returned = not other.is_alive()
        finally:
            peer._state.release()
        other.join(_WAIT)
    assert returned, "the broadcast waited for _state, which another thread held"


def test_a_broadcaster_that_was_reset_broadcasts_as_a_world_of_one(base_path: str) -> None:
    """After reset() the broadcaster holds no route of a former group: initialized again as
    a world of one, its broadcasts (one buffer or a list) move nothing and succeed.
    Kills reset 45 (the route left as ``""``, which a broadcast then tries to use)."""
    with _pair(base_path) as peer:
        peer.reset()
        peer.initialize(0, 1, base_path + "-alone")
        peer.broadcast(bytearray(b"x"))
        peer.broadcast([bytearray(1), bytearray(2)])
        assert peer.statistics().broadcasts == 2


def test_a_forked_child_can_take_the_process_wide_broadcaster() -> None:
    """``instance()`` works in a forked child (the fork hook gives the child a fresh
    singleton lock, one no parent thread can hold).  Kills _after_fork_in_child 1 (the
    lock replaced by None)."""

    def rank_main(ctx: RankContext) -> bool:
        return instance() is instance()

    assert run_ranks(rank_main, 1, timeout=30.0).values() == [True]
