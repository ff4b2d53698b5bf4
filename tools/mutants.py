"""The mutant kill matrix: the conformance suite against every one-defect implementation.

A suite is only trusted if it fails wrong implementations.  Each ``tests/mutants/m_*.py``
breaks the reference in one way and names the clauses that must come out FAIL (``KILLS``;
convention in ``tests/mutants/__init__.py``).  This tool runs ``python -m
tpbcast.conformance`` against each of them, plus baselines that must FAIL no MUST clause
(the reference, its framed mode, the native C example adapter, and two written for the
suite: ``tests/mutants/shm_ring.py``, a shared-memory ring of transport ``shm`` for which
every ``uds-v1`` clause is NOT_APPLICABLE, shown ``n``, and ``tests/mutants/tcp_fanout.py``,
a TCP broadcaster of transport ``tcp``; the ``m_shm_*`` and ``m_tcp_*`` mutants are judged
against them), and writes
``reports/mutants/``: ``index.html`` and ``mutants.md`` (a summary table and the matrix
row x clause, MUST/SHOULD/MAY marked in the header, intended cells highlighted),
``mutants.json``, and each run's own conformance report under ``runs/<row>/``::

    python tools/mutants.py                  # every mutant + baselines, full suite
    python tools/mutants.py --fast           # FAST mutants, each limited to its KILLS
    python tools/mutants.py --only wording   # one row (m_ prefix optional) + the reference
    python tools/mutants.py --render-only    # rebuild the reports from runs/ (no suite run)
    nox -s mutants -- --fast                 # the same through nox

Exit status 1 if a mutant survives (one of its KILLS clauses is not FAIL), a baseline or a
``MUST_PASS`` mutant (optional module flag: its defect breaks no MUST clause, e.g. error
wording) has a MUST clause FAIL or ERROR, or a run produced no report.  Each row's wall
time is shown with its ratio to the reference's (same clause selection only): the issue
asks a run against any implementation to stay within about twice the reference's.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import html
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

REPO: Final = Path(__file__).resolve().parent.parent
TESTS_DIR: Final = REPO / "tests"
MUTANTS_DIR: Final = TESTS_DIR / "mutants"
REPORT_DIR: Final = REPO / "reports" / "mutants"
REFERENCE: Final = "tpbcast.reference_impl.conformance_adapter:make"
NATIVE: Final = "tpbcast.conformance.adapters.native.adapter:make"
# The shared-memory ring written for the suite (transport "shm"): the baseline of the
# m_shm_* mutants; every uds-v1 clause is NOT_APPLICABLE for it.
SHM_RING: Final = "mutants.shm_ring:make"
# The reference's framed mode (transport "uds-framed"): the baseline of the m_framed_*
# mutants; the raw-payload clauses of uds-v1 are NOT_APPLICABLE for it.
REFERENCE_FRAMED: Final = "tpbcast.reference_impl.conformance_adapter:make_framed"
# The TCP fan-out written for the suite (transport "tcp"): the baseline of the m_tcp_*
# mutants, the one implementation known to hold every tcp clause (TCP-1 to TCP-4).
TCP_FANOUT: Final = "mutants.tcp_fanout:make"
RATIO_LIMIT: Final = 2.0
_CELL: Final = {
    "PASS": "P",
    "FAIL": "F",
    "ERROR": "E",
    "UNSUPPORTED": "U",
    "NOT_APPLICABLE": "n",
    "NOT_TESTED": "-",
}
# Verdicts that say nothing about whether a baseline holds a clause (a kill still counts).
_SILENT: Final = ("PASS", "NOT_APPLICABLE", None)
_LEVEL_MARK: Final = {"MUST": "M", "SHOULD": "S", "MAY": "m"}
_MUST_BAD: Final = "MUST FAIL/ERROR where none may be"


@dataclass(frozen=True)
class Subject:
    """One matrix row: an implementation and what is expected of it."""

    name: str
    spec: str
    defect: str
    kills: tuple[str, ...] = ()
    fast: bool = False
    must_pass: bool = False  # no MUST clause may FAIL or ERROR
    baseline: bool = False
    problem: str = ""  # the module does not follow the convention


@dataclass(frozen=True)
class Run:
    """One suite run against one subject, and its conformance.json (None: no report)."""

    subject: Subject
    selection: tuple[str, ...]  # clause selectors; () = the whole suite
    wall: float
    exit_code: int | None  # None: killed at the timeout
    report_dir: Path
    doc: Mapping[str, Any] | None
    problem: str = ""

    @property
    def clauses(self) -> dict[str, Mapping[str, Any]]:
        return {} if self.doc is None else {c["id"]: c for c in self.doc["clauses"]}

    def verdict(self, clause_id: str) -> str | None:
        clause = self.clauses.get(clause_id)
        return None if clause is None else str(clause["verdict"])

    @property
    def must_failures(self) -> list[str]:
        return [] if self.doc is None else list(self.doc["summary"]["must_failures"])

    @property
    def survivors(self) -> list[str]:
        """KILLS clauses not judged FAIL (the mutant survives them)."""
        return [cid for cid in self.subject.kills if self.verdict(cid) != "FAIL"]


@dataclass(frozen=True)
class Row:
    """A run judged: ``problems`` fail the matrix, ``remarks`` only inform."""

    run: Run
    ratio: float | None  # wall time / the reference's, same clause selection only
    problems: tuple[str, ...] = ()
    remarks: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def notes(self) -> tuple[str, ...]:
        """Problems, then remarks; a MUST list is in its own column, so named only."""
        problems = (_MUST_BAD if p.startswith(_MUST_BAD) else p for p in self.problems)
        return (*problems, *self.remarks)


# ------------------------------------------------------------------------------ discovery


_NOT_LITERAL: Final = object()


def _literals(path: Path) -> tuple[dict[str, Any], bool]:
    """Top-level literal assignments of a module, and whether it defines ``make``.

    Read from the source, not imported: a mutant patches the reference at import time.
    """
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: dict[str, Any] = {}
    has_make = False
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == "make":
            has_make = True
        pairs: list[tuple[ast.expr, ast.expr]] = []
        if isinstance(node, ast.Assign):
            pairs = [(target, node.value) for target in node.targets]
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            pairs = [(node.target, node.value)]
        for target, value in pairs:
            if not isinstance(target, ast.Name):
                continue
            has_make = has_make or target.id == "make"
            try:
                found[target.id] = ast.literal_eval(value)
            except (ValueError, TypeError, SyntaxError):
                found[target.id] = _NOT_LITERAL
    return found, has_make


def _describe_by_import(module: str) -> dict[str, Any]:
    """Fallback for non-literal attributes: import the module in a throwaway process
    (mutants patch the reference at import time; never in this one)."""
    code = (
        "import importlib, json, sys\n"
        "m = importlib.import_module(sys.argv[1])\n"
        "print(json.dumps({'DEFECT': str(m.DEFECT), 'KILLS': [str(k) for k in m.KILLS],"
        " 'FAST': bool(m.FAST), 'MUST_PASS': bool(getattr(m, 'MUST_PASS', False))}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, module],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise ValueError(done.stderr.strip().splitlines()[-1] if done.stderr else "import failed")
    described: dict[str, Any] = json.loads(done.stdout)
    return described


def describe(path: Path) -> Subject:
    """A mutant module as a :class:`Subject` (``problem`` set if it breaks the convention)."""
    name = path.stem
    spec = f"mutants.{name}:make"
    try:
        attrs, has_make = _literals(path)
        if any(attrs.get(k) is _NOT_LITERAL for k in ("DEFECT", "KILLS", "FAST", "MUST_PASS")):
            attrs = _describe_by_import(f"mutants.{name}")
        missing = [k for k in ("DEFECT", "KILLS", "FAST") if k not in attrs]
        if missing or not has_make:
            what = ", ".join([*missing, *([] if has_make else ["make"])])
            return Subject(name, spec, "", problem=f"the module does not define {what}")
        return Subject(
            name,
            spec,
            str(attrs["DEFECT"]),
            kills=tuple(str(k).upper() for k in attrs["KILLS"]),
            fast=bool(attrs["FAST"]),
            must_pass=bool(attrs.get("MUST_PASS", False)),
        )
    except (OSError, SyntaxError, ValueError, subprocess.TimeoutExpired) as exc:
        return Subject(name, spec, "", problem=f"cannot read the module: {exc}")


def discover(directory: Path = MUTANTS_DIR) -> list[Subject]:
    """Every ``m_*.py`` of ``directory``, by name."""
    return [describe(path) for path in sorted(directory.glob("m_*.py"))]


def baselines() -> list[Subject]:
    return [
        Subject("reference", REFERENCE, "the reference: must FAIL no MUST clause", baseline=True),
        Subject(
            "native", NATIVE, "native C example adapter: must FAIL no MUST clause", baseline=True
        ),
        Subject(
            "shm-ring",
            SHM_RING,
            "shared-memory ring (tests/mutants/shm_ring.py, transport shm): must FAIL no MUST "
            "clause",
            baseline=True,
        ),
        Subject(
            "reference-framed",
            REFERENCE_FRAMED,
            "the reference's framed mode (transport uds-framed): must FAIL no MUST clause",
            baseline=True,
        ),
        Subject(
            "tcp-fanout",
            TCP_FANOUT,
            "TCP fan-out (tests/mutants/tcp_fanout.py, transport tcp): must FAIL no MUST clause",
            baseline=True,
        ),
    ]


# ------------------------------------------------------------------------------ running


def _env() -> dict[str, str]:
    """This environment with ``tests/`` on PYTHONPATH (``mutants.<name>:make``)."""
    env = dict(os.environ)
    old = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS_DIR), old) if p)
    return env


def run_subject(
    subject: Subject,
    report_dir: Path,
    *,
    selection: Sequence[str] = (),
    workers: str = "2",
    timeout: float = 900.0,
    expectations: Path | None = None,
) -> Run:
    """Run the conformance suite against ``subject``; its reports go to ``report_dir``
    (judged against ``expectations``, an expectations file, if given)."""
    report_dir.mkdir(parents=True, exist_ok=True)
    json_path = report_dir / "conformance.json"
    json_path.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "tpbcast.conformance", "--tpbcast-impl", subject.spec]
    argv += ["--report-dir", str(report_dir), "-n", workers]
    if selection:
        argv += ["--clauses", ",".join(selection)]
    if expectations is not None:
        argv += ["--expectations", str(expectations)]
    start = time.monotonic()
    with (report_dir / "run.log").open("w", encoding="utf-8") as log:
        log.write(" ".join(argv) + "\n\n")
        log.flush()
        # Its own session, so a hung run can be stopped whole (its xdist workers, ranks).
        proc = subprocess.Popen(
            argv, cwd=REPO, env=_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    wall = time.monotonic() - start
    problem = "" if code is not None else f"killed after the {timeout:g} s run timeout"
    facts = {"wall": wall, "selection": list(selection), "exit_code": code, "problem": problem}
    (report_dir / "run.json").write_text(json.dumps(facts) + "\n", encoding="utf-8")
    doc: Mapping[str, Any] | None = None
    if json_path.exists():
        doc = json.loads(json_path.read_text(encoding="utf-8"))
    elif not problem:
        problem = f"no conformance.json (exit status {code}; see {report_dir / 'run.log'})"
    return Run(subject, tuple(selection), wall, code, report_dir, doc, problem)


def load_run(subject: Subject, report_dir: Path) -> Run:
    """A finished run read back from ``report_dir`` (``run.json``, ``conformance.json``)."""
    try:
        facts = json.loads((report_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return Run(subject, (), 0.0, None, report_dir, None, "never run (no run.json)")
    json_path = report_dir / "conformance.json"
    doc = json.loads(json_path.read_text(encoding="utf-8")) if json_path.exists() else None
    problem = str(facts["problem"]) or ("" if doc else "no conformance.json")
    selection = tuple(str(c) for c in facts["selection"])
    wall, code = float(facts["wall"]), facts["exit_code"]
    return Run(subject, selection, wall, code, report_dir, doc, problem)


def judge(runs: Sequence[Run]) -> list[Row]:
    """Each run against what is expected of its row; ratios to the reference's wall time."""
    references = [r for r in runs if r.subject.spec == REFERENCE and r.doc is not None]
    # The correct implementations a mutant is cut from (the native example is a baseline
    # of MUST clauses only: it FAILs SHOULD ones by design).
    correct = [
        r
        for r in runs
        if r.subject.spec in (REFERENCE, SHM_RING, REFERENCE_FRAMED, TCP_FANOUT)
        and r.doc is not None
    ]
    rows = []
    for run in runs:
        subject = run.subject
        problems = [p for p in (subject.problem, run.problem) if p]
        remarks: list[str] = []
        if run.doc is not None:
            if subject.kills and run.survivors:
                got = ", ".join(f"{c} {run.verdict(c) or 'not run'}" for c in run.survivors)
                problems.append(f"SURVIVES: {got}")
            if (subject.baseline or subject.must_pass) and run.must_failures:
                problems.append(f"{_MUST_BAD}: {', '.join(run.must_failures)}")
        # A kill only means something if the baselines hold the same clause (one of another
        # transport is NOT_APPLICABLE there: it says nothing either way).
        doubted = {
            f"{c} ({base.verdict(c)} for {base.subject.name})"
            for base in correct
            if base is not run
            for c in subject.kills
            if base.verdict(c) not in _SILENT
        }
        if doubted:
            remarks.append(f"a baseline is not PASS on {', '.join(sorted(doubted))}")
        base = next((r for r in references if r.selection == run.selection), None)
        timed = base is not None and base.wall > 0 and run.doc is not None
        ratio = run.wall / base.wall if timed and base is not None else None
        if ratio is not None and ratio > RATIO_LIMIT:
            remarks.append(f"{ratio:.1f}x the reference's wall time (limit ~{RATIO_LIMIT:g}x)")
        rows.append(Row(run, ratio, tuple(problems), tuple(remarks)))
    return rows


def run_matrix(
    subjects: Sequence[Subject],
    report_dir: Path,
    *,
    fast: bool = False,
    jobs: int = 1,
    workers: str = "2",
    timeout: float = 900.0,
    progress: bool = True,
) -> list[Row]:
    """Run every subject (``jobs`` at a time) and judge the results.

    ``fast``: each mutant runs only its KILLS clauses, the baselines the union of them.
    Runs are ordered as given; the reference should come first (the others are compared
    with it).
    """
    union = tuple(dict.fromkeys(c for s in subjects for c in s.kills))

    def selection(subject: Subject) -> tuple[str, ...]:
        if not fast:
            return ()
        # A row with no KILLS (a control such as m_no_capabilities) runs the whole suite.
        return union if subject.baseline else subject.kills

    def one(subject: Subject) -> Run:
        if subject.problem:
            return Run(subject, (), 0.0, None, report_dir, None)
        run = run_subject(
            subject,
            report_dir / "runs" / subject.name,
            selection=selection(subject),
            workers=workers,
            timeout=timeout,
        )
        if progress:
            state = run.problem or (
                f"survives {', '.join(run.survivors)}"
                if subject.kills and run.survivors
                else f"MUST failures {', '.join(run.must_failures) or 'none'}"
            )
            print(f"{subject.name:32} {run.wall:7.1f} s  {state}", flush=True)
        return run

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        runs = list(pool.map(one, subjects))
    return judge(runs)


# ------------------------------------------------------------------------------ reports


def clause_order(docs: Sequence[Mapping[str, Any] | None]) -> list[Mapping[str, Any]]:
    """Every clause present in any conformance.json of ``docs``, in registry order (the
    largest run's order first)."""
    ordered = sorted((d for d in docs if d), key=lambda d: -len(d["clauses"]))
    seen: dict[str, Mapping[str, Any]] = {}
    for doc in ordered:
        for clause in doc["clauses"]:
            seen.setdefault(clause["id"], clause)
    return list(seen.values())


def _clause_order(rows: Sequence[Row]) -> list[Mapping[str, Any]]:
    return clause_order([r.run.doc for r in rows])


def _killed(row: Row) -> str:
    run = row.run
    if run.doc is None:
        return "no report"
    if not run.subject.kills:
        return "n/a"
    return "yes" if not run.survivors else "NO"


def _intended(subject: Subject) -> str:
    if subject.baseline or subject.must_pass:
        return ", ".join(subject.kills) + (" + " if subject.kills else "") + "no MUST FAIL"
    return ", ".join(subject.kills) or "-"


def _time(row: Row) -> str:
    return f"{row.run.wall:.1f} s" if row.run.wall else "-"


def _ratio(row: Row) -> str:
    return "-" if row.ratio is None else f"{row.ratio:.2f}x"


def summary_doc(rows: Sequence[Row], *, fast: bool) -> dict[str, Any]:
    """``mutants.json``: the summary, per row."""
    return {
        "schema": "tpbcast-mutant-matrix/1",
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "mode": "fast" if fast else "full",
        "ok": all(r.ok for r in rows),
        "rows": [
            {
                "name": r.run.subject.name,
                "spec": r.run.subject.spec,
                "defect": r.run.subject.defect,
                "kills": list(r.run.subject.kills),
                "fast": r.run.subject.fast,
                "baseline": r.run.subject.baseline,
                "must_pass": r.run.subject.must_pass,
                "selection": list(r.run.selection),
                "killed": _killed(r),
                "survivors": r.run.survivors if r.run.doc else [],
                "must_failures": r.run.must_failures,
                "wall": round(r.run.wall, 3),
                "ratio": None if r.ratio is None else round(r.ratio, 3),
                "ok": r.ok,
                "problems": list(r.problems),
                "remarks": list(r.remarks),
                "verdicts": {cid: c["verdict"] for cid, c in r.run.clauses.items()},
            }
            for r in rows
        ],
    }


def _headline(rows: Sequence[Row]) -> str:
    """One line: OK, or which rows are not as expected and why (details in the table)."""
    kinds = {"SURVIVES": "mutants that survive", _MUST_BAD: _MUST_BAD}
    found: dict[str, list[str]] = {}
    for row in rows:
        for problem in row.problems:
            kind = next((v for k, v in kinds.items() if problem.startswith(k)), "no verdicts")
            names = found.setdefault(kind, [])
            if row.run.subject.name not in names:
                names.append(row.run.subject.name)
    if not found:
        return "OK: every mutant is killed and no baseline FAILs a MUST clause"
    return "FAIL: " + "; ".join(f"{kind}: {', '.join(names)}" for kind, names in found.items())


def _md(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;")


def render_markdown(rows: Sequence[Row], *, fast: bool) -> str:
    clauses = _clause_order(rows)
    total = sum(r.run.wall for r in rows)
    out = [
        "# tpbcast mutant kill matrix",
        "",
        f"**{_md(_headline(rows))}**",
        "",
        f"- Mode: {'fast (each mutant on its KILLS only)' if fast else 'full suite'}; "
        f"generated {datetime.now(UTC).isoformat(timespec='seconds')}; "
        f"{len(rows)} rows, {total:.0f} s of suite runs",
        "- Cells: P PASS, F FAIL, E ERROR, U UNSUPPORTED, n NOT_APPLICABLE (a clause of "
        "another transport), - NOT_TESTED, blank: not selected; "
        "**bold**: an intended (KILLS) clause. Header: M MUST, S SHOULD, m MAY.",
        "- Each row's own report: `runs/<row>/conformance.md`.",
        "",
        "| row | defect | intended | killed? | MUST FAIL/ERROR | time | x reference | notes |",
        "|---|---|---|---|---|---:|---:|---|",
    ]
    for r in rows:
        s = r.run.subject
        out.append(
            f"| {s.name} | {_md(s.defect)} | {_md(_intended(s))} | {_killed(r)} | "
            f"{', '.join(r.run.must_failures) or '-'} | {_time(r)} | {_ratio(r)} | "
            f"{_md('; '.join(r.notes)) or '-'} |"
        )
    for area in dict.fromkeys(c["area"] for c in clauses):
        cols = [c for c in clauses if c["area"] == area]
        out += ["", f"## {area}", ""]
        head = " | ".join(f"{c['id']} {_LEVEL_MARK.get(c['level'], '?')}" for c in cols)
        out += [f"| row | {head} |", "|---|" + "---|" * len(cols)]
        for r in rows:
            cells = []
            for c in cols:
                verdict = r.run.verdict(c["id"])
                cell = "" if verdict is None else _CELL.get(verdict, verdict)
                cells.append(f"**{cell or ' '}**" if c["id"] in r.run.subject.kills else cell)
            out.append(f"| {r.run.subject.name} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


_CSS: Final = """
body { margin: 0; padding: 24px 32px 48px; color: #1f2328;
  font: 14px/1.45 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; }
h1 { font-size: 24px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 28px 0 8px; }
a { color: #0969da; text-decoration: none; }
.headline { display: inline-block; font-weight: 600; padding: 6px 12px; border-radius: 6px;
  margin: 8px 0 14px; }
.ok { background: #dafbe1; color: #116329; border: 1px solid #4ac26b; }
.bad { background: #ffebe9; color: #a40e26; border: 1px solid #ff8182; }
table { border-collapse: collapse; } th, td { border: 1px solid #d1d9e0; padding: 3px 6px;
  vertical-align: top; text-align: left; }
th { background: #f6f8fa; } td.num { text-align: right; white-space: nowrap; }
.matrix { overflow-x: auto; } .matrix td, .matrix th { padding: 1px 3px; text-align: center;
  font: 11px ui-monospace, SFMono-Regular, Menlo, monospace; }
.matrix th.cl { writing-mode: vertical-rl; transform: rotate(180deg); white-space: nowrap; }
.matrix th.row, .matrix td.row { position: sticky; left: 0; background: #f6f8fa;
  text-align: left; white-space: nowrap; }
.v-pass { background: #dafbe1; color: #116329; } .v-fail { background: #ffebe9;
  color: #a40e26; font-weight: 700; }
.v-error { background: #fbefff; color: #6e40c9; } .v-unsupported { background: #eaeef2;
  color: #424a53; }
.v-not_tested, .v-not_applicable { color: #6e7781; }
td.kill { outline: 2px solid #1f2328; outline-offset: -2px; }
.lvl-must { background: #1f2328; color: #fff; } .lvl-should { background: #59636e; color: #fff; }
.lvl-may { background: #d1d9e0; }
"""


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def render_html(rows: Sequence[Row], *, fast: bool) -> str:
    clauses = _clause_order(rows)
    ok = all(r.ok for r in rows)
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        f"<title>tpbcast mutant kill matrix</title><style>{_CSS}</style></head><body>",
        "<h1>tpbcast mutant kill matrix</h1>",
        f'<div class="headline {"ok" if ok else "bad"}">{_esc(_headline(rows))}</div>',
        f"<p>Mode: {'fast (each mutant on its KILLS only)' if fast else 'full suite'}. "
        "A framed cell is an intended (KILLS) clause; hover a cell for the clause's message. "
        "Header: M MUST, S SHOULD, m MAY.</p>",
        "<h2>Summary</h2><table><tr><th>row</th><th>defect</th><th>intended</th>"
        "<th>killed?</th><th>MUST FAIL/ERROR</th><th>time</th><th>x reference</th>"
        "<th>notes</th></tr>",
    ]
    for r in rows:
        s = r.run.subject
        cls = "" if r.ok else ' class="bad"'
        link = f'<a href="runs/{_esc(s.name)}/index.html">{_esc(s.name)}</a>'
        parts.append(
            f"<tr{cls}><td>{link}</td><td>{_esc(s.defect)}</td><td>{_esc(_intended(s))}</td>"
            f"<td>{_killed(r)}</td><td>{_esc(', '.join(r.run.must_failures) or '-')}</td>"
            f'<td class="num">{_time(r)}</td><td class="num">{_ratio(r)}</td>'
            f"<td>{_esc('; '.join(r.notes))}</td></tr>"
        )
    parts.append('</table><h2>Matrix</h2><div class="matrix"><table><tr><th class="row">row</th>')
    for c in clauses:
        level = str(c["level"])
        parts.append(
            f'<th class="cl lvl-{level.lower()}" title="{_esc(c["title"])}">'
            f"{_esc(c['id'])} {_LEVEL_MARK.get(level, '?')}</th>"
        )
    parts.append("</tr>")
    for r in rows:
        cells = [f'<td class="row">{_esc(r.run.subject.name)}</td>']
        for c in clauses:
            clause = r.run.clauses.get(c["id"])
            kill = " kill" if c["id"] in r.run.subject.kills else ""
            if clause is None:
                cells.append(f'<td class="{kill.strip()}"></td>')
                continue
            verdict = str(clause["verdict"])
            tip = f"{c['id']} {verdict}: {clause.get('message') or ''}".strip()
            cells.append(
                f'<td class="v-{verdict.lower()}{kill}" title="{_esc(tip[:600])}">'
                f"{_CELL.get(verdict, verdict)}</td>"
            )
        parts.append("<tr>" + "".join(cells) + "</tr>")
    parts.append("</table></div></body></html>")
    return "\n".join(parts) + "\n"


def write_reports(rows: Sequence[Row], directory: Path, *, fast: bool) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "mutants.md").write_text(render_markdown(rows, fast=fast), encoding="utf-8")
    (directory / "index.html").write_text(render_html(rows, fast=fast), encoding="utf-8")
    doc = summary_doc(rows, fast=fast)
    (directory / "mutants.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------ CLI


def select(subjects: Sequence[Subject], names: Sequence[str]) -> list[Subject]:
    """The subjects named (``wording`` or ``m_wording``; a baseline by its row name:
    ``reference``, ``native``, ``shm-ring``, ``reference-framed``, ``tcp-fanout``)."""
    plain = ("reference", "native", "shm-ring", "reference-framed", "tcp-fanout")
    wanted = {n if n in plain or n.startswith("m_") else f"m_{n}" for n in names}
    unknown = wanted - {s.name for s in subjects}
    if unknown:
        raise SystemExit(f"error: no such row: {', '.join(sorted(unknown))}")
    return [s for s in subjects if s.name in wanted]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--fast", action="store_true", help="FAST mutants, on their KILLS only")
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="one row")
    parser.add_argument("--no-baselines", action="store_true", help="skip reference and native")
    cpus = os.cpu_count() or 2
    parser.add_argument("--jobs", type=int, default=max(1, cpus // 2), help="runs at a time")
    parser.add_argument("--workers", default="2", help="pytest-xdist workers per run")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    parser.add_argument("--report-dir", type=Path, default=REPORT_DIR)
    parser.add_argument(
        "--render-only", action="store_true", help="rebuild the reports from the last runs"
    )
    args = parser.parse_args(argv)

    everything = [*baselines(), *discover()]
    if args.only:
        subjects = select(everything, args.only)
        if not args.no_baselines and all(s.spec != REFERENCE for s in subjects):
            subjects.insert(0, everything[0])  # the reference: wall-time ratio, kill check
        shm = next(s for s in everything if s.spec == SHM_RING)
        shm_rows = any(s.name.startswith("m_shm_") for s in subjects)
        if not args.no_baselines and shm_rows and shm not in subjects:
            subjects.insert(1, shm)  # what an shm mutant's kills are checked against
        framed = next(s for s in everything if s.spec == REFERENCE_FRAMED)
        framed_rows = any(s.name.startswith("m_framed_") for s in subjects)
        if not args.no_baselines and framed_rows and framed not in subjects:
            subjects.insert(1, framed)  # what a framed mutant's kills are checked against
        tcp = next(s for s in everything if s.spec == TCP_FANOUT)
        tcp_rows = any(s.name.startswith("m_tcp_") for s in subjects)
        if not args.no_baselines and tcp_rows and tcp not in subjects:
            subjects.insert(1, tcp)  # what a tcp mutant's kills are checked against
    else:
        subjects = everything
        if args.fast:
            subjects = [s for s in subjects if s.baseline or s.fast]
    if args.no_baselines:
        subjects = [s for s in subjects if not s.baseline]
    if not subjects:
        print("no rows to run", file=sys.stderr)
        return 1
    start = time.monotonic()
    if args.render_only:
        runs = [load_run(s, args.report_dir / "runs" / s.name) for s in subjects]
        rows = judge(runs)
    else:
        rows = run_matrix(
            subjects,
            args.report_dir,
            fast=args.fast,
            jobs=args.jobs,
            workers=args.workers,
            timeout=args.timeout,
        )
    write_reports(rows, args.report_dir, fast=args.fast)
    print(f"\n{_headline(rows)}")
    print(
        f"{len(rows)} rows in {time.monotonic() - start:.0f} s; report: "
        f"{args.report_dir / 'index.html'}, {args.report_dir / 'mutants.md'}"
    )
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
