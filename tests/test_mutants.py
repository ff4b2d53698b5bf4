"""CI's quick subset of the mutant kill matrix (``tools/mutants.py``, ``nox -s mutants``).

* Every ``tests/mutants/m_*.py`` follows the convention (read from its source, never
  imported here: a mutant patches the reference at import time, and this process runs the
  reference's own self-tests too).
* Each FAST mutant, judged on its KILLS clauses only, gets FAIL on every one of them
  (one test per mutant, so a survivor is named).
* The per-check verdict self-test: ``m_wording`` (the reference with another
  error wording, nothing else) gets SHOULD FAILs and no MUST FAIL or ERROR, judged on the
  clauses whose tests read error messages.
* ``m_no_capabilities``: the summary counts and names the MUST clauses it was not judged
  on and the headline does not claim full conformance.
* The matrix's own judgement and renderers, on synthetic runs.

Suite runs are subprocesses of ``python -m tpbcast.conformance`` (serial inside: this
session already runs tests in parallel), with ``tests/`` on PYTHONPATH.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tpbcast.conformance.spec import default_spec

TOOL = Path(__file__).resolve().parent.parent / "tools" / "mutants.py"
RUN_TIMEOUT = 300.0
# The clauses whose tests read error messages: a wording-only difference must leave every
# MUST clause among them PASS (and may fail the SHOULD/MAY ones about wording).  FALLBACK-5/
# 6/7/9 read messages too, but their once-per-run group costs ~8 s: the full matrix judges
# them (``nox -s mutants``).
WORDING_CLAUSES = (
    "FAULT-4",
    "FAULT-5",
    "INIT-10",
    "INIT-8",
    "FAULT-3",
    "TIME-1",
    "TIME-3",
    "INIT-2",
    "INIT-5",
    "INIT-7",
    "BCAST-3",
    "SEC-8",
    "FAULT-1",
    "FAULT-2",
    "TIME-5",
    "SEC-2",
    "SEC-4",
    "BCAST-13",
    "RESET-7",
    "BCAST-15",
    "INIT-16",
    "SEC-16",
)
# Clauses that need one capability each, plus one that needs none.
CAPABILITY_CLAUSES = ("INIT-3", "TIME-1", "SEC-1", "FALLBACK-1", "BCAST-9")


def _load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tpbcast_tools_mutants", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    return module


mt = _load_tool()
SUBJECTS = {s.name: s for s in mt.discover()}
FAST = [s for s in SUBJECTS.values() if s.fast]


def _subject(name):
    if name not in SUBJECTS:
        pytest.fail(f"tests/mutants/{name}.py is missing")
    return SUBJECTS[name]


def _failing_checks(run, clause_ids):
    """The non-PASS checks of ``clause_ids``: test id, verdict and message, one per line."""
    lines = []
    for cid in clause_ids:
        for check in run.clauses[cid]["checks"]:
            if check["verdict"] != "PASS":
                lines.append(f"  {cid} {check['verdict']} {check['test_id']}: {check['message']}")
    return "\n".join(lines)


def _judge(subject, tmp_path, selection):
    run = mt.run_subject(
        subject, tmp_path / subject.name, selection=selection, workers="0", timeout=RUN_TIMEOUT
    )
    if run.doc is None:
        log = (run.report_dir / "run.log").read_text(errors="replace")
        pytest.fail(f"{subject.name}: {run.problem}\n{log[-3000:]}")
    return run


# ------------------------------------------------------------------------------ convention


@pytest.mark.parametrize("subject", SUBJECTS.values(), ids=lambda s: s.name)
def test_mutant_follows_the_convention(subject):
    assert not subject.problem, f"{subject.name}: {subject.problem}"
    assert subject.defect.strip(), f"{subject.name}: DEFECT is empty"
    spec = default_spec()
    unknown = [cid for cid in subject.kills if cid not in spec]
    assert not unknown, f"{subject.name}: KILLS names unknown clause ids {unknown}"
    assert subject.kills or subject.must_pass, (
        f"{subject.name}: KILLS is empty; a mutant must name the clauses it breaks "
        "(or be a MUST_PASS control row)"
    )


# ------------------------------------------------------------------------------ controls


def test_wording_only_defect_gets_should_fails_and_no_must_fail(tmp_path):
    subject = _subject("m_wording")
    run = _judge(subject, tmp_path, WORDING_CLAUSES)
    levels = {cid: c["level"] for cid, c in run.clauses.items()}
    assert not run.must_failures, (
        "an implementation whose only defect is its error wording must FAIL no MUST clause; "
        f"got MUST FAIL/ERROR on {run.must_failures} (a wording check deciding a MUST clause):\n"
        + _failing_checks(run, run.must_failures)
    )
    assert not run.survivors, (
        f"the wording checks must FAIL {list(subject.kills)}; got "
        + ", ".join(f"{cid} {run.verdict(cid)}" for cid in run.survivors)
    )
    assert all(levels[cid] == "SHOULD" for cid in subject.kills), levels


def test_no_capabilities_is_not_claimed_to_conform(tmp_path):
    subject = _subject("m_no_capabilities")
    run = _judge(subject, tmp_path, CAPABILITY_CLAUSES)
    summary = run.doc["summary"]
    assert not run.must_failures, _failing_checks(run, run.must_failures)
    assert run.verdict("INIT-3") == "PASS", run.clauses["INIT-3"]
    not_judged = set(summary["must_not_judged"])
    assert {"TIME-1", "SEC-1", "FALLBACK-1", "BCAST-9"} <= not_judged, summary
    assert {"deadlines", "secure_dir", "dispatch", "tensors"} <= set(
        summary["unlocking_capabilities"]
    ), summary
    assert "NOT judged" in summary["judged"], summary["judged"]
    markdown = (run.report_dir / "conformance.md").read_text()
    result = next(line for line in markdown.splitlines() if line.startswith("- Result:"))
    assert "every MUST clause was judged" not in result, result
    assert "judged MUST clauses only" in result, result


# ------------------------------------------------------------------------------ fast kills


@pytest.mark.parametrize("subject", FAST, ids=lambda s: s.name)
def test_fast_mutant_is_killed(subject, tmp_path):
    run = _judge(subject, tmp_path, subject.kills)  # the run removes what the mutant leaks
    survivors = run.survivors
    assert not survivors, (
        f"{subject.name} ({subject.defect}) survives: "
        + ", ".join(f"{cid} is {run.verdict(cid)}" for cid in survivors)
        + "\n"
        + _failing_checks(run, [c for c in survivors if c in run.clauses])
    )


# ------------------------------------------------------------------------------ cleanup


def _still_there(entry):
    if entry["kind"] != "process":
        return os.path.lexists(entry["path"])
    try:
        with open(f"/proc/{entry['pid']}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
        with open(f"/proc/{entry['pid']}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X") and cmd == entry["path"]  # same pid, same command


@pytest.mark.parametrize(
    ("name", "clause", "kind"),
    [("m_shm_leaked_segment", "SHM-1", "segment"), ("m_shm_helper_outlives", "SHM-12", "process")],
)
def test_what_a_leaking_mutant_leaves_is_reported_and_removed(tmp_path, name, clause, kind):
    """The run removes what a mutant leaks (its segment in /dev/shm, its helper process)
    after the test that caused it, and its cleanup.json and terminal summary name each
    entry with its creator and the clause it breaks."""
    subject = _subject(name)
    run = _judge(subject, tmp_path, (clause,))
    assert run.verdict(clause) == "FAIL", run.clauses[clause]  # the leak happened
    doc = json.loads((run.report_dir / "cleanup.json").read_text(encoding="utf-8"))
    entries = [e for found in doc["tests"].values() for e in found if e["kind"] == kind]
    outside = [e for e in entries if e["where"] == "outside"]
    assert outside, doc
    assert all(e["removed"] and e["clause"] == clause for e in outside), outside
    assert all(e["creator_pid"] for e in outside if kind != "process"), outside
    left = [e for e in outside if _still_there(e)]
    assert not left, left
    log = (run.report_dir / "run.log").read_text(errors="replace")
    assert "tpbcast cleanup" in log and doc["summary"] in log, log[-2000:]


# ------------------------------------------------------------------------------ the matrix


def _doc(verdicts, levels=None):
    levels = levels or {}
    clauses = [
        {
            "id": cid,
            "area": cid.split("-")[0],
            "level": levels.get(cid, "MUST"),
            "title": cid,
            "verdict": verdict,
            "message": "",
            "checks": [],
        }
        for cid, verdict in verdicts.items()
    ]
    failures = [
        c["id"] for c in clauses if c["level"] == "MUST" and c["verdict"] in ("FAIL", "ERROR")
    ]
    return {"clauses": clauses, "summary": {"must_failures": failures}}


def _run(subject, verdicts, wall, levels=None):
    return mt.Run(subject, (), wall, 0, Path("/nonexistent"), _doc(verdicts, levels))


def test_matrix_judgement_and_reports():
    reference, native, *_ = mt.baselines()
    killed = mt.Subject("m_killed", "x:make", "d", kills=("INIT-1",))
    survivor = mt.Subject("m_survivor", "x:make", "d", kills=("INIT-1", "FAULT-5"))
    control = mt.Subject("m_control", "x:make", "d", must_pass=True)
    levels = {"FAULT-5": "SHOULD"}
    runs = [
        _run(reference, {"INIT-1": "PASS", "FAULT-5": "PASS"}, 10.0, levels),
        _run(native, {"INIT-1": "FAIL", "FAULT-5": "FAIL"}, 12.0, levels),
        _run(killed, {"INIT-1": "FAIL", "FAULT-5": "PASS"}, 25.0, levels),
        _run(survivor, {"INIT-1": "FAIL", "FAULT-5": "PASS"}, 10.0, levels),
        _run(control, {"INIT-1": "ERROR", "FAULT-5": "FAIL"}, 10.0, levels),
        mt.Run(killed, (), 3.0, None, Path("/nonexistent"), None, "killed after the timeout"),
    ]
    rows = {i: row for i, row in enumerate(mt.judge(runs))}
    assert rows[0].ok and rows[0].ratio == 1.0
    assert not rows[1].ok and "INIT-1" in rows[1].problems[0]  # a baseline's MUST FAIL
    assert rows[2].ok and rows[2].ratio == 2.5 and "wall time" in rows[2].remarks[0]
    assert not rows[3].ok and rows[3].problems == ("SURVIVES: FAULT-5 PASS",)
    assert not rows[4].ok and "INIT-1" in rows[4].problems[0]  # MUST_PASS row
    assert not rows[5].ok and "timeout" in rows[5].problems[0]
    markdown = mt.render_markdown(list(rows.values()), fast=False)
    assert "FAIL: " in markdown and "m_survivor" in markdown.splitlines()[2]
    assert "| INIT-1 M | FAULT-5 S |" not in markdown  # one table per area
    assert "FAULT-5 S" in markdown and "**F**" in markdown
    page = mt.render_html(list(rows.values()), fast=False)
    assert page.count("<tr>") >= len(runs) and 'class="v-fail kill"' in page
