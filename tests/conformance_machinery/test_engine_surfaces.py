"""An engine without what a clause is about FAILs it; a staging nobody could do is UNSUPPORTED.

Two aggregation rules of ``tpbcast.conformance._results``, on synthetic checks whose messages
come from the real classes (``EngineNotAsked``, ``_support.staged_elsewhere``):

- an adapter's ``EngineNotAsked`` naming a surface a clause is *about* (the registry's
  ``about``: BCAST-2 about ``lifecycle``) is that clause's FAIL, since the engine lacks what
  it requires; the same report on any other clause stays UNSUPPORTED (never asked), and a
  surface the adapter stands in for (``process_group``) decides no clause;
- a clause every test of which deferred to another staging ("not staged by this test") was
  staged by none: UNSUPPORTED, never NOT_TESTED ("not run") and never PASS.

And the suite's reading of ``is_initialized`` where the engine has no such state: a value that
equals no bool, so a check that wants ``False`` does not hold on it.
"""

from __future__ import annotations

import pytest

from tpbcast.conformance import CheckResult, ImplementationInfo, Verdict, aggregate, default_spec
from tpbcast.conformance._checks import begin, end
from tpbcast.conformance._report_json import json_document, suite_from_json
from tpbcast.conformance._results import surfaces_of_message
from tpbcast.conformance.tests import _support as s
from tpbcast.harness import EngineNotAsked

_IMPL = ImplementationInfo(name="engine", capabilities=frozenset(), transport="shm")


def _lacks(surface: str | None) -> str:
    return f"rank 0: {EngineNotAsked('not_initialized', 'there is no queue', 'engine', surface)}"


def _verdicts(*checks: CheckResult) -> dict[str, Verdict]:
    suite = aggregate(default_spec(), list(checks), implementation=_IMPL)
    return {r.clause.id: r.verdict for r in suite.clauses if r.checks}


def test_the_registry_says_which_clauses_are_about_a_surface() -> None:
    about = {c.id: c.about for c in default_spec().clauses if c.about}
    assert about == {
        "INIT-12": ("lifecycle",),
        "BCAST-2": ("lifecycle",),
        "BCAST-11": ("receive_buffers",),
        "RESET-4": ("lifecycle",),
    }


def test_surfaces_are_read_from_the_real_message() -> None:
    assert surfaces_of_message(_lacks("lifecycle")) == ("lifecycle",)
    assert surfaces_of_message(_lacks(None)) == ()
    assert surfaces_of_message("INIT-6: not stageable on this implementation: x") == ()


@pytest.mark.parametrize(
    ("clause", "surface", "verdict"),
    [
        ("BCAST-2", "lifecycle", Verdict.FAIL),  # the clause's own subject: the engine lacks it
        ("BCAST-2", "process_group", Verdict.UNSUPPORTED),  # an adapter stand-in: not asked
        ("BCAST-2", None, Verdict.UNSUPPORTED),  # no surface named: the adapter's own check
        ("FAULT-10", "lifecycle", Verdict.UNSUPPORTED),  # not about it: the staging was lost
        ("BCAST-11", "receive_buffers", Verdict.FAIL),
    ],
)
def test_engine_not_asked_fails_only_the_clauses_about_its_surface(
    clause: str, surface: str | None, verdict: Verdict
) -> None:
    got = _verdicts(CheckResult("t::x", (clause,), Verdict.UNSUPPORTED, message=_lacks(surface)))
    assert got == {clause: verdict}


def test_the_fail_says_what_the_engine_lacks_and_keeps_the_adapters_report() -> None:
    suite = aggregate(
        default_spec(),
        [CheckResult("t::x", ("RESET-4",), Verdict.UNSUPPORTED, message=_lacks("lifecycle"))],
        implementation=_IMPL,
    )
    (check,) = suite.clause("RESET-4").checks
    assert check.message.startswith("RESET-4: the engine has no not-initialized state")
    assert "there is no queue" in check.message


def _deferred(cid: str, other: str) -> CheckResult:
    log = begin()
    try:
        s.staged_elsewhere(cid, False, "its precondition did not hold", other)
    finally:
        end()
    (check,) = log.checks
    return CheckResult(f"t::{other}-defers", (cid,), check.verdict, message=check.message)


def test_a_clause_every_test_deferred_is_unsupported_not_untested() -> None:
    both = _verdicts(_deferred("INIT-11", "t::b"), _deferred("INIT-11", "t::a"))
    assert both == {"INIT-11": Verdict.UNSUPPORTED}
    staged = CheckResult("t::b", ("INIT-11",), Verdict.PASS, message="INIT-11: held")
    assert _verdicts(_deferred("INIT-11", "t::b"), staged) == {"INIT-11": Verdict.PASS}
    # A staging through another transport staged nothing either: the deferral's reason wins
    # over the generic "not staged on this transport".
    wire = CheckResult("t::w", ("INIT-11",), Verdict.NOT_APPLICABLE, message="uds-v1 rogue")
    suite = aggregate(
        default_spec(),
        [_deferred("INIT-11", "t::b"), _deferred("INIT-11", "t::a"), wire],
        implementation=_IMPL,
    )
    result = suite.clause("INIT-11")
    assert result.verdict is Verdict.UNSUPPORTED
    assert "its precondition did not hold" in result.deciding_check.message


def test_the_json_read_back_counts_the_checks_as_the_run_did() -> None:
    checks = [
        CheckResult("t::x", ("BCAST-2",), Verdict.UNSUPPORTED, message=_lacks("lifecycle")),
        _deferred("INIT-11", "t::b"),
        _deferred("INIT-11", "t::a"),
    ]
    suite = aggregate(default_spec(), checks, implementation=_IMPL)
    again = suite_from_json(json_document(suite), default_spec())
    for cid in ("BCAST-2", "INIT-11"):
        assert again.clause(cid).verdict is suite.clause(cid).verdict
        assert again.clause(cid).checks == suite.clause(cid).checks


class _NoLifecycle:
    def is_initialized(self) -> bool:
        raise EngineNotAsked("is_initialized", "no state to ask", "engine", "lifecycle")


class _Lifecycle:
    def is_initialized(self) -> bool:
        return False


def test_an_engine_without_the_state_never_reads_as_not_initialized() -> None:
    seen = s.initialized(_NoLifecycle())
    assert isinstance(seen, s.NotAsked)
    assert seen != False  # noqa: E712 - the point: INIT-12's "is false" never holds on it
    assert seen != True  # noqa: E712
    assert "no state to ask" in str(seen)
    assert s.initialized(_Lifecycle()) is False
