"""The JSON report (``conformance.json``): writing it and reading it back.

One job, apart from the human-facing renderers in ``_report.py``: a stable,
schema-tagged document (per clause: verdict, duration, failing rank, message,
implementation) that CI tools read and that :func:`suite_from_json` turns back into a
:class:`~._results.SuiteResult`, so runs of several implementations can be merged into
one side-by-side report later.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from ._results import (
    CheckResult,
    ClauseResult,
    ImplementationInfo,
    SuiteResult,
    Verdict,
    counted_checks,
    exit_status,
)
from .spec import DEFAULT_TRANSPORT, Spec, default_spec

__all__ = ["JSON_SCHEMA", "as_runs", "json_document", "suite_from_json"]

JSON_SCHEMA: Final = "tpbcast-conformance-report/2"


def as_runs(suites: SuiteResult | Sequence[SuiteResult]) -> list[SuiteResult]:
    runs = [suites] if isinstance(suites, SuiteResult) else list(suites)
    if not runs:
        raise ValueError("no suite results to report")
    return runs


def _check_json(check: CheckResult) -> dict[str, Any]:
    return {
        "test_id": check.test_id,
        "clause_ids": list(check.clause_ids),
        "verdict": check.verdict.value,
        "duration": round(check.duration, 6),
        "failing_rank": check.failing_rank,
        "message": check.message,
        "details": dict(check.details),
    }


def _expected_json(result: ClauseResult) -> dict[str, Any] | None:
    """The clause's expectation and how the run met it, or None without one."""
    if result.expected is None:
        return None
    outcome = (
        "expected"
        if result.is_expected
        else "regression"
        if result.is_regression
        else "stale"
        if result.is_stale_expectation
        else "not judged"
    )
    return {
        "verdict": result.expected.value,
        "also": [v.value for v in result.expected_also],
        "reason": result.expected_reason,
        "outcome": outcome,
        "shown": result.shown_verdict,
    }


def _suite_json(suite: SuiteResult) -> dict[str, Any]:
    impl = suite.implementation
    impl_json = {"name": impl.name, "version": impl.version, "spec": impl.spec}
    return {
        "schema": JSON_SCHEMA,
        "spec": suite.spec_label,
        "implementation": {
            **impl_json,
            "capabilities": sorted(impl.capabilities),
            "transport": impl.transport,
        },
        "started": suite.started.isoformat(),
        "duration": round(suite.duration, 6),
        "seed": suite.seed,
        "exit_status": exit_status(suite),
        "summary": {
            "clauses": len(suite.clauses),
            "verdicts": {v.value: n for v, n in suite.counts().items()},
            "by_level": {
                lvl: {v.value: n for v, n in counts.items()}
                for lvl, counts in suite.counts_by_level().items()
            },
            "must_failures": [r.clause.id for r in suite.must_failures],
            "must_not_judged": [r.clause.id for r in suite.must_not_judged],
            "not_applicable": [r.clause.id for r in suite.not_applicable],
            "unlocking_capabilities": {
                cap: list(ids) for cap, ids in suite.unlocking_capabilities().items()
            },
            "judged": suite.judgement_summary(),
            "core_unsupported": [u.as_json() for u in suite.core_unsupported()],
            "optional_absent": [r.clause.id for r in suite.optional_absent],
            "expectations": suite.expectations or None,
            "unexpected": [r.clause.id for r in suite.unexpected] if suite.expectations else [],
        },
        "unknown_clause_ids": list(suite.unknown_clause_ids),
        "clauses": [
            {
                "id": r.clause.id,
                "area": r.clause.area,
                "level": r.clause.level,
                "level_by_transport": dict(r.clause.level_by_transport),
                "scope": r.clause.scope,
                "title": r.clause.title,
                "verdict": r.verdict.value,
                "expected": _expected_json(r),
                "duration": round(r.duration, 6),
                "failing_rank": r.failing_rank,
                "message": r.message,
                "check_summary": r.check_summary,
                "checks": [
                    {
                        "test_id": ch.test_id,
                        "verdict": ch.verdict.value,
                        "failing_rank": ch.failing_rank,
                        "message": ch.message,
                    }
                    for ch in r.checks
                ],
                "implementation": impl_json,
            }
            for r in suite.clauses
        ],
        "checks": [_check_json(ch) for ch in suite.checks],
    }


def json_document(suites: SuiteResult | Sequence[SuiteResult]) -> dict[str, Any]:
    """The JSON report: one run's document, or ``{"schema", "runs": [...]}`` for several."""
    runs = as_runs(suites)
    if len(runs) == 1:
        return _suite_json(runs[0])
    return {"schema": JSON_SCHEMA, "runs": [_suite_json(s) for s in runs]}


def suite_from_json(doc: Mapping[str, Any], spec: Spec | None = None) -> SuiteResult:
    """Rebuild a :class:`SuiteResult` from one run's JSON (to merge runs side by side later).

    Clause texts come from ``spec`` (default: the packaged registry); ids the registry no
    longer has are skipped.
    """
    spec = spec or default_spec()
    if doc.get("schema") != JSON_SCHEMA:
        raise ValueError(f"not a {JSON_SCHEMA} document (schema={doc.get('schema')!r})")
    impl = doc["implementation"]
    checks = tuple(
        CheckResult(
            test_id=c["test_id"],
            clause_ids=tuple(c["clause_ids"]),
            verdict=Verdict(c["verdict"]),
            duration=float(c["duration"]),
            failing_rank=c["failing_rank"],
            message=c["message"],
            details=dict(c.get("details", {})),
        )
        for c in doc["checks"]
    )
    by_clause: dict[str, list[CheckResult]] = {}
    for check in checks:
        for cid in check.clause_ids:
            by_clause.setdefault(cid, []).append(check)
    transport = impl.get("transport", DEFAULT_TRANSPORT)
    clauses = tuple(
        ClauseResult(
            clause=spec[c["id"]],
            verdict=Verdict(c["verdict"]),
            # The checks as the run counted them (the raw ones are kept in ``checks``).
            checks=tuple(
                counted_checks(spec[c["id"]].for_transport(transport), by_clause.get(c["id"], ()))
            ),
            expected=Verdict(c["expected"]["verdict"]) if c.get("expected") else None,
            expected_reason=c["expected"]["reason"] if c.get("expected") else "",
            expected_also=tuple(Verdict(v) for v in (c.get("expected") or {}).get("also", ())),
        )
        for c in doc["clauses"]
        if c["id"] in spec
    )
    return SuiteResult(
        implementation=ImplementationInfo(
            spec=impl.get("spec", ""),
            name=impl.get("name", "unknown"),
            version=impl.get("version", ""),
            capabilities=frozenset(impl.get("capabilities", ())),
            transport=transport,
        ),
        spec_label=doc["spec"],
        clauses=clauses,
        checks=checks,
        started=datetime.fromisoformat(doc["started"]),
        duration=float(doc["duration"]),
        seed=doc.get("seed"),
        unknown_clause_ids=tuple(doc.get("unknown_clause_ids", ())),
        expectations=doc.get("summary", {}).get("expectations") or "",
    )
