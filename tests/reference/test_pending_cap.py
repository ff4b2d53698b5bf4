"""Rank 0 holds at most 2*(world_size-1) connections that have not announced their rank.

Each pending connection costs rank 0 an fd and a poll slot until the init deadline; the
accept loop took every connection in the backlog, so a flood of silent connections (a
rogue, a runaway launcher) grew it without bound. Now the one over the cap fails the
bootstrap at once, naming it, the cap and the ones already waiting.
"""

from __future__ import annotations

import contextlib
import os

from tpbcast.harness import RankContext, run_ranks, wire
from tpbcast.reference_impl import CpuTpBroadcaster, HandshakeError

from ._helpers import RAW_WAIT, RUN, fast_config, list_fds, rest_until_closed


def _silent_connections(base_path: str, count: int):
    """Open ``count`` connections that never announce a rank (then notify "opened"); once
    rank 0 notified "done", report what it did to them."""

    def main(ctx: RankContext) -> tuple[int, int, list[bytes]]:
        deadline = wire.Deadline.after(RAW_WAIT)
        socks = [wire.connect(wire.socket_path(base_path), deadline) for _ in range(count)]
        ctx.notify("opened")  # every connect returned: each is in rank 0's accept queue
        ctx.wait("done")
        rests = []
        for sock in socks:
            rests.append(rest_until_closed(sock))  # closed by rank 0: EOF (or a reset)
            sock.close()
        return os.getpid(), len(socks), rests

    return main


def test_a_flood_of_silent_connections_fails_at_the_cap_naming_it(base_path: str) -> None:
    world_size, cap = 3, 4  # cap = 2*(world_size-1)

    def root(ctx: RankContext) -> tuple[BaseException, bool, bool]:
        before = list_fds()
        b = CpuTpBroadcaster(fast_config(init_timeout=6.0))
        try:
            b.initialize(0, world_size, base_path)
        except Exception as exc:
            err: BaseException = exc
        else:
            raise AssertionError("initialize succeeded with only silent connections")
        finally:
            ctx.notify("done")
        return err, list_fds() == before, not os.path.exists(base_path + "_0.sock")

    flood = _silent_connections(base_path, cap + 1)
    (err, fds_restored, socket_gone), (pid, n, rests) = run_ranks(
        {0: root, 1: flood}, **RUN
    ).values()
    # 1. The flood happened: cap + 1 connections were made and none announced a rank.
    assert n == cap + 1 and rests == [b""] * n  # every one closed, never probed
    # 2. The one over the cap failed initialize at once (not at the 6 s init deadline),
    #    naming it, the cap, and every connection already waiting.
    assert isinstance(err, HandshakeError), err
    text = str(err)
    assert "too many connections waiting to announce their rank" in text, text
    assert f"connection {cap + 1} (pid {pid}) would be pending number {cap + 1}" in text
    assert f"cap of {cap} (2*(world_size-1), world_size {world_size})" in text
    for index in range(1, cap + 1):
        assert f"connection {index} (pid {pid}, 0/4 bytes)" in text, text
    assert err.rank == 0 and err.phase == "accept"
    assert err.elapsed is not None and err.elapsed < 3.0, err.elapsed
    assert fds_restored and socket_gone


def test_silent_connections_up_to_the_peer_count_still_let_the_group_form(
    base_path: str,
) -> None:
    """The cap leaves room: n-1 silent connections plus the n-1 real peers fit."""
    world_size = 3

    def root(ctx: RankContext) -> bytes:
        b = CpuTpBroadcaster(fast_config(init_timeout=10.0))
        try:
            b.initialize(0, world_size, base_path)
            data = bytearray(b"formed")
            b.broadcast(data)
            return bytes(data)
        finally:
            with contextlib.suppress(Exception):
                b.reset()
            ctx.notify("done")

    def peer(ctx: RankContext) -> bytes:
        ctx.wait("opened")  # the silent ones are pending first
        b = CpuTpBroadcaster(fast_config(init_timeout=10.0))
        b.initialize(ctx.rank - 1, world_size, base_path)
        data = bytearray(6)
        b.broadcast(data)
        b.reset()
        return bytes(data)

    silent = _silent_connections(base_path, world_size - 1)
    ranks = {0: root, 1: silent, 2: peer, 3: peer}
    sent, (_, n, rests), got1, got2 = run_ranks(ranks, **RUN).values()
    assert n == world_size - 1 and rests == [b""] * n  # dropped once the group formed
    assert sent == got1 == got2 == b"formed"
