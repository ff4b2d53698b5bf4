"""Expectation files: a run against one fails only on news (``conformance/_expectations.py``).

The rules are judged twice: on synthetic results (every verdict against every expectation,
no pytest run), and end to end through the plugin with pytester on a tiny registry (the
same one ``test_plugin.py`` uses): expected FAIL -> exit 0, unexpected FAIL -> 1, stale
expectation (PASS) -> 1, unknown clause id in the file -> usage error naming it.
"""

from __future__ import annotations

import argparse
import json
import textwrap
from pathlib import Path

import pytest

from tpbcast.conformance import CheckResult, Verdict, aggregate, default_spec, write_reports
from tpbcast.conformance.__main__ import _parser, build_pytest_args
from tpbcast.conformance._expectations import (
    ExpectationsError,
    apply_expectations,
    load_expectations,
    parse_expectations,
)
from tpbcast.conformance._report_json import json_document, suite_from_json

from .test_plugin import PASSING, _registry

NATIVE_EXPECTATIONS = (
    Path(__file__).resolve().parents[2] / "conformance/adapters/native/expectations.toml"
)


def _expect(**entries: tuple[str, str]) -> str:
    return "".join(
        f'[expect.{cid.replace("_", "-")}]\nverdict = "{verdict}"\nreason = "{reason}"\n\n'
        for cid, (verdict, reason) in entries.items()
    )


# ------------------------------------------------------------------ the file and the rules


def test_file_validates_against_the_registry_and_names_every_problem(tmp_path: Path) -> None:
    spec = default_spec()
    path = tmp_path / "known.toml"
    path.write_text(
        _expect(WIRE_1=("FAIL", "ok"), NOPE_7=("FAIL", "typo"), INIT_1=("PASS", "x"))
        + '[expect.INIT-2]\nverdict = "FAIL"\nreason = " "\n'
    )
    with pytest.raises(ExpectationsError) as info:
        load_expectations(path, spec)
    text = str(info.value)
    assert str(path) in text and "3 problem(s)" in text
    assert "unknown clause id 'NOPE-7'" in text
    assert "[expect.INIT-1]: verdict 'PASS' is not one of FAIL, UNSUPPORTED" in text
    assert "[expect.INIT-2]: 'reason' must say why" in text
    with pytest.raises(ExpectationsError, match="cannot read it"):
        load_expectations(tmp_path / "missing.toml", spec)
    path.write_text("[expect\n")
    with pytest.raises(ExpectationsError, match="not valid TOML"):
        load_expectations(path, spec)


def test_every_verdict_against_every_expectation() -> None:
    """Which results are news: the table of ``ClauseResult.is_unexpected``."""
    spec = default_spec()
    ids = ["WIRE-1", "WIRE-2", "WIRE-3", "WIRE-4", "INIT-1", "INIT-2", "INIT-3", "INIT-4"]
    observed = ["FAIL", "PASS", "ERROR", "UNSUPPORTED", "UNSUPPORTED", "FAIL", "PASS", "FAIL"]
    expected = ["FAIL", "FAIL", "FAIL", "FAIL", "UNSUPPORTED", "UNSUPPORTED", None, None]
    checks = [CheckResult(f"t::{c}", (c,), Verdict(v)) for c, v in zip(ids, observed, strict=True)]
    entries = {
        c: {"verdict": e, "reason": f"why {c}"} for c, e in zip(ids, expected, strict=True) if e
    }
    suite = aggregate(spec, checks, clauses=[spec[c] for c in [*ids, "INIT-5"]])
    judged = apply_expectations(
        suite, parse_expectations({"expect": {**entries, "INIT-5": entries["WIRE-1"]}}, spec, "f")
    )
    news = {r.clause.id: (r.is_regression, r.is_stale_expectation) for r in judged.unexpected}
    assert news == {
        "WIRE-2": (False, True),  # PASS where FAIL was expected: stale
        "WIRE-3": (True, False),  # ERROR is never expected
        "WIRE-4": (False, True),  # UNSUPPORTED where FAIL was expected: stale
        "INIT-2": (True, False),  # FAIL where UNSUPPORTED was expected
        "INIT-4": (True, False),  # FAIL nobody announced, whatever its level
    }
    assert {r.clause.id for r in judged.expected_results} == {"WIRE-1", "INIT-1"}
    assert judged.clause("INIT-5").verdict is Verdict.NOT_TESTED  # not judged: no news
    assert judged.clause("WIRE-1").shown_verdict == "FAIL (expected: why WIRE-1)"
    assert judged.clause("WIRE-2").shown_verdict.startswith("PASS (unexpected; expected FAIL")
    assert judged.exit_status == 1
    only_known = apply_expectations(
        aggregate(spec, checks[:1], clauses=[spec["WIRE-1"]]),
        parse_expectations({"expect": {"WIRE-1": entries["WIRE-1"]}}, spec, "f"),
    )
    assert only_known.exit_status == 0, "a MUST FAIL the file announces does not fail the run"


def test_a_race_of_the_implementation_is_announced_as_a_list_of_verdicts() -> None:
    """``verdict = ["FAIL", "PASS"]``: either is as expected, anything else is news, and the
    list survives the JSON report."""
    spec = default_spec()
    ids = ["WIRE-1", "WIRE-2", "WIRE-3", "WIRE-4"]
    observed = ["FAIL", "PASS", "ERROR", "UNSUPPORTED"]
    checks = [CheckResult(f"t::{c}", (c,), Verdict(v)) for c, v in zip(ids, observed, strict=True)]
    race = {"verdict": ["FAIL", "PASS"], "reason": "the kernel's RST or FIN decides"}
    judged = apply_expectations(
        aggregate(spec, checks, clauses=[spec[c] for c in ids]),
        parse_expectations({"expect": dict.fromkeys(ids, race)}, spec, "f"),
    )
    assert {r.clause.id for r in judged.expected_results} == {"WIRE-1", "WIRE-2"}
    news = {r.clause.id: (r.is_regression, r.is_stale_expectation) for r in judged.unexpected}
    assert news == {"WIRE-3": (True, False), "WIRE-4": (False, True)}
    again = suite_from_json(json_document(judged), spec)
    assert again.clause("WIRE-2").expected_also == (Verdict.PASS,)
    assert {r.clause.id for r in again.expected_results} == {"WIRE-1", "WIRE-2"}
    for bad in (["FAIL", "FAIL"], ["FAIL", "ERROR"], []):
        with pytest.raises(ExpectationsError, match="not one of"):
            parse_expectations({"expect": {"WIRE-1": {**race, "verdict": bad}}}, spec, "f")


def test_reports_show_the_expectation_and_json_round_trips(tmp_path: Path) -> None:
    spec = default_spec()
    checks = [
        CheckResult("t::a", ("WIRE-1",), Verdict.FAIL, message="WIRE-1: no -- rank 0: got x"),
        CheckResult("t::b", ("WIRE-2",), Verdict.PASS),
    ]
    expectations = parse_expectations(
        {"expect": {c: {"verdict": "FAIL", "reason": "known gap"} for c in ("WIRE-1", "WIRE-2")}},
        spec,
        "known.toml",
    )
    suite = apply_expectations(
        aggregate(spec, checks, clauses=[spec["WIRE-1"], spec["WIRE-2"]]), expectations
    )
    files = write_reports(suite, tmp_path, spec=spec)
    markdown = files.markdown.read_text()
    assert "| FAIL (expected: known gap) |" in markdown
    assert "PASS (unexpected; expected FAIL: known gap)" in markdown
    assert "- Expectations: `known.toml`; 1 as expected; unexpected: WIRE-2" in markdown
    html = files.html.read_text()
    assert '<small class="expect">expected: known gap</small>' in html
    assert "unexpected; expected FAIL: known gap" in html
    doc = json.loads(files.json.read_text())
    assert doc["summary"]["unexpected"] == ["WIRE-2"] and doc["exit_status"] == 1
    wire1 = next(c for c in doc["clauses"] if c["id"] == "WIRE-1")
    assert wire1["expected"] == {
        "verdict": "FAIL",
        "also": [],
        "reason": "known gap",
        "outcome": "expected",
        "shown": "FAIL (expected: known gap)",
    }
    again = suite_from_json(doc, spec)
    assert json_document(again)["clauses"] == doc["clauses"]
    assert again.exit_status == 1


def test_cli_passes_the_file_to_the_plugin_as_an_absolute_path(tmp_path: Path) -> None:
    for flag in ("--expectations", "--tpbcast-expectations"):
        args: argparse.Namespace = _parser().parse_args([flag, "known.toml"])
        argv = build_pytest_args(args, [])
        assert f"--tpbcast-expectations={Path('known.toml').resolve()}" in argv


def test_the_native_example_ships_a_valid_expectations_file() -> None:
    expectations = load_expectations(NATIVE_EXPECTATIONS, default_spec())
    assert len(expectations) > 0
    assert all(e.reason for e in expectations.by_clause.values())


# ------------------------------------------------------------------ through the plugin


@pytest.fixture
def judged(pytester: pytest.Pytester):
    """Run the tiny suite with an expectations file: run(source, expect_toml) -> (result, doc)."""
    registry = pytester.path / "reg.toml"
    registry.write_text(_registry())
    out = pytester.path / "out"

    def run(source: str, expectations: str, *args: str):
        pytester.makepyfile(test_suite=textwrap.dedent(source))
        known = pytester.path / "known.toml"
        known.write_text(expectations)
        result = pytester.runpytest_subprocess(
            "-p",
            "tpbcast.conformance.plugin",
            f"--tpbcast-registry={registry}",
            f"--tpbcast-report-dir={out}",
            "--tpbcast-expectations=known.toml",
            "-p",
            "no:cacheprovider",
            *args,
        )
        report = out / "conformance.json"
        return result, json.loads(report.read_text()) if report.exists() else None

    return run


FAILING_WIRE1 = PASSING.replace(
    "def test_wire1():\n    pass", "def test_wire1():\n    assert 1 == 2, 'WIRE-1: no'"
)
FAILING_WIRE2 = PASSING.replace("def test_wire2():\n    pass", "def test_wire2():\n    assert 0")


def test_expected_must_fail_exits_zero_and_says_so(judged) -> None:
    result, doc = judged(FAILING_WIRE1, _expect(WIRE_1=("FAIL", "not done yet")))
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "expectations: *known.toml: 1 as expected, 0 unexpected",
            "MUST WIRE-1: FAIL (expected: not done yet)",
            "conformance passed (1 result(s) as expected)",
        ]
    )
    assert doc["summary"]["unexpected"] == [] and doc["exit_status"] == 0


def test_unexpected_should_fail_is_a_regression(judged) -> None:
    """Without a file a SHOULD FAIL keeps exit 0; against a file any unlisted FAIL is news."""
    result, doc = judged(FAILING_WIRE2, _expect(WIRE_1=("FAIL", "flaky peer")))
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "UNEXPECTED (stale expectation) MUST PASS (unexpected; expected FAIL: flaky peer): "
            "WIRE-1",
            "UNEXPECTED (regression) SHOULD FAIL: WIRE-2: assert 0",
            "conformance FAILED (2 unexpected result(s))",
        ]
    )
    assert doc["summary"]["unexpected"] == ["WIRE-1", "WIRE-2"]


def test_stale_expectation_fails_the_run(judged) -> None:
    result, doc = judged(PASSING, _expect(INIT_1=("FAIL", "was broken")))
    assert result.ret == 1
    init1 = next(c for c in doc["clauses"] if c["id"] == "INIT-1")
    assert init1["verdict"] == "PASS" and init1["expected"]["outcome"] == "stale"


def test_unknown_clause_id_in_the_file_is_a_usage_error_naming_it(judged) -> None:
    result, doc = judged(PASSING, _expect(WIRE_77=("FAIL", "typo")))
    assert result.ret == 4
    result.stderr.fnmatch_lines(
        [
            "ERROR: --tpbcast-expectations: expectations file *known.toml: 1 problem(s):",
            "*[[]expect.WIRE-77]: unknown clause id 'WIRE-77'*",
        ]
    )
    assert doc is None


def test_expectations_under_xdist(judged) -> None:
    pytest.importorskip("xdist")
    result, _ = judged(FAILING_WIRE1, _expect(WIRE_1=("FAIL", "known")), "-n", "2")
    assert result.ret == 0, result.stdout.str()
