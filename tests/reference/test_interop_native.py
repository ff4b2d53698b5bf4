"""Mixed groups with an independent C implementation of wire v1 (the native example).

The closest stand-in for "a Python rank in a group with RTP-LLM's C++ ranks":
libcbcast (tpbcast.conformance.adapters.native, written in C from the same
byte sequence) takes either role next to reference ranks.  Skipped when no C
compiler is available.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tpbcast.harness import RankContext, run_ranks
from tpbcast.reference_impl import CpuTpBroadcaster

from ._helpers import RUN, fast_config, payload

SIZES = (1, 0, 3 << 20, 4099)


@pytest.fixture(scope="module")
def native_make() -> Callable[[], object]:
    native = pytest.importorskip("tpbcast.conformance.adapters.native")
    try:
        native.library_path()
        native.make()  # loads the library in the parent: forked ranks inherit it
    except Exception as exc:  # no compiler, build failure: not our subject here
        pytest.skip(f"native example unavailable: {exc}")
    return native.make


def _rank(kind: str, rank: int, world_size: int, base: str, native_make: Callable[[], object]):
    def main(ctx: RankContext) -> list[bytes]:
        if kind == "py":
            b: object = CpuTpBroadcaster(fast_config())
        else:
            b = native_make()
            b.set_deadlines(connect=10, init=10, io=10)  # type: ignore[attr-defined]
        b.initialize(rank, world_size, base)  # type: ignore[attr-defined]
        expected = [payload(80 + i, n) for i, n in enumerate(SIZES)]
        bufs = [bytearray(x) if rank == 0 else bytearray(len(x)) for x in expected]
        b.broadcast(bufs)  # type: ignore[attr-defined]
        b.broadcast(bufs[2])  # type: ignore[attr-defined]
        b.reset()  # type: ignore[attr-defined]
        assert bufs == expected
        return [bytes(x[:8]) for x in bufs]

    return main


@pytest.mark.parametrize(
    "kinds",
    [("py", "c", "py"), ("c", "py", "c"), ("c", "py", "py"), ("py", "c", "c")],
    ids=["py-root+c-peer", "c-root+py-peer", "c-root+py-peers", "py-root+c-peers"],
)
def test_reference_and_native_in_one_group(
    base_path: str, kinds: tuple[str, ...], native_make: Callable[[], object]
) -> None:
    world_size = len(kinds)
    ranks = {r: _rank(k, r, world_size, base_path, native_make) for r, k in enumerate(kinds)}
    results = run_ranks(ranks, **(RUN | {"timeout": 30.0})).values()
    assert all(r == results[0] for r in results)
