"""The ecosystem matrix (``tools/ecosystem.py``) from synthetic conformance.json documents:
NOT_APPLICABLE shown as such, counts, expected marks, wall-time ratio, exit status.  No
suite run here (``nox -s ecosystem`` does those)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

TOOL = Path(__file__).resolve().parent.parent / "tools" / "ecosystem.py"


def _load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tpbcast_tools_ecosystem", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


eco = _load_tool()
mt = eco.mt

CLAUSES = (  # id, area, level, scope
    ("WIRE-1", "WIRE", "MUST", "uds-v1"),
    ("BCAST-1", "BCAST", "MUST", "core"),
    ("BCAST-13", "BCAST", "MUST", "core"),
    ("HYG-4", "HYG", "SHOULD", "core"),
    ("SHM-1", "SHM", "MUST", "shm"),
)


def _doc(verdicts, expected=None, transport=None):
    """A conformance.json as the suite writes it (the fields the matrix reads)."""
    expected = expected or {}
    clauses = []
    for cid, area, level, scope in CLAUSES:
        verdict = verdicts[cid]
        exp = None
        if cid in expected:
            announced, reason = expected[cid]
            outcome = (
                "expected"
                if verdict == announced
                else "regression"
                if verdict in ("FAIL", "ERROR")
                else "stale"
            )
            exp = {"verdict": announced, "reason": reason, "outcome": outcome, "shown": verdict}
        elif verdict in ("FAIL", "ERROR") and expected:
            exp = None
        clauses.append(
            {
                "id": cid,
                "area": area,
                "level": level,
                "scope": scope,
                "title": f"title of {cid}",
                "verdict": verdict,
                "expected": exp,
                "message": "",
            }
        )
    must_bad = [
        c["id"] for c in clauses if c["level"] == "MUST" and c["verdict"] in ("FAIL", "ERROR")
    ]
    unexpected = [
        c["id"]
        for c in clauses
        if (c["expected"] or {}).get("outcome") in ("regression", "stale")
        or (expected and c["expected"] is None and c["verdict"] in ("FAIL", "ERROR"))
    ]
    impl = {"name": "impl", "version": "1", "spec": "x:make", "capabilities": []}
    if transport:
        impl["transport"] = transport
    return {
        "schema": "tpbcast-conformance-report/2",
        "implementation": impl,
        "exit_status": 1 if (unexpected if expected else must_bad) else 0,
        "summary": {
            "must_failures": must_bad,
            "unexpected": unexpected if expected else [],
            "expectations": "file.toml" if expected else None,
        },
        "clauses": clauses,
    }


REF = {
    "WIRE-1": "PASS",
    "BCAST-1": "PASS",
    "BCAST-13": "PASS",
    "HYG-4": "PASS",
    "SHM-1": "NOT_APPLICABLE",
}
SHM = {
    "WIRE-1": "NOT_APPLICABLE",
    "BCAST-1": "PASS",
    "BCAST-13": "FAIL",
    "HYG-4": "FAIL",
    "SHM-1": "PASS",
}
SHM_EXPECTED = {"BCAST-13": ("FAIL", "no broken state: vllm/x.py:1, repros/a.py")}


def _run(name, doc, wall):
    subject = mt.Subject(name, f"{name}:make", "engine")
    return mt.Run(subject, (), wall, 0, Path("/nonexistent"), doc)


def _entries(with_expectations=True):
    return (
        eco.Entry("reference", "ref:make", "the reference"),
        eco.Entry(
            "shm", "shm:make", "an shm one", expectations="e.toml" if with_expectations else ""
        ),
        eco.Entry("absent", "absent:make", "not installed", module="no_such_module_xyz"),
    )


def _results(shm_doc, *, with_expectations=True, shm_wall=30.0):
    runs = {"reference": _run("reference", _doc(REF), 10.0), "shm": _run("shm", shm_doc, shm_wall)}
    return eco.judge(_entries(with_expectations), runs, {"absent": "module missing"})


def test_not_applicable_is_its_own_cell_in_both_reports():
    results = _results(_doc(SHM, SHM_EXPECTED, transport="shm"))
    assert eco.cell({"verdict": "NOT_APPLICABLE"}) == ("N/A", "v-not_applicable")
    md = eco.render_markdown(results)
    line = next(row for row in md.splitlines() if row.startswith("| WIRE-1 "))
    assert line.split("|")[-3:-1] == [" PASS ", " N/A "]  # reference, shm
    line = next(row for row in md.splitlines() if row.startswith("| SHM-1 "))
    assert "| MUST | shm | N/A | PASS |" in line
    page = eco.render_html(results)
    assert page.count('class="v v-not_applicable"') == 2 and ">N/A</td>" in page


def test_counts_per_implementation():
    doc = _doc(SHM, SHM_EXPECTED)
    got = eco.counts(doc)
    assert {k: v for k, v in got.items() if v} == {
        "PASS": 2,
        "FAIL": 2,
        "NOT_APPLICABLE": 1,
        "expected": 1,
    }
    assert eco._counts_text(doc) == "PASS 2, FAIL 2, N/A 1 (1 as expected)"
    stale = _doc({**SHM, "BCAST-13": "PASS"}, SHM_EXPECTED)  # announced, did not happen
    assert eco.counts(stale)["expected"] == 0
    md = eco.render_markdown(_results(doc))
    assert "PASS 2, FAIL 2, N/A 1 (1 as expected)" in md and "PASS 4, N/A 1 |" in md


def test_expected_and_new_failures_are_marked():
    results = _results(_doc(SHM, SHM_EXPECTED))
    md = eco.render_markdown(results)
    assert "| BCAST-13 title of BCAST-13 | MUST | core | PASS | FAIL (expected) |" in md
    assert "| HYG-4 title of HYG-4 | SHOULD | core | PASS | FAIL (new) |" in md
    assert "no broken state: vllm/x.py:1, repros/a.py" in md  # the reason, cited
    stale = _doc({**SHM, "BCAST-13": "PASS", "HYG-4": "PASS"}, SHM_EXPECTED)
    assert eco.cell(stale["clauses"][2]) == ("PASS (stale: expected FAIL)", "v-pass unexpected")


def test_ratio_to_the_reference():
    results = _results(_doc(SHM, SHM_EXPECTED), shm_wall=35.0)
    shm = results[1]
    assert shm.ratio == pytest.approx(3.5)
    assert shm.remarks == ("3.5x the reference's wall time (goal <= 3x)",)
    assert "| 35 s | 3.50x |" in eco.render_markdown(results)


@pytest.mark.parametrize(
    ("verdicts", "expected", "with_expectations", "problem"),
    [
        # every FAIL announced: 0
        ({**SHM, "HYG-4": "PASS"}, SHM_EXPECTED, True, None),
        # a FAIL the file does not announce: 1
        (SHM, SHM_EXPECTED, True, "not as expected: HYG-4"),
        # an announced FAIL that now passes (stale): 1
        (
            {**SHM, "BCAST-13": "PASS", "HYG-4": "PASS"},
            SHM_EXPECTED,
            True,
            "not as expected: BCAST-13",
        ),
        # no expectations file: a SHOULD FAIL is fine, a MUST FAIL or ERROR is not
        ({**SHM, "BCAST-13": "PASS"}, None, False, None),
        (SHM, None, False, "MUST FAIL/ERROR: BCAST-13"),
        ({**SHM, "BCAST-13": "ERROR"}, None, False, "MUST FAIL/ERROR: BCAST-13"),
    ],
)
def test_exit_status(verdicts, expected, with_expectations, problem):
    results = _results(_doc(verdicts, expected), with_expectations=with_expectations)
    assert results[2].run is None and results[2].skipped == "module missing"  # never fails
    assert results[1].problems == (() if problem is None else (problem,))
    code = 0 if problem is None else 1
    assert eco.exit_code(results) == code
    headline = eco._headline(results)
    assert headline.startswith("OK" if code == 0 else "FAIL: not as expected: shm")


def test_a_run_without_report_fails(tmp_path):
    runs = {"reference": _run("reference", _doc(REF), 10.0)}
    broken = mt.Run(mt.Subject("shm", "shm:make", "e"), (), 5.0, None, tmp_path, None, "killed")
    runs["shm"] = broken
    results = eco.judge(_entries(), runs, {})
    assert eco.exit_code(results) == 1 and results[1].problems == ("killed",)


def test_write_reports_and_render_only(tmp_path):
    results = _results(_doc(SHM, SHM_EXPECTED))
    eco.write_reports(results, tmp_path)
    doc = json.loads((tmp_path / "ecosystem.json").read_text())
    assert [i["name"] for i in doc["implementations"]] == ["reference", "shm", "absent"]
    assert doc["implementations"][1]["counts"]["NOT_APPLICABLE"] == 1 and doc["ok"] is False
    assert (tmp_path / "index.html").read_text().startswith("<!DOCTYPE html>")


def test_every_entry_has_an_existing_expectations_file_and_a_factory_spec():
    root = TOOL.parent.parent
    names = [e.name for e in eco.ENTRIES]
    assert names[0] == "reference" and len(set(names)) == len(names)
    for entry in eco.ENTRIES:
        assert ":" in entry.spec
        assert not entry.expectations or (root / entry.expectations).is_file(), entry
