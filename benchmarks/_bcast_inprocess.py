"""Where the reference's extra time goes at small sizes, measured in ONE process.

``bench_broadcast.py``'s rounds cross processes: wake-ups and scheduling are part of every
number.  Here both ends live in one thread, so a round is pure CPU and the differences
between methods are the code itself:

- ``raw``: blocking ``sendall`` + ``recv_into`` on a socket pair (the raw star's calls);
- ``raw + poll``: non-blocking ``send`` + one ``poll`` + ``recv_into`` (the syscalls a
  reader with a deadline and an abort pipe makes, no Python around them);
- ``implementation``: rank 0's ``broadcast`` then the peer's ``broadcast`` of the same
  buffer (through the adapter, as in the cross-process run); the peer finds the bytes
  already there, so nothing waits.

So ``raw + poll - raw`` is what the peer's ``poll`` costs, and ``implementation - (raw +
poll)`` is the implementation's Python per round (both sides, the adapter's one-line
wrapper call included).  It runs in the benchmark's parent process, unpinned.  Methods run in
interleaved blocks (rotating order); each value is the median over blocks of the mean
round time in a block.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

SIZE = 64  # bytes per round: the small-size goal's smallest cell
_FLAGS = getattr(socket, "MSG_NOSIGNAL", 0)


def _pair_of_ranks(impl: Any, io_deadline: float, workdir: str) -> tuple[Any, Any]:
    """Rank 0 and rank 1 of a 2-rank group in this process (rank 0 bootstraps in a thread:
    initialize returns only once both ends are connected).  On failure both are reset and
    rank 0's thread is joined before the error leaves."""
    base = os.path.join(workdir, "g")
    ranks = [impl.create(), impl.create()]
    for rank in ranks:
        if impl.supports("deadlines"):
            rank.set_deadlines(connect=30.0, init=30.0, io=io_deadline)
    failure: list[BaseException] = []

    def root() -> None:
        try:
            ranks[0].initialize(0, 2, base)
        except BaseException as exc:  # reported below, in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=root, name="bench-inprocess-rank0", daemon=True)
    thread.start()
    try:
        ranks[1].initialize(1, 2, base)
        thread.join(60.0)
        if thread.is_alive() or failure:
            raise RuntimeError(f"in-process rank 0 did not come up: {failure or 'it hung'}")
    except BaseException:
        _reset_all(ranks)  # a rank 0 still accepting gives up at its init deadline
        thread.join(60.0)
        raise
    return ranks[0], ranks[1]


def _reset_all(ranks: list[Any]) -> None:
    for rank in ranks:
        with contextlib.suppress(Exception):
            rank.reset()


def measure(
    impl: Any, *, io_deadline: float, blocks: int = 30, per_block: int = 2000
) -> dict[str, Any]:
    """Median round time (µs) per method; see the module docstring."""
    src = memoryview(bytearray(os.urandom(SIZE)))
    dst = memoryview(bytearray(SIZE))
    workdir = tempfile.mkdtemp(prefix="tpbip", dir="/tmp")
    sockets: list[socket.socket] = []
    ranks: list[Any] = []
    try:
        blocking = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        polled = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        sockets += [*blocking, *polled]
        for sock in polled:
            sock.setblocking(False)
        poller = select.poll()
        poller.register(polled[1].fileno(), select.POLLIN)
        root, peer = _pair_of_ranks(impl, io_deadline, workdir)
        ranks += [root, peer]

        def raw() -> None:
            blocking[0].sendall(src)
            blocking[1].recv_into(dst)

        def raw_poll() -> None:
            polled[0].send(src, _FLAGS)
            poller.poll(30_000)
            polled[1].recv_into(dst)

        def implementation() -> None:
            root.broadcast(src)
            peer.broadcast(dst)

        methods: list[tuple[str, Callable[[], None]]] = [
            ("raw", raw),
            ("raw + poll", raw_poll),
            ("implementation", implementation),
        ]
        block_means: dict[str, list[float]] = {name: [] for name, _ in methods}
        implementation()  # one checked round first: the peer must get rank 0's bytes
        if bytes(dst) != bytes(src):
            raise AssertionError("in-process round: the peer did not receive rank 0's bytes")
        for block in range(blocks):
            shift = block % len(methods)
            for name, call in methods[shift:] + methods[:shift]:
                t0 = time.perf_counter_ns()
                for _ in range(per_block):
                    call()
                block_means[name].append((time.perf_counter_ns() - t0) / per_block / 1000.0)
    finally:
        _reset_all(ranks)
        for sock in sockets:
            sock.close()
        shutil.rmtree(workdir, ignore_errors=True)
    us = {name: statistics.median(means) for name, means in block_means.items()}
    return {
        "size": SIZE,
        "blocks": blocks,
        "per_block": per_block,
        "us": us,
        "spread": {name: [min(m), max(m)] for name, m in block_means.items()},
        "poll_us": us["raw + poll"] - us["raw"],
        "python_us": us["implementation"] - us["raw + poll"],
    }
