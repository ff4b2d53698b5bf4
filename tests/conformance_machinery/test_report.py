"""Verdict aggregation, exit status and the JSON / markdown / HTML reports, on synthetic data."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import tpbcast.conformance as facade
from tpbcast.conformance import (
    CheckResult,
    Column,
    ImplementationInfo,
    ReportRow,
    Spec,
    SuiteResult,
    Verdict,
    aggregate,
    default_columns,
    default_spec,
    exit_status,
    json_document,
    render_html,
    render_report_markdown,
    suite_from_json,
    write_reports,
)
from tpbcast.conformance._results import aggregate_verdict

from ._synthetic import all_pass_suite, synthetic_checks, synthetic_suite

P, F, U, E, N, A = (
    Verdict.PASS,
    Verdict.FAIL,
    Verdict.UNSUPPORTED,
    Verdict.ERROR,
    Verdict.NOT_TESTED,
    Verdict.NOT_APPLICABLE,
)
ROW_RE = re.compile(r'<tr id="row-([a-z]+-\d+)"')


@pytest.fixture(scope="module")
def spec() -> Spec:
    return default_spec()


@pytest.fixture(scope="module")
def suite(spec: Spec) -> SuiteResult:
    return synthetic_suite(spec)


# ------------------------------------------------------------------------- aggregation


@pytest.mark.parametrize(
    ("verdicts", "expected"),
    [
        ([], N),
        ([N, N], N),
        ([P], P),
        ([P, P], P),
        ([P, F], F),
        ([E, F], F),  # FAIL wins over ERROR
        ([P, E], E),
        ([U, E], E),
        ([U, U], U),
        ([U, P], U),  # PASS means every check ran and passed (SPEC.md, "Verdicts")
        ([A, P], P),  # a check staged through another transport counts as absent
        ([A, A], U),  # ... but a clause no check could stage is not PASS
        ([A, F], F),
        ([U, N], U),  # NOT_TESTED checks count as absent
        ([P, N], P),
    ],
)
def test_aggregate_verdict(verdicts: list[Verdict], expected: Verdict) -> None:
    assert aggregate_verdict(verdicts) is expected


def test_aggregate_per_clause(suite: SuiteResult) -> None:
    verdicts = {r.clause.id: r.verdict for r in suite.clauses}
    assert verdicts["WIRE-1"] is P
    assert verdicts["WIRE-4"] is F  # one PASS, one FAIL
    assert verdicts["TIME-5"] is E
    assert verdicts["FAULT-2"] is F
    assert verdicts["FAULT-3"] is F  # a check citing two clauses counts for both
    assert verdicts["RESET-9"] is U
    assert verdicts["SEC-6"] is U  # PASS + UNSUPPORTED
    assert verdicts["BCAST-13"] is P  # PASS + NOT_APPLICABLE
    assert verdicts["BCAST-14"] is U  # NOT_APPLICABLE only: not staged on this transport
    assert "not staged on this transport" in suite.clause("BCAST-14").message
    assert suite.clause("SEC-6").check_summary == "PASS 1, UNSUPPORTED 1 of 2 check(s)"
    assert verdicts["SEC-7"] is N  # only a NOT_TESTED check
    assert verdicts["WIRE-5"] is N  # no check at all
    assert len(suite.clauses) == len(default_spec())


def test_clause_result_reports_the_deciding_check(suite: SuiteResult) -> None:
    wire4 = suite.clause("WIRE-4")
    assert wire4.failing_rank == 0
    assert wire4.message.startswith("WIRE-4 MUST")
    assert wire4.duration == pytest.approx(1.3)
    assert suite.clause("RESET-9").message.startswith("needs capability")
    assert suite.clause("RESET-9").failing_rank is None
    assert suite.clause("WIRE-1").message == ""


def test_check_result_normalises_inputs() -> None:
    check = CheckResult("t", ("wire-1", "INIT-2", "WIRE-1"), "FAIL")  # type: ignore[arg-type]
    assert check.verdict is Verdict.FAIL
    assert check.clause_ids == ("WIRE-1", "INIT-2")
    with pytest.raises(ValueError, match="MAYBE"):
        CheckResult("t", ("WIRE-1",), "MAYBE")  # type: ignore[arg-type]


def test_unknown_clause_ids_are_recorded_and_fail_the_run(spec: Spec) -> None:
    checks = [CheckResult("t::a", ("WIRE-1", "WIRE-999"), P)]
    result = aggregate(spec, checks)
    assert result.unknown_clause_ids == ("WIRE-999",)
    assert exit_status(result) == 1


def test_a_prefix_selection_reports_only_selected_clauses(spec: Spec) -> None:
    checks = [CheckResult("t::a", ("WIRE-1", "INIT-1"), P)]
    result = aggregate(spec, checks, clauses=spec.select(["WIRE"]))
    assert {r.clause.area for r in result.clauses} == {"WIRE"}
    assert result.unknown_clause_ids == ()  # INIT-1 is known, merely deselected


def test_counts(suite: SuiteResult) -> None:
    counts = suite.counts()
    assert sum(counts.values()) == len(suite.clauses)
    assert counts[F] == 4
    assert counts[E] == 1
    assert suite.counts("SHOULD")[F] == 1
    assert [r.clause.id for r in suite.must_failures] == ["WIRE-4", "TIME-5", "FAULT-2", "FAULT-3"]


# ------------------------------------------------------------------------- exit status


def _one(spec: Spec, clause_id: str, verdict: Verdict) -> SuiteResult:
    return aggregate(spec, [CheckResult("t::x", (clause_id,), verdict)])


@pytest.mark.parametrize(
    ("clause_id", "verdict", "status"),
    [
        ("WIRE-1", P, 0),
        ("WIRE-1", F, 1),  # MUST FAIL
        ("WIRE-1", E, 1),  # MUST ERROR: not shown to hold
        ("WIRE-1", U, 0),  # MUST UNSUPPORTED: capability not declared
        ("WIRE-1", N, 0),
        ("BCAST-4", F, 0),  # SHOULD FAIL
        ("BCAST-4", E, 0),
        ("WIRE-11", F, 0),  # MAY FAIL
    ],
)
def test_exit_status(spec: Spec, clause_id: str, verdict: Verdict, status: int) -> None:
    result = _one(spec, clause_id, verdict)
    assert exit_status(result) == status
    assert result.exit_status == status


def test_exit_status_of_the_synthetic_runs(spec: Spec, suite: SuiteResult) -> None:
    assert exit_status(suite) == 1
    assert exit_status(all_pass_suite(spec)) == 0


# ------------------------------------------------------------------------- JSON

CLAUSE_KEYS = {
    "id",
    "area",
    "level",  # as judged for this implementation's transport (overrides applied)
    "level_by_transport",  # the clause's per-transport levels ({} for most)
    "scope",  # the transport profile: core, uds-v1, shm or dispatch
    "title",
    "verdict",
    "check_summary",  # which checks ran and what each gave
    "expected",  # None unless an expectations file announced the clause's verdict
    "duration",
    "failing_rank",
    "message",
    "checks",
    "implementation",
}
CHECK_KEYS = {"test_id", "clause_ids", "verdict", "duration", "failing_rank", "message", "details"}
TOP_KEYS = {
    "schema",
    "spec",
    "implementation",
    "started",
    "duration",
    "seed",
    "exit_status",
    "summary",
    "unknown_clause_ids",
    "clauses",
    "checks",
}


def test_json_schema_keys(suite: SuiteResult) -> None:
    doc = json.loads(json.dumps(json_document(suite)))  # must be plain JSON
    assert set(doc) == TOP_KEYS
    assert doc["schema"] == "tpbcast-conformance-report/2"
    assert set(doc["implementation"]) == {"name", "version", "spec", "capabilities", "transport"}
    assert doc["implementation"]["transport"] == "uds-v1"
    assert doc["exit_status"] == 1
    assert doc["summary"]["must_failures"] == ["WIRE-4", "TIME-5", "FAULT-2", "FAULT-3"]
    assert set(doc["summary"]["verdicts"]) == {v.value for v in Verdict}
    for entry in doc["clauses"]:
        assert set(entry) == CLAUSE_KEYS
        assert entry["implementation"] == {
            "name": "reference-lite",
            "version": "0.1.0",
            "spec": "tpbcast.reference_impl.conformance_adapter:make",
        }
    for entry in doc["checks"]:
        assert set(entry) == CHECK_KEYS
    wire4 = next(c for c in doc["clauses"] if c["id"] == "WIRE-4")
    assert (wire4["verdict"], wire4["failing_rank"]) == ("FAIL", 0)
    assert [ch["test_id"] for ch in wire4["checks"]] == [
        "conformance/test_wire.py::test_probe_order[2]",
        "conformance/test_wire.py::test_probe_order[4]",
    ]
    assert [ch["verdict"] for ch in wire4["checks"]] == ["PASS", "FAIL"]


def test_json_round_trip(spec: Spec, suite: SuiteResult) -> None:
    back = suite_from_json(json.loads(json.dumps(json_document(suite))), spec)
    assert back.counts() == suite.counts()
    assert back.implementation == suite.implementation
    assert back.started == suite.started
    assert [(r.clause.id, r.verdict) for r in back.clauses] == [
        (r.clause.id, r.verdict) for r in suite.clauses
    ]
    assert back.clause("FAULT-2").checks[0].details["seed"] == "1234"
    with pytest.raises(ValueError, match="schema"):
        suite_from_json({"schema": "other"}, spec)


def test_json_for_several_runs(spec: Spec, suite: SuiteResult) -> None:
    doc = json_document([suite, all_pass_suite(spec)])
    assert [run["implementation"]["name"] for run in doc["runs"]] == [
        "reference-lite",
        "other-impl",
    ]


# ------------------------------------------------------------------------- HTML


def test_html_lists_must_failures_first(suite: SuiteResult) -> None:
    page = render_html(suite)
    rows = ROW_RE.findall(page)
    must_failures = ["wire-4", "time-5", "fault-2", "fault-3"]
    assert rows[:4] == must_failures  # the failures section opens the page
    assert rows[4] == "bcast-4"  # then the SHOULD failure
    # inside each area too: WIRE-4 (FAIL) precedes WIRE-1 (PASS)
    wire_section = page[page.index('id="area-wire"') : page.index('id="area-init"')]
    wire_rows = ROW_RE.findall(wire_section)
    assert wire_rows[0] == "wire-4"
    assert wire_rows.index("wire-4") < wire_rows.index("wire-1")


def test_html_links_clauses_to_spec_and_inlines_requirement(spec: Spec, suite: SuiteResult) -> None:
    page = render_html(suite)
    assert "<script" not in page.lower()
    assert "<style>" in page  # self-contained
    assert 'href="http' not in page  # no external assets
    for clause in spec:
        assert f'href="SPEC.md#{clause.anchor}"' in page
    wire1 = spec["WIRE-1"]
    row = page[page.index('<tr id="row-wire-1"') :]
    row = row[: row.index("</tr>")]
    assert "<details><summary>" in row
    assert "Rank 0 listens on a SOCK_STREAM Unix-domain socket" in row
    assert "&lt;base_path&gt;_0.sock" in row  # escaped title
    assert wire1.requirement.replace('"', "&quot;") in row


def test_html_header_and_badges(suite: SuiteResult) -> None:
    page = render_html(suite)
    assert "reference-lite 0.1.0" in page
    assert "FAIL: 4 MUST clause(s) not shown to hold" in page
    for verdict in ("v-pass", "v-fail", "v-error", "v-unsupported", "v-not_tested"):
        assert f'class="badge {verdict}"' in page
    assert page.count('class="must-fail"') == 8  # 4 in the failures section, 4 in areas


def test_html_escapes_messages(spec: Spec) -> None:
    evil = "<script>alert(1)</script> & friends"
    result = aggregate(spec, [CheckResult("t::<x>", ("WIRE-1",), F, message=evil)])
    page = render_html(result)
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; friends" in page


def test_long_messages_fold_into_details(suite: SuiteResult) -> None:
    page = render_html(suite)
    assert '<details class="msg"><summary>rank 0 (pid 4711)' in page
    assert "Traceback (most recent call last)" in page  # the full text is kept


def test_several_implementations_side_by_side(spec: Spec, suite: SuiteResult) -> None:
    page = render_html([suite, all_pass_suite(spec)])
    assert "<th>reference-lite 0.1.0: Verdict</th>" in page
    assert "<th>other-impl 2.0: Verdict</th>" in page
    assert page.count('class="run"') == 2


def test_custom_columns_grow_the_matrix(suite: SuiteResult) -> None:
    def checks(row: ReportRow) -> str:
        result = row.results[0]
        return str(len(result.checks)) if result is not None else "0"

    columns = [*default_columns([suite]), Column("checks", "Checks", checks, checks, "num")]
    page = render_html(suite, columns)
    text = render_report_markdown(suite, columns)
    assert "<th>Checks</th>" in page
    assert "| Failing rank | Message | Checks |" in text


# ------------------------------------------------------------------------- markdown


def test_markdown_tables(suite: SuiteResult) -> None:
    text = render_report_markdown(suite)
    header = "| Clause | Level | Scope | Verdict | Duration | Failing rank | Message |"
    assert header in text
    assert "## Failures (MUST first)" in text
    assert "## WIRE: Wire protocol v1" in text
    failures = text[text.index("## Failures") : text.index("## WIRE")]
    lines = [line for line in failures.splitlines() if line.startswith("| [")]
    assert [line.split("]")[0][3:] for line in lines] == [
        "WIRE-4",
        "TIME-5",
        "FAULT-2",
        "FAULT-3",
        "BCAST-4",
    ]
    assert "[WIRE-4](SPEC.md#wire-4)" in text
    assert f"| MUST | {suite.counts('MUST')[P]} | {suite.counts('MUST')[F]} |" in text


def test_markdown_cells_stay_in_their_column(spec: Spec) -> None:
    result = aggregate(spec, [CheckResult("t", ("WIRE-1",), F, message="a | b\nc")])
    text = render_report_markdown(result)
    lines = text.splitlines()
    row = next(line for line in lines if line.startswith("| [WIRE-1]"))
    header = lines[lines.index(row) - 2]
    unescaped = re.compile(r"(?<!\\)\|")
    assert len(unescaped.findall(row)) == len(unescaped.findall(header))
    assert "a \\| b c" in row


# ------------------------------------------------------------------------- files


def test_write_reports(tmp_path: Path, spec: Spec, suite: SuiteResult) -> None:
    files = write_reports(suite, tmp_path / "out", spec=spec)
    for path in (files.json, files.markdown, files.html, files.spec):
        assert path.is_file()
        assert path.parent == tmp_path / "out"
    assert json.loads(files.json.read_text(encoding="utf-8"))["exit_status"] == 1
    # every SPEC.md link of the page resolves to an anchor of the copied SPEC.md
    anchors = set(re.findall(r'<a id="([^"]+)"></a>', files.spec.read_text(encoding="utf-8")))
    links = set(re.findall(r'href="SPEC\.md#([^"]+)"', files.html.read_text(encoding="utf-8")))
    assert links
    assert links <= anchors


def test_write_reports_refuses_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no suite results"):
        write_reports([], tmp_path)


# ------------------------------------------------------------------------- module hygiene


def test_report_modules_do_not_import_pytest() -> None:
    code = (
        "import sys\n"
        "import tpbcast.conformance as c\n"
        "[getattr(c, n) for n in c.__all__]\n"
        "import tpbcast.conformance._report, tpbcast.conformance._results\n"
        "assert 'pytest' not in sys.modules, 'pytest imported'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert proc.returncode == 0, proc.stderr


def test_facade_exports_resolve() -> None:
    assert sorted(facade.__all__) == facade.__all__
    for name in facade.__all__:
        assert getattr(facade, name) is not None
    assert set(facade.__all__) <= set(dir(facade))
    with pytest.raises(AttributeError):
        _ = facade.not_a_name  # type: ignore[attr-defined]


def test_synthetic_data_covers_every_verdict() -> None:
    assert {c.verdict for c in synthetic_checks()} == set(Verdict)
    info = ImplementationInfo(name="x", version="")
    assert info.label == "x"


def test_markdown_failure_cell_reaches_the_observation():
    """A FAIL's markdown cell shows what was observed, not only the requirement."""
    from tpbcast.conformance._report import _message_md

    message = "TIME-1: " + "the requirement, stated at length " * 6 + "-- rank 0: got OBSERVED"
    assert "got OBSERVED" in _message_md(message)
    assert _message_md("x" * 5000).endswith("…")
