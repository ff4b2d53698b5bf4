"""Helpers shared by the reference self-tests: fast configs, payloads, raw sockets' deadline.

The raw ranks of these tests speak the bytes of wire protocol v1 through
``tpbcast.harness.wire`` -- deliberately NOT through tpbcast.reference_impl -- so
that a mixed group (reference rank + raw rank) checks the protocol, not our class
against itself.
"""

from __future__ import annotations

import importlib.util
import os
import random
import select
import socket
import time
from typing import Any

import pytest

from tpbcast.harness import wire
from tpbcast.reference_impl import BroadcasterConfig, CpuTpBroadcaster

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
