"""Rank bodies shared by the native tests (each runs inside a forked child)."""

from __future__ import annotations

import hashlib
import os
import random
from typing import Any

from tpbcast.conformance.adapters.native import NativeBroadcastError, make
from tpbcast.harness import RankContext, SyncError, SyncTimeoutError
from tpbcast.harness._observe import stat_fields

SIZES = (0, 1, 7, 4097, 1 << 20)
SHORT = 20.0  # deadlines generous enough for a 4x oversubscribed 2-core box
#: ``run_ranks`` keywords of every native group: one 60 s deadline, and no fail-fast cut,
#: so a rank whose partner failed still reports its own error (at its SHORT deadline).
RUN: dict[str, Any] = {"timeout": 60.0, "fail_fast": False}


def payload(seed: int, size: int) -> bytes:
    return random.Random(seed * 1_000_003 + size).randbytes(size)


def error_details(exc: NativeBroadcastError) -> dict[str, Any]:
    return {
        "type": type(exc).__name__,
        "message": str(exc),
        "rank": exc.rank,
        "peer": exc.peer,
        "phase": exc.phase,
        "errno_name": exc.errno_name,
        "bytes_done": exc.bytes_done,
        "bytes_total": exc.bytes_total,
        "elapsed": exc.elapsed,
        "mro": [c.__name__ for c in type(exc).__mro__],
    }


def native(connect: float = SHORT, init: float = SHORT, io: float = SHORT) -> Any:
    b = make()
    b.set_deadlines(connect=connect, init=init, io=io)
    return b


def roundtrip_rank(
    rank: int, world: int, base: str, seed: int, sizes: tuple[int, ...] = SIZES
) -> list[str]:
    """Broadcast each size once; return the sha256 of what this rank holds after."""
    b = native()
    b.initialize(rank, world, base)
    digests = []
    try:
        for size in sizes:
            buf = bytearray(payload(seed, size) if rank == 0 else b"\xee" * size)
            b.broadcast(buf, root=0)
            digests.append(hashlib.sha256(buf).hexdigest())
    finally:
        b.reset()
    return digests


def expected_digests(seed: int, sizes: tuple[int, ...] = SIZES) -> list[str]:
    return [hashlib.sha256(payload(seed, s)).hexdigest() for s in sizes]


def process_state(pid: int) -> str:
    """``/proc/<pid>/stat`` state letter (``S``, ``T``, ``Z``, ...), or ``gone``."""
    fields = stat_fields(pid)
    return "gone" if fields is None else fields[0].decode()


def open_fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


def wait_until_a_rank_ends(ctx: RankContext, name: str) -> None:
    """Block until another rank of the group has exited (its sockets closed by the kernel).

    ``ctx.sync(name)`` is a barrier the exiting rank never joins (nor may the others):
    RankContext fails it with :class:`SyncError` as soon as a rank it still waits for
    has ended, which is the moment this waits for.  A timeout is a real failure.
    """
    try:
        ctx.sync(name)
    except SyncTimeoutError:
        raise
    except SyncError:
        return
    raise AssertionError(f"rank {ctx.rank}: every rank joined sync({name!r}), none ended")
