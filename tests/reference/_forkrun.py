"""One callable per forked process, on top of ``tpbcast.harness.run_ranks``.

The reference self-tests are written as "one callable per process" (a raw peer
next to a reference rank, a launcher next to an intruder), so ``fork_all``
runs ``funcs[ctx.rank]()`` in rank ``ctx.rank`` of one harness group: the
harness forks, applies ONE deadline, reaps every process and captures its
output.  ``Event`` is a pipe made in the parent before the fork, for ordering
processes without sleeps.
"""

from __future__ import annotations

import contextlib
import os
import select
from collections.abc import Callable, Sequence
from typing import Any

from tpbcast.harness import RankContext, RankOutcome, Status, run_ranks

__all__ = ["Event", "fork_all", "run_group", "values"]

#: Once one process failed, the others get this long to finish (they usually
#: learn of the failure through a closed socket within milliseconds).
FAIL_GRACE = 10.0


class Event:
    """A one-way named point between forked processes (a pipe; no sleeps).

    Create it in the parent before forking; ``notify(n)`` releases ``n`` waits.
    """

    def __init__(self) -> None:
        self.r, self.w = os.pipe()

    def notify(self, times: int = 1) -> None:
        os.write(self.w, b"x" * times)

    def wait(self, timeout: float = 20.0) -> None:
        ready, _, _ = select.select([self.r], [], [], timeout)
        if not ready or os.read(self.r, 1) != b"x":
            raise TimeoutError(f"event not notified within {timeout} s")

    def is_set(self) -> bool:
        """Non-blocking check (consumes one notification when set)."""
        ready, _, _ = select.select([self.r], [], [], 0)
        return bool(ready) and os.read(self.r, 1) == b"x"

    def close(self) -> None:
        for fd in (self.r, self.w):
            with contextlib.suppress(OSError):
                os.close(fd)


def _call(ctx: RankContext, funcs: Sequence[Callable[[], object]]) -> object:
    return funcs[ctx.rank]()


def fork_all(funcs: Sequence[Callable[[], object]], *, timeout: float = 20.0) -> list[RankOutcome]:
    """Run each callable in its own forked process (index = rank); one outcome each."""
    result = run_ranks(
        _call, len(funcs), args=(tuple(funcs),), timeout=timeout, fail_fast_grace=FAIL_GRACE
    )
    return list(result.outcomes)


def run_group(
    target: Callable[..., object],
    world_size: int,
    *,
    args: tuple[object, ...] = (),
    timeout: float = 20.0,
) -> list[RankOutcome]:
    """``target(rank, *args)`` in ``world_size`` forked ranks (index = rank)."""
    return fork_all(
        [lambda r=rank: target(r, *args) for rank in range(world_size)], timeout=timeout
    )


def values(outcomes: Sequence[RankOutcome]) -> list[Any]:
    """The return values, or an AssertionError describing every failed process."""
    bad = [o for o in outcomes if o.status is not Status.OK]
    if bad:
        raise AssertionError("ranks failed:\n" + "\n".join(o.report() for o in bad))
    return [o.value for o in outcomes]
