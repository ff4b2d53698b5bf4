"""Mixed groups: C ranks and Python reference ranks share one wire-v1 group.

Our stand-in for "a Python rank interoperates with a C++ upstream rank": the C
example is written from the DESIGN.md byte description alone, the reference
from the same text in Python; if either drifted from wire v1, bytes or the
handshake would break here.
"""

from __future__ import annotations

import hashlib
import os
import signal

import pytest

from tpbcast.conformance.adapters.native import make as make_native
from tpbcast.harness import Status, run_ranks

from . import _ranks

reference = pytest.importorskip("tpbcast.reference_impl.conformance_adapter")

SIZES = (*_ranks.SIZES, 3, 65537)


def _rank(ctx, roles: list[str], base: str, seed: int):
    kind, rank, world = roles[ctx.rank], ctx.rank, ctx.world_size
    b = make_native() if kind == "C" else reference.make()
    b.set_deadlines(connect=_ranks.SHORT, init=_ranks.SHORT, io=_ranks.SHORT)
    b.initialize(rank, world, base)
    digests = []
    try:
        for size in SIZES:
            buf = bytearray(_ranks.payload(seed, size) if rank == 0 else b"\xee" * size)
            b.broadcast(buf, root=0)
            digests.append(hashlib.sha256(buf).hexdigest())
        # several buffers back to back in one call, split differently on each side
        whole = _ranks.payload(seed + 1, 300)
        if rank == 0:
            b.broadcast([bytearray(whole[:100]), bytearray(whole[100:])])
            digests.append(hashlib.sha256(whole).hexdigest())
        else:
            parts = [bytearray(250), bytearray(50)]
            b.broadcast(parts)
            digests.append(hashlib.sha256(b"".join(parts)).hexdigest())
    finally:
        b.reset()
    return kind, type(b).__name__, digests


@pytest.mark.parametrize(
    "kinds",
    ["C+py", "py+C", "C+py+py+py", "py+C+C+C", "C+py+C+py", "py+C+py+C"],
)
def test_mixed_group_moves_identical_bytes(kinds, base_path):
    roles = kinds.split("+")
    world = len(roles)
    seed = int.from_bytes(os.urandom(4), "little")
    got = run_ranks(_rank, world, args=(roles, base_path, seed), **_ranks.RUN).values()
    assert [impl for _, impl, _ in got] == [
        "NativeBroadcaster" if k == "C" else "ReferenceAdapter" for k in roles
    ], "each rank must run the implementation the test asked for"
    want = [hashlib.sha256(_ranks.payload(seed, s)).hexdigest() for s in SIZES]
    want.append(hashlib.sha256(_ranks.payload(seed + 1, 300)).hexdigest())
    for rank, (kind, _, digests) in enumerate(got):
        assert digests == want, f"rank {rank} ({kind}) got other bytes (seed {seed})"
    assert os.listdir(os.path.dirname(base_path)) == []


@pytest.mark.parametrize("root_kind", ["C", "py"])
def test_mixed_peer_death_is_reported_by_either_root(root_kind, base_path):
    """The other implementation's peer dies; the root names it, never "Success"."""
    peer_kind = "py" if root_kind == "C" else "C"

    def root(ctx):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        b = make_native() if root_kind == "C" else reference.make()
        b.set_deadlines(connect=_ranks.SHORT, init=_ranks.SHORT, io=_ranks.SHORT)
        b.initialize(0, 2, base_path)
        _ranks.wait_until_a_rank_ends(ctx, "gone")
        try:
            b.broadcast(bytearray(1 << 20))
        except Exception as exc:
            return type(exc).__name__, str(exc), getattr(exc, "peer", None)
        finally:
            b.reset()
        return None

    def peer(ctx):
        b = make_native() if peer_kind == "C" else reference.make()
        b.set_deadlines(connect=_ranks.SHORT, init=_ranks.SHORT, io=_ranks.SHORT)
        b.initialize(1, 2, base_path)
        return "died"

    out = run_ranks({0: root, 1: peer}, **_ranks.RUN)
    assert out.outcomes[0].status is Status.OK, out.report()
    result, died = out.values()
    assert died == "died" and result is not None, "the root did not notice the dead peer"
    name, message, peer_field = result
    assert "PeerClosed" in name and peer_field == 1
    assert "Success" not in message
