"""The hint channel against tpbcast's seed faults: rogue peers and a stale socket.

Each fault fixture stages the fault and proves it happened (``.proof(result)``) before the
test judges how distmean reacted; a mapping ``{rank: target}`` mixes distmean's own ranks
with the rogue.
"""

from __future__ import annotations

import distmean
import pytest

from tpbcast.harness import RankContext, Status


def hint_rank(ctx: RankContext) -> tuple[int, ...]:
    with distmean.open_hint_channel(ctx.rank, ctx.world_size, ctx.base_path) as channel:
        return channel.share((8, 128) if ctx.rank == 0 else ())


@pytest.mark.world_size(2, 3)
def test_peers_get_rank0s_shape(tpbcast_run, world_size):
    result = tpbcast_run(hint_rank)

    assert [o.value for o in result.outcomes] == [(8, 128)] * world_size


def test_a_peer_announcing_a_bad_rank_is_refused(tpbcast_run, tpbcast_bad_peer_rank):
    rogue = tpbcast_bad_peer_rank.peer(rank=5, observe=3.0)

    result = tpbcast_run({0: hint_rank, 1: rogue}, expect_failure=True)

    report = tpbcast_bad_peer_rank.proof(result)  # rank 5 went out on the wire
    assert report.probe is None  # ... and was never accepted
    opened = result.outcomes[0]
    assert opened.status is Status.RAISED and opened.exc_type.endswith("HandshakeError")
    assert "5" in opened.exc_message


def test_a_wrong_probe_is_refused_by_every_peer(tpbcast_run, tpbcast_probe_mismatch):
    root = tpbcast_probe_mismatch.root(probe=0x13, observe=3.0)

    result = tpbcast_run({0: root, 1: hint_rank, 2: hint_rank}, expect_failure=True)

    tpbcast_probe_mismatch.proof(result)  # both peers were sent 0x13
    for peer in result.outcomes[1:]:
        assert peer.status is Status.RAISED and peer.exc_type.endswith("HandshakeError")


def test_a_stale_socket_left_by_a_crashed_rank0_is_replaced(tpbcast_run, tpbcast_stale_socket):
    result = tpbcast_run(tpbcast_stale_socket.wrap(hint_rank), 3)

    assert tpbcast_stale_socket.proof(result).endswith("_0.sock")
    assert [o.value for o in result.outcomes] == [(8, 128)] * 3
