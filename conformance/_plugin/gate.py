"""The transport gate: a test is judged only on the clauses of the implementation's
transport profile; the others are NOT_APPLICABLE, and a test staged through another
transport (``staged_via``) is not run (its core clauses: UNSUPPORTED, not staged)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pytest

from tpbcast.conformance._verdicts import NotApplicable, NotStaged
from tpbcast.conformance.spec import Spec
from tpbcast.fixtures import loaded_implementation

from .registry import staged_via
from .state import CLAUSES_KEY, OUTSIDE_KEY, SPEC_KEY

if TYPE_CHECKING:
    from tpbcast.harness import Implementation

__all__ = ["_tpbcast_transport_profile", "outside_profile"]


@pytest.fixture(autouse=True)
def _tpbcast_transport_profile(request: pytest.FixtureRequest) -> None:
    """Judge a test only on the clauses of the implementation's transport profile.

    Cited clauses of another transport's scope are NOT_APPLICABLE (recorded for
    :func:`clause_checks`); a test citing only such clauses, or staged through another
    transport (``staged_via``), is not run at all.
    """
    item = request.node
    cited: tuple[str, ...] = item.stash.get(CLAUSES_KEY, ())
    spec = item.config.stash[SPEC_KEY]
    via = staged_via(item)
    if not cited or (via is None and all(spec[cid].every_transport for cid in cited)):
        item.stash[OUTSIDE_KEY] = {}
        return  # judged on every transport: no need to load the implementation here
    impl: Implementation = request.getfixturevalue("tpbcast_impl")
    outside = _outside(spec, cited, impl)
    item.stash[OUTSIDE_KEY] = outside
    if len(outside) == len(cited):
        raise NotApplicable("NOT_APPLICABLE: " + "; ".join(outside.values()))
    if via is not None and impl.transport not in via:
        raise NotStaged(
            f"not staged: the test stages its fault through {' or '.join(via)} (a rogue peer "
            f"or root, a socket trick), which {impl.name!r} (transport {impl.transport!r}) "
            "does not speak"
        )


def _outside(spec: Spec, cited: Sequence[str], impl: Implementation) -> dict[str, str]:
    """The cited clauses outside ``impl``'s transport profile, each with why."""
    return {
        cid: f"{cid} has scope {spec[cid].scope}; {impl.name!r} declares transport "
        f"{impl.transport!r}"
        for cid in cited
        if not spec[cid].applies_to(impl.transport)
    }


def outside_profile(item: pytest.Item, cited: Sequence[str]) -> dict[str, str]:
    """:func:`_outside` for a test whose setup failed before the profile was read (none if
    the implementation never loaded: then every clause's check is the setup ERROR)."""
    impl = loaded_implementation(item.config)
    return {} if impl is None else _outside(item.config.stash[SPEC_KEY], cited, impl)
