"""Fork the ranks of a dispatch group through ``tpbcast.harness.run_ranks``.

The harness forks from this warm process (torch imported, no torch op run:
baseline_perf.md §7), sets ``torch.set_num_threads(1)`` in every rank, applies
ONE deadline, reaps every rank and captures its fd-level output.  A rank's
target gets the harness's ``RankContext`` (``rank``, ``world_size``, a private
short ``workdir`` for the FileStore, ``base_path``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tpbcast.harness import RankContext, RankOutcome, Status, run_ranks

__all__ = ["RankContext", "run_forked", "values"]


def run_forked(
    target: Callable[..., Any],
    world_size: int,
    *,
    args: tuple[Any, ...] = (),
    timeout: float = 60.0,
    fail_grace: float = 15.0,
) -> list[RankOutcome]:
    """Run ``target(ctx, *args)`` in ``world_size`` forked ranks; one outcome per rank.

    Once a rank fails the others get ``fail_grace`` seconds: a gloo peer learns
    of a dead rank only when its own collective fails.
    """
    result = run_ranks(target, world_size, args=args, timeout=timeout, fail_fast_grace=fail_grace)
    return list(result.outcomes)


def values(results: Sequence[RankOutcome]) -> list[Any]:
    """Every rank's return value, or an AssertionError describing each failed rank."""
    bad = [o for o in results if o.status is not Status.OK]
    if bad:
        raise AssertionError("ranks failed:\n" + "\n".join(o.report() for o in bad))
    return [o.value for o in results]
