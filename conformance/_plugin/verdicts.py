"""Verdicts of each test: its check log opened at setup, each phase judged, and at
teardown the per-clause verdicts (rules in :mod:`.._verdicts`) sent to the controller
through the report (:mod:`.codec`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Sequence

import pytest

from tpbcast.conformance import _checks
from tpbcast.conformance._results import ImplementationInfo, Verdict
from tpbcast.conformance._verdicts import Judgement, clause_checks, judge, judge_exception
from tpbcast.fixtures import groups_run, loaded_implementation, settings_of
from tpbcast.harness import CapabilityMissing

from .codec import ReportProperties
from .gate import outside_profile
from .registry import RegistryCheck
from .state import CLAUSES_KEY, DURATION_KEY, LOG_KEY, OUTSIDE_KEY, PHASES_KEY

__all__ = ["pytest_runtest_makereport", "pytest_runtest_setup"]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Open the test's check log before anything of it runs."""
    if CLAUSES_KEY in item.stash:
        item.stash[LOG_KEY] = _checks.begin()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Judge each phase; at teardown attach the test's verdict to the report."""
    report = yield
    if isinstance(item, RegistryCheck) or CLAUSES_KEY not in item.stash:
        return report
    phases = item.stash.setdefault(PHASES_KEY, [])
    item.stash[DURATION_KEY] = item.stash.get(DURATION_KEY, 0.0) + call.duration
    if call.excinfo is None:
        phases.append(None)
        log = item.stash.get(LOG_KEY, None)
        failed = [c for c in log.checks if c.verdict.is_failure] if log is not None else []
        if call.when == "call" and failed and report.outcome == "passed":
            # Soft checks failed: pytest must show the test failed, with every message.
            report.outcome = "failed"
            report.longrepr = "\n\n".join(
                f"failed check {i}/{len(failed)}: {c.message}" for i, c in enumerate(failed, 1)
            )
    else:
        phases.append(judge_exception(call.when, call.excinfo.value, call.excinfo.exconly()))
    if call.when == "setup":
        settings = settings_of(item.config)
        impl = loaded_implementation(item.config)
        info = None
        if impl is not None:
            info = ImplementationInfo(
                name=impl.name,
                version=impl.version,
                capabilities=frozenset(impl.capabilities),
                transport=impl.transport,
            )
        sent = ReportProperties(impl_spec=str(settings.impl), seed=int(settings.seed), impl=info)
        report.user_properties.extend(sent.encode())
    if call.when == "teardown":
        final = judge(phases)
        _checks.end()
        log = item.stash.get(LOG_KEY, None)
        recorded = log.checks if log is not None else []
        cited: tuple[str, ...] = item.stash[CLAUSES_KEY]
        not_asked = _rank_not_asked(item)
        if not_asked:
            recorded, phases = _unsupported_instead_of_fail(recorded, phases, not_asked)
        outside = item.stash.get(OUTSIDE_KEY, None)
        if outside is None:  # setup failed before the profile was read: judge it afresh
            outside = outside_profile(item, cited)
        per_clause = clause_checks(cited, recorded, phases, not_applicable=outside)
        if final.verdict is Verdict.PASS and any(c.verdict.is_failure for c in per_clause):
            # Soft checks failed although no phase raised: the test as a whole failed.
            worst = next(c for c in per_clause if c.verdict.is_failure)
            final = Judgement(worst.verdict, worst.message, worst.rank, worst.clause_id)
        sent = ReportProperties(
            checks=tuple(per_clause),
            verdict=final.verdict,
            duration=item.stash[DURATION_KEY],
            message=final.message or None,
            failing_rank=final.failing_rank,
        )
        report.user_properties.extend(sent.encode())
    return report


def _rank_not_asked(item: pytest.Item) -> str:
    """Why a rank of the test could not be judged, if one raised ``CapabilityMissing``
    (an adapter's ``EngineNotAsked``, an undeclared capability) and its group was run to
    expect failures: the test then judged that rank's status as the implementation's."""
    for result in groups_run(item):
        for outcome in result.outcomes:
            if isinstance(outcome.exception, CapabilityMissing):
                return f"rank {outcome.rank}: {outcome.exception}"
    return ""


def _unsupported_instead_of_fail(
    recorded: Sequence[_checks.Check], phases: Sequence[Judgement | None], why: str
) -> tuple[list[_checks.Check], list[Judgement | None]]:
    """Every FAIL of a test in which a rank was never judged becomes UNSUPPORTED.

    A rank that raised ``CapabilityMissing`` stopped before doing its part, so whatever
    the test concluded from that rank's status or from its missing part is the adapter's
    decision, not the implementation's: never PASS (nothing passed there) and never FAIL.
    """
    checks = [
        dataclasses.replace(c, verdict=Verdict.UNSUPPORTED, message=f"{c.message} ({why})")
        if c.verdict is Verdict.FAIL
        else c
        for c in recorded
    ]
    judged = [
        dataclasses.replace(p, verdict=Verdict.UNSUPPORTED, message=f"{p.message} ({why})")
        if p is not None and p.verdict is Verdict.FAIL
        else p
        for p in phases
    ]
    return checks, judged
