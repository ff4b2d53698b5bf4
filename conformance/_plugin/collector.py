"""The controller's side: every report's verdicts collected (:mod:`.codec`), aggregated
per clause at the end, the reports written and the exit status set; the terminal summary.

pytest's own "some test failed" status is replaced, so a failing SHOULD test does not fail
CI; interrupted runs and usage errors keep their status.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest

from tpbcast.conformance._expectations import Expectations, apply_expectations
from tpbcast.conformance._results import (
    CheckResult,
    ClauseResult,
    ImplementationInfo,
    SuiteResult,
    Verdict,
    aggregate,
)
from tpbcast.conformance.spec import Clause, Spec

from .codec import ReportProperties
from .state import REGISTRY_ITEM, REPORT_DIR_DEFAULT

__all__ = ["ResultCollector", "report_dir"]


@dataclass
class ResultCollector:
    """Controller-side plugin: collects verdicts, writes reports, sets the exit status."""

    config: pytest.Config
    spec: Spec
    chosen: tuple[Clause, ...] | None
    expectations: Expectations | None = None
    checks: list[CheckResult] = field(default_factory=list)
    clauses_by_node: dict[str, tuple[str, ...]] = field(default_factory=dict)
    impl: ImplementationInfo | None = None
    impl_spec: str = ""
    seed: int | None = None
    registry_problems: str | None = None
    started: float = field(default_factory=time.monotonic)
    suite: SuiteResult | None = None
    written: tuple[Path, ...] = ()
    write_error: str | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Turn each finished test's properties into check results."""
        if report.nodeid.endswith(REGISTRY_ITEM):
            if report.when == "call" and report.failed:
                self.registry_problems = report.longreprtext
            return
        got = ReportProperties.decode(report.user_properties)
        if got.clauses:
            self.clauses_by_node[report.nodeid] = got.clauses
        if got.impl_spec is not None and not self.impl_spec:
            self.impl_spec = got.impl_spec
        if got.seed is not None and self.seed is None:
            self.seed = got.seed
        if got.impl is not None and self.impl is None:
            self.impl = dataclasses.replace(got.impl, spec=self._impl_spec())
        if report.when == "teardown" and got.checks is not None:
            duration = report.duration if got.duration is None else got.duration
            self.checks.extend(
                CheckResult(
                    test_id=report.nodeid,
                    clause_ids=(check.clause_id,),
                    verdict=check.verdict,
                    duration=duration,
                    failing_rank=check.rank,
                    message=check.message,
                )
                for check in got.checks
            )
        elif report.when not in ("setup", "call", "teardown") and report.failed:
            # xdist reports a crashed worker's test with when="???": no verdict reached.
            self.checks.append(
                CheckResult(
                    test_id=report.nodeid,
                    clause_ids=self.clauses_by_node.get(report.nodeid, ()),
                    verdict=Verdict.ERROR,
                    duration=report.duration,
                    message=f"the test process crashed: {report.longreprtext[-2000:]}",
                )
            )

    def _impl_spec(self) -> str:
        return self.impl_spec or str(getattr(self.config.option, "tpbcast_impl", None) or "")

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Aggregate per clause, write the reports, set the exit status."""
        if self.registry_problems is not None:
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
            return
        if int(exitstatus) in _KEEP_STATUS or self.config.option.collectonly:
            return
        self.suite = aggregate(
            self.spec,
            self.checks,
            implementation=self.impl or ImplementationInfo(spec=self._impl_spec()),
            clauses=self.chosen,
            duration=time.monotonic() - self.started,
            seed=self.seed,
        )
        if self.expectations is not None:
            self.suite = apply_expectations(self.suite, self.expectations)
        try:
            self.written = _write_reports(self.suite, report_dir(self.config), self.spec)
        except OSError as exc:
            self.write_error = f"could not write the reports: {exc}"
        session.exitstatus = self.suite.exit_status

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """The per-level verdict counts, MUST failures and where the reports went."""
        tr = terminalreporter
        if self.registry_problems is not None:
            tr.section("tpbcast conformance: registry check failed", red=True)
            tr.write_line(self.registry_problems)
            return
        if self.suite is None:
            return
        tr.section("tpbcast conformance")
        impl = self.suite.implementation
        tr.write_line(f"implementation: {impl.label} (transport {impl.transport})")
        for level, counts in self.suite.counts_by_level().items():
            shown = ", ".join(f"{v.value} {n}" for v, n in counts.items() if n)
            tr.write_line(f"{level:<6} {shown or '-'}")
        tr.write_line(f"judged: {self.suite.judgement_summary()}")
        tr.write_line(_core_unsupported_line(self.suite))
        absent = [r.clause.id for r in self.suite.optional_absent]
        if absent:
            tr.write_line(f"MAY options absent (allowed): {', '.join(absent)}")
        if self.suite.expectations:
            _write_expectation_lines(tr, self.suite)
        else:
            for failure in self.suite.must_failures:
                tr.write_line(f"MUST {failure.verdict.value}: {_failure_line(failure)}")
        for path in self.written:
            tr.write_line(f"report: {path}")
        if self.write_error:
            tr.write_line(self.write_error, red=True)
        tr.write_line(f"conformance {_status_text(self.suite)}")


def _core_unsupported_line(suite: SuiteResult) -> str:
    """How many core clauses were UNSUPPORTED and, for each, what was not declared."""
    unjudged = suite.core_unsupported()
    shown = "; ".join(u.label for u in unjudged)
    return f"core UNSUPPORTED {len(unjudged)}" + (f": {shown}" if shown else "")


def _failure_line(result: ClauseResult) -> str:
    rank = f" (rank {result.failing_rank})" if result.failing_rank is not None else ""
    first = result.message.splitlines()[0] if result.message else ""
    return f"{result.clause.id}{rank}" + (f": {first}" if first else "")


def _write_expectation_lines(tr: Any, suite: SuiteResult) -> None:
    """Known results one line each, then every unexpected one with what was observed."""
    expected, unexpected = suite.expected_results, suite.unexpected
    tr.write_line(
        f"expectations: {suite.expectations}: {len(expected)} as expected, "
        f"{len(unexpected)} unexpected"
    )
    for r in expected:
        tr.write_line(f"{r.clause.level} {r.clause.id}: {r.shown_verdict}")
    for r in unexpected:
        what = "stale expectation" if r.is_stale_expectation else "regression"
        tr.write_line(
            f"UNEXPECTED ({what}) {r.clause.level} {r.shown_verdict}: {_failure_line(r)}",
            red=True,
        )


def _status_text(suite: SuiteResult) -> str:
    if suite.expectations:
        if suite.exit_status:
            return f"FAILED ({len(suite.unexpected)} unexpected result(s))"
        return f"passed ({len(suite.expected_results)} result(s) as expected)"
    return "FAILED (a MUST clause failed)" if suite.exit_status else "passed"


_KEEP_STATUS: Final = frozenset(
    {
        int(pytest.ExitCode.INTERRUPTED),
        int(pytest.ExitCode.INTERNAL_ERROR),
        int(pytest.ExitCode.USAGE_ERROR),
        int(pytest.ExitCode.NO_TESTS_COLLECTED),
    }
)


def report_dir(config: pytest.Config) -> Path:
    """Where the run's reports go (``--tpbcast-report-dir``, relative to the invocation dir)."""
    raw = config.getoption("tpbcast_report_dir") or REPORT_DIR_DEFAULT
    path = Path(raw)
    return path if path.is_absolute() else config.invocation_params.dir / path


def _write_reports(suite: SuiteResult, directory: Path, spec: Spec) -> tuple[Path, ...]:
    from tpbcast.conformance import _report

    files = _report.write_reports(suite, directory, spec=spec)
    return (files.html, files.json, files.markdown)
