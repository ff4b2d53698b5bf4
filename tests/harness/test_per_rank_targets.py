"""run_ranks with a mapping rank -> target: each rank runs its own code, checked up front."""

from __future__ import annotations

import os

import pytest

from tpbcast.harness import RankContext, Status, run_ranks


def _double(ctx: RankContext) -> tuple[str, int]:
    return ("double", ctx.rank * 2)


def _pid(ctx: RankContext) -> tuple[str, int]:
    return ("pid", os.getpid())


def _boom(ctx: RankContext) -> None:
    raise ValueError(f"rank {ctx.rank} refuses")


def test_each_rank_runs_its_own_target() -> None:
    result = run_ranks({0: _double, 1: _pid, 2: _double}, timeout=20.0)
    assert result.ok, result.report()
    values = [o.value for o in result.outcomes]
    assert values[0] == ("double", 0) and values[2] == ("double", 4)
    assert values[1] == ("pid", result.outcomes[1].pid)


def test_world_size_defaults_to_the_mapping_and_may_be_given() -> None:
    assert run_ranks({0: _double, 1: _double}, 2, timeout=20.0).world_size == 2
    assert run_ranks({1: _double, 0: _double}, timeout=20.0).world_size == 2


def test_args_and_failures_are_per_rank() -> None:
    result = run_ranks({0: _double, 1: _boom}, timeout=20.0, fail_fast=False)
    assert result.outcomes[0].status is Status.OK
    assert result.outcomes[1].status is Status.RAISED
    assert result.outcomes[1].exc_message == "rank 1 refuses"


@pytest.mark.parametrize(
    ("targets", "size", "words"),
    [
        ({0: _double, 2: _double}, None, "missing rank(s) [1], unexpected key(s) [2]"),
        ({0: _double, 1: _double}, 3, "missing rank(s) [2], unexpected key(s) []"),
        ({0: _double, "1": _double}, None, "unexpected key(s) ['1']"),
    ],
    ids=["gap", "short", "str-key"],
)
def test_a_mapping_must_cover_every_rank(targets: dict, size: int | None, words: str) -> None:
    with pytest.raises(ValueError, match="one target for each rank") as info:
        run_ranks(targets, size, timeout=5.0)
    assert words in str(info.value)


def test_uncallable_targets_are_refused_by_rank() -> None:
    with pytest.raises(TypeError, match="the target of rank 1 is not callable: 'oops'"):
        run_ranks({0: _double, 1: "oops"}, timeout=5.0)  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="a callable or a mapping rank -> callable, got int"):
        run_ranks(3, 2, timeout=5.0)  # type: ignore[arg-type]


def test_one_callable_still_needs_a_world_size() -> None:
    with pytest.raises(ValueError, match="world_size is required when target is one callable"):
        run_ranks(_double, timeout=5.0)
