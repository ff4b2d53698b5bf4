"""The ecosystem matrix: every real implementation whose engine is installed, side by side.

The conformance suite (``python -m tpbcast.conformance``) judges each implementation of
:data:`ENTRIES` that is installed here (the reference, the native C example through ctypes
and as an ``exec:`` driver, vLLM's shared-memory ``MessageQueue``, SGLang's
``broadcast_pyobj`` and ``MessageQueue``, torch's gloo broadcast, the from-scratch shm
ring of ``tests/mutants/``), each against its expectations file if it has one, one after
the other (wall times are compared), and writes ``reports/ecosystem/``:
``index.html`` and ``ecosystem.md`` (a summary per implementation: verdict counts, wall
time and its ratio to the reference's; then the matrix clause x implementation with each
clause's level and scope, NOT_APPLICABLE shown, expected results marked), ``ecosystem.json``
and each run's own report under ``runs/<name>/``::

    python tools/ecosystem.py                 # every installed implementation
    python tools/ecosystem.py --only vllm     # one row (+ the reference, for the ratio);
                                              # the other rows keep their last run
    python tools/ecosystem.py --render-only   # rebuild the reports from runs/
    python tools/ecosystem.py --list          # the rows and whether each is installed
    nox -s ecosystem                          # installs vLLM too, then the same

Exit status 0 iff every run matches its expectations file (the run's own exit status with
``--expectations``: no FAIL or ERROR it does not announce, no announced verdict that
changed) and every run without one has no MUST clause FAIL or ERROR.  A row whose engine is
not installed is shown as skipped and fails nothing.  The suite runs and the per-run
bookkeeping are ``tools/mutants.py``'s (``run_subject``, ``load_run``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from tpbcast.harness import adapter

HERE: Final = Path(__file__).resolve().parent


def _load_mutants() -> ModuleType:
    """tools/mutants.py under the name tests/test_mutants.py gives it too (``mutants`` is
    also the package of tests/mutants/, which the suite's runs import)."""
    name = "tpbcast_tools_mutants"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE / "mutants.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve annotations through it
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:
    import mutants as mt
else:
    mt = _load_mutants()

REPO: Final = HERE.parent
REPORT_DIR: Final = REPO / "reports" / "ecosystem"
DEFAULT_SEED: Final = "20261203"
"""The seed every row runs with unless --seed or TPBCAST_SEED says otherwise."""
REFERENCE_NAME: Final = "reference"
RATIO_GOAL: Final = 3.0  # any implementation is judged in at most 3x the reference's time


@dataclass(frozen=True)
class Entry:
    """One implementation the matrix judges, and what it needs to be installed."""

    name: str
    spec: str
    engine: str
    expectations: str = ""  # path relative to the repository; "" = none
    module: str = ""  # a Python module that must be importable
    compiler: bool = False  # needs a C compiler (the native example builds itself)
    path: str = ""  # a file that must exist (relative to the repository)

    def missing(self) -> str:
        """Why this entry cannot run here, or "" if it can."""
        if self.module and importlib.util.find_spec(self.module) is None:
            return f"module {self.module!r} is not installed"
        if self.compiler and not any(shutil.which(cc) for cc in ("cc", "gcc", "clang")):
            return "no C compiler (cc, gcc, clang) on PATH"
        if self.path and not (REPO / self.path).exists():
            return f"{self.path} does not exist (yet)"
        return ""


NATIVE_EXPECTATIONS: Final = "conformance/adapters/native/expectations.toml"
ENTRIES: Final = (
    Entry(REFERENCE_NAME, mt.REFERENCE, "tpbcast's Python reference (wire v1 over a Unix socket)"),
    Entry(
        "reference-framed",
        mt.REFERENCE_FRAMED,
        "the same reference speaking RTP-LLM's framed wire (PR #1119, transport uds-framed)",
    ),
    Entry(
        "native",
        mt.NATIVE,
        "the native C example (wire v1) through ctypes",
        expectations=NATIVE_EXPECTATIONS,
        compiler=True,
    ),
    Entry(
        "exec",
        "exec:python -m tpbcast.conformance.adapters.exec",
        "the same C library as its own executable (exec: driver kit)",
        expectations=NATIVE_EXPECTATIONS,  # the same library: the same verdicts (its README)
        compiler=True,
    ),
    Entry(
        "vllm",
        "tpbcast.conformance.adapters.vllm.adapter:make",
        "vLLM 0.33's shm_broadcast.MessageQueue (shared-memory ring + zmq)",
        expectations="conformance/adapters/vllm/expectations.toml",
        module="vllm",
    ),
    Entry(
        "sglang_pyobj",
        "tpbcast.conformance.adapters.sglang.adapter:make",
        "SGLang 0.5.23's broadcast_pyobj on a gloo cpu_group (TCP, gloo_timeout 7200 s)",
        expectations="conformance/adapters/sglang/expectations-pyobj.toml",
        module="sglang",
    ),
    Entry(
        "sglang_mq",
        "tpbcast.conformance.adapters.sglang.mq:make",
        "SGLang 0.5.23's shm_broadcast.MessageQueue (shared-memory ring + zmq over tcp)",
        expectations="conformance/adapters/sglang/expectations-mq.toml",
        module="sglang",
    ),
    Entry(
        "torch_gloo",
        "tpbcast.conformance.adapters.torch_gloo.adapter:make",
        "torch's own dist.broadcast on a gloo process group (TCP, default timeout 1800 s)",
        expectations="conformance/adapters/torch_gloo/expectations.toml",
        module="torch",
    ),
    Entry(
        "shm_ring",
        "mutants.shm_ring:make",
        "the from-scratch shared-memory ring of tests/mutants/ (correct one)",
        path="tests/mutants/shm_ring.py",
    ),
)


@dataclass(frozen=True)
class Result:
    """One entry's run (None: skipped, ``skipped`` says why) and how it was judged."""

    entry: Entry
    run: mt.Run | None
    skipped: str = ""
    ratio: float | None = None  # wall time / the reference's
    problems: tuple[str, ...] = ()
    remarks: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def doc(self) -> Mapping[str, Any] | None:
        return None if self.run is None else self.run.doc


# ------------------------------------------------------------------------------ judging


def _subject(entry: Entry) -> mt.Subject:
    return mt.Subject(entry.name, entry.spec, entry.engine, baseline=not entry.expectations)


def judge(
    entries: Sequence[Entry], runs: Mapping[str, mt.Run], skipped: Mapping[str, str]
) -> list[Result]:
    """Each run against its expectations file (or "no MUST FAIL/ERROR"), with its wall
    time's ratio to the reference's."""
    reference = runs.get(REFERENCE_NAME)
    base = reference.wall if reference is not None and reference.doc is not None else 0.0
    results = []
    for entry in entries:
        run = runs.get(entry.name)
        if run is None:
            results.append(Result(entry, None, skipped.get(entry.name, "not run")))
            continue
        problems = [run.problem] if run.problem else []
        remarks: list[str] = []
        doc = run.doc
        if doc is not None:
            summary = doc["summary"]
            if entry.expectations:
                unexpected = list(summary.get("unexpected") or [])
                if unexpected:
                    problems.append(f"not as expected: {', '.join(unexpected)}")
                elif doc.get("exit_status", 0) != 0:
                    problems.append(f"exit status {doc['exit_status']}")
            elif summary["must_failures"]:
                problems.append(f"MUST FAIL/ERROR: {', '.join(summary['must_failures'])}")
        ratio = run.wall / base if base > 0 and doc is not None else None
        if ratio is not None and ratio > RATIO_GOAL:
            remarks.append(f"{ratio:.1f}x the reference's wall time (goal <= {RATIO_GOAL:g}x)")
        results.append(Result(entry, run, "", ratio, tuple(problems), tuple(remarks)))
    return results


def exit_code(results: Sequence[Result]) -> int:
    return 0 if all(r.ok for r in results) else 1


# ------------------------------------------------------------------------------ cells

_SHORT: Final = {
    "PASS": "PASS",
    "FAIL": "FAIL",
    "ERROR": "ERROR",
    "UNSUPPORTED": "UNSUP",
    "NOT_APPLICABLE": "N/A",
    "NOT_TESTED": "-",
}
VERDICTS: Final = ("PASS", "FAIL", "ERROR", "UNSUPPORTED", "NOT_APPLICABLE", "NOT_TESTED")


def cell(clause: Mapping[str, Any] | None, doc: Mapping[str, Any] | None = None) -> tuple[str, str]:
    """A clause result of ``doc`` as ``(text, css class)``: ``FAIL (expected)`` for an
    announced failure, ``PASS (stale: expected FAIL)`` for an announced verdict that did not
    happen, ``FAIL (new)`` for a failure a run judged against an expectations file did not
    announce."""
    if clause is None:
        return "", "v-none"
    verdict = str(clause["verdict"])
    text = _SHORT.get(verdict, verdict)
    css = f"v-{verdict.lower()}"
    expected: Mapping[str, Any] = clause.get("expected") or {}
    outcome = expected.get("outcome")
    if outcome == "expected":
        return f"{text} (expected)", f"{css} expected"
    if outcome == "stale":
        return f"{text} (stale: expected {expected['verdict']})", f"{css} unexpected"
    unexpected = () if doc is None else doc["summary"].get("unexpected") or ()
    if outcome == "regression" or clause.get("id") in unexpected:
        return f"{text} (new)", f"{css} unexpected"
    return text, css


def counts(doc: Mapping[str, Any] | None) -> dict[str, int]:
    """Verdict counts of one run (every verdict present, 0 if none) + ``expected``."""
    if doc is None:
        return {}
    found = {v: 0 for v in VERDICTS}
    for clause in doc["clauses"]:
        found[str(clause["verdict"])] = found.get(str(clause["verdict"]), 0) + 1
    found["expected"] = sum(
        1 for c in doc["clauses"] if (c.get("expected") or {}).get("outcome") == "expected"
    )
    return found


def _counts_text(doc: Mapping[str, Any] | None) -> str:
    got = counts(doc)
    if not got:
        return "-"
    parts = [f"{_SHORT[v]} {got[v]}" for v in VERDICTS if got[v]]
    return ", ".join(parts) + (f" ({got['expected']} as expected)" if got["expected"] else "")


def core_unsupported(doc: Mapping[str, Any] | None) -> list[Mapping[str, Any]] | None:
    """The run's core UNSUPPORTED clauses, each with what was not declared (None: the run
    wrote no such field, or did not run)."""
    if doc is None:
        return None
    got = doc.get("summary", {}).get("core_unsupported")
    return None if got is None else list(got)


def _core_unsupported_text(doc: Mapping[str, Any] | None) -> str:
    """``"2: RESET-9 generation; BCAST-11 adapter:peer_buffer"`` (``-`` when not known)."""
    entries = core_unsupported(doc)
    if entries is None:
        return "-"
    shown = "; ".join(
        f"{e['id']} {', '.join(e['needs']) or 'no capability: ' + str(e['reason'])[:80]}"
        for e in entries
    )
    return f"{len(entries)}" + (f": {shown}" if shown else "")


def _status(result: Result) -> str:
    if result.run is None:
        return f"skipped: {result.skipped}"
    if result.problems:
        return "; ".join(result.problems)
    return "as expected" if result.entry.expectations else "no MUST FAIL/ERROR"


def _wall(result: Result) -> str:
    return "-" if result.run is None or not result.run.wall else f"{result.run.wall:.0f} s"


def _ratio(result: Result) -> str:
    return "-" if result.ratio is None else f"{result.ratio:.2f}x"


def _transport(result: Result) -> str:
    doc = result.doc
    if doc is None:
        return "-"
    return str(doc["implementation"].get("transport") or adapter.DEFAULT_TRANSPORT)


def _version(result: Result) -> str:
    doc = result.doc
    return (
        "-"
        if doc is None
        else f"{doc['implementation']['name']} {doc['implementation']['version']}"
    )


def cleanup(result: Result) -> Mapping[str, Any] | None:
    """The run's ``cleanup.json`` (what the suite removed after the implementation), if any."""
    if result.run is None:
        return None
    path = result.run.report_dir / "cleanup.json"
    try:
        doc: Mapping[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc


def _cleanup_text(result: Result) -> str:
    doc = cleanup(result)
    if doc is None:
        return "not recorded"
    return str(doc["summary"]).partition(": ")[2] or "-"


def _headline(results: Sequence[Result]) -> str:
    ran = [r for r in results if r.run is not None]
    bad = [r.entry.name for r in ran if not r.ok]
    skipped = [r.entry.name for r in results if r.run is None]
    tail = f" ({', '.join(skipped)} not installed: skipped)" if skipped else ""
    if bad:
        return f"FAIL: not as expected: {', '.join(bad)}{tail}"
    return f"OK: {len(ran)} implementations judged, every one as expected{tail}"


def _scope(clause: Mapping[str, Any]) -> str:
    return str(clause.get("scope") or "-")


# ------------------------------------------------------------------------------ reports


def render_markdown(results: Sequence[Result]) -> str:
    ran = [r for r in results if r.doc is not None]
    clauses = mt.clause_order([r.doc for r in ran])
    by_impl = {r.entry.name: {c["id"]: c for c in r.doc["clauses"]} for r in ran if r.doc}
    docs = {r.entry.name: r.doc for r in ran}
    out = [
        "# tpbcast ecosystem matrix",
        "",
        f"**{mt._md(_headline(results))}**",
        "",
        f"- Generated {datetime.now(UTC).isoformat(timespec='seconds')} by "
        "`python tools/ecosystem.py` (`nox -s ecosystem`); each run's own report: "
        "`runs/<name>/conformance.md`.",
        "- Cells: PASS, FAIL, ERROR, UNSUP (UNSUPPORTED: needs a capability the "
        "implementation does not declare, or not stageable on it; the column core "
        "UNSUPPORTED names what was not declared for each core one), N/A (NOT_APPLICABLE: "
        "a clause of another "
        "transport), - (NOT_TESTED); `(expected)`: announced by the implementation's "
        "expectations file (reasons below), `(new)` / `(stale ...)`: not as announced.",
        f"- Wall time ratio: to the reference's on the same machine (goal <= {RATIO_GOAL:g}x).",
        "",
        "| implementation | engine | transport | expectations | verdicts | wall | "
        "x reference | status | core UNSUPPORTED (not declared) |",
        "|---|---|---|---|---|---:|---:|---|---|",
    ]
    for r in results:
        out.append(
            f"| {r.entry.name} | {mt._md(r.entry.engine)} ({mt._md(_version(r))}) | "
            f"{_transport(r)} | {r.entry.expectations or '-'} | {_counts_text(r.doc)} | "
            f"{_wall(r)} | {_ratio(r)} | {mt._md('; '.join((_status(r), *r.remarks)))} | "
            f"{mt._md(_core_unsupported_text(r.doc))} |"
        )
    out += [
        "",
        "## What the suite removed after each implementation",
        "",
        "What the run's groups left behind, proven theirs (a holder pid, the creator's pid "
        "in the name, a rank's descendant, or the test's own observation) and removed after "
        "the test that caused it; each entry, with the clause it breaks, is in that test's "
        "report and in `runs/<name>/cleanup.json`.",
        "",
        "| implementation | removed |",
        "|---|---|",
    ]
    out += [f"| {r.entry.name} | {mt._md(_cleanup_text(r))} |" for r in ran]
    names = [r.entry.name for r in ran]
    for area in dict.fromkeys(c["area"] for c in clauses):
        out += ["", f"## {area}", ""]
        out.append("| clause | level | scope | " + " | ".join(names) + " |")
        out.append("|---|---|---|" + "---|" * len(names))
        for c in (c for c in clauses if c["area"] == area):
            cells = [cell(by_impl[n].get(c["id"]), docs[n])[0] for n in names]
            out.append(
                f"| {c['id']} {mt._md(c['title'])} | {c['level']} | {_scope(c)} | "
                + " | ".join(cells)
                + " |"
            )
    reasons = [
        (r.entry.name, c["id"], c["verdict"], c["expected"])
        for r in ran
        if r.doc
        for c in r.doc["clauses"]
        if c.get("expected")
    ]
    if reasons:
        out += ["", "## Expected results and why", ""]
        out += [
            "| implementation | clause | verdict | announced | reason |",
            "|---|---|---|---|---|",
        ]
        for name, cid, verdict, exp in reasons:
            out.append(
                f"| {name} | {cid} | {verdict} | {exp['verdict']} ({exp['outcome']}) | "
                f"{mt._md(str(exp['reason']))} |"
            )
    return "\n".join(out) + "\n"


_CSS: Final = (
    mt._CSS
    + """
.grid td.v { text-align: center; white-space: nowrap; font: 12px ui-monospace, monospace; }
.grid td.t { max-width: 520px; }
td.expected { font-style: italic; } td.unexpected { outline: 2px solid #a40e26;
  outline-offset: -2px; }
.v-not_applicable { background: #f6f8fa; color: #6e7781; } .v-none { background: #fff; }
"""
)


def render_html(results: Sequence[Result]) -> str:
    ran = [r for r in results if r.doc is not None]
    clauses = mt.clause_order([r.doc for r in ran])
    by_impl = {r.entry.name: {c["id"]: c for c in r.doc["clauses"]} for r in ran if r.doc}
    docs = {r.entry.name: r.doc for r in ran}
    ok = all(r.ok for r in results)
    esc = mt._esc
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        f"<title>tpbcast ecosystem matrix</title><style>{_CSS}</style></head><body>",
        "<h1>tpbcast ecosystem matrix</h1>",
        f'<div class="headline {"ok" if ok else "bad"}">{esc(_headline(results))}</div>',
        "<p>Every installed implementation judged by the same suite. N/A: a clause of "
        "another transport (NOT_APPLICABLE); UNSUP: needs an undeclared capability; "
        "<i>italic</i>: announced by the expectations file (hover for the reason); a red "
        "frame: not as announced. Wall time ratio to the reference's: goal &lt;= "
        f"{RATIO_GOAL:g}x.</p>",
        "<h2>Implementations</h2><table><tr><th>implementation</th><th>engine</th>"
        "<th>transport</th><th>expectations</th><th>verdicts</th><th>wall</th>"
        "<th>x reference</th><th>status</th><th>core UNSUPPORTED (not declared)</th></tr>",
    ]
    for r in results:
        name = esc(r.entry.name)
        link = f'<a href="runs/{name}/index.html">{name}</a>' if r.doc else name
        cls = "" if r.ok else ' class="bad"'
        parts.append(
            f"<tr{cls}><td>{link}</td><td>{esc(r.entry.engine)}<br><small>"
            f"{esc(_version(r))}</small></td><td>{esc(_transport(r))}</td>"
            f"<td>{esc(r.entry.expectations or '-')}</td><td>{esc(_counts_text(r.doc))}</td>"
            f'<td class="num">{_wall(r)}</td><td class="num">{_ratio(r)}</td>'
            f"<td>{esc('; '.join((_status(r), *r.remarks)))}</td>"
            f"<td>{esc(_core_unsupported_text(r.doc))}</td></tr>"
        )
    parts.append("</table>")
    parts.append(
        "<h2>What the suite removed after each implementation</h2><table>"
        "<tr><th>implementation</th><th>removed (details: runs/&lt;name&gt;/cleanup.json)</th>"
        "</tr>"
    )
    parts += [f"<tr><td>{esc(r.entry.name)}</td><td>{esc(_cleanup_text(r))}</td></tr>" for r in ran]
    parts.append("</table>")
    names = [r.entry.name for r in ran]
    for area in dict.fromkeys(c["area"] for c in clauses):
        parts.append(f'<h2>{esc(area)}</h2><table class="grid"><tr><th>clause</th>')
        parts.append("<th>level</th><th>scope</th>")
        parts += [f"<th>{esc(n)}</th>" for n in names]
        parts.append("</tr>")
        for c in (c for c in clauses if c["area"] == area):
            level = str(c["level"])
            row = [
                f'<td class="t"><b>{esc(c["id"])}</b> {esc(c["title"])}</td>',
                f'<td class="lvl-{level.lower()}">{esc(level)}</td><td>{esc(_scope(c))}</td>',
            ]
            for n in names:
                got = by_impl[n].get(c["id"])
                text, css = cell(got, docs[n])
                tip = ""
                if got is not None:
                    reason = (got.get("expected") or {}).get("reason") or ""
                    tip = f"{n} {c['id']} {got['verdict']}: {reason or got.get('message') or ''}"
                row.append(f'<td class="v {css}" title="{esc(tip[:800])}">{esc(text)}</td>')
            parts.append("<tr>" + "".join(row) + "</tr>")
        parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def summary_doc(results: Sequence[Result]) -> dict[str, Any]:
    return {
        "schema": "tpbcast-ecosystem-matrix/1",
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "ok": all(r.ok for r in results),
        "implementations": [
            {
                "name": r.entry.name,
                "spec": r.entry.spec,
                "engine": r.entry.engine,
                "expectations": r.entry.expectations or None,
                "skipped": r.skipped or None,
                "transport": None if r.doc is None else _transport(r),
                "counts": counts(r.doc),
                "wall": None if r.run is None else round(r.run.wall, 3),
                "ratio": None if r.ratio is None else round(r.ratio, 3),
                "ok": r.ok,
                "problems": list(r.problems),
                "remarks": list(r.remarks),
                "cleanup": _cleanup_summary(r),
                "core_unsupported": core_unsupported(r.doc),
                "verdicts": {}
                if r.doc is None
                else {c["id"]: c["verdict"] for c in r.doc["clauses"]},
            }
            for r in results
        ],
    }


def _cleanup_summary(result: Result) -> dict[str, Any] | None:
    doc = cleanup(result)
    if doc is None:
        return None
    return {k: doc[k] for k in ("summary", "outside", "workdir") if k in doc}


def write_reports(results: Sequence[Result], directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ecosystem.md").write_text(render_markdown(results), encoding="utf-8")
    (directory / "index.html").write_text(render_html(results), encoding="utf-8")
    doc = summary_doc(results)
    (directory / "ecosystem.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------ CLI


def select(names: Sequence[str]) -> list[Entry]:
    known = {e.name: e for e in ENTRIES}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(
            f"error: no such implementation: {', '.join(unknown)} (known: {', '.join(known)})"
        )
    wanted = set(names) | {REFERENCE_NAME}  # the reference: the wall-time ratio
    return [e for e in ENTRIES if e.name in wanted]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="one row")
    parser.add_argument("--workers", default="2", help="pytest-xdist workers per run")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    parser.add_argument("--report-dir", type=Path, default=REPORT_DIR)
    parser.add_argument("--render-only", action="store_true", help="rebuild from runs/")
    parser.add_argument("--list", action="store_true", help="the rows and what each needs")
    parser.add_argument(
        "--seed",
        default=os.environ.get("TPBCAST_SEED", DEFAULT_SEED),
        help="the suite's seed for every row (TPBCAST_SEED; pinned so that a row's verdicts "
        "repeat run after run, as an expectations file needs)",
    )
    args = parser.parse_args(argv)
    os.environ["TPBCAST_SEED"] = str(args.seed)  # every row's suite run inherits it
    entries = select(args.only) if args.only else list(ENTRIES)
    chosen = {e.name for e in entries}
    if args.list:
        for e in entries:
            state = e.missing() or "installed"
            print(f"{e.name:10} {state:40} {e.spec}  {e.expectations or ''}")
        return 0
    start = time.monotonic()
    runs: dict[str, mt.Run] = {}
    skipped: dict[str, str] = {}
    for entry in ENTRIES:
        run_dir = args.report_dir / "runs" / entry.name
        why = entry.missing()
        if why:
            skipped[entry.name] = why
            print(f"{entry.name:10} skipped: {why}", flush=True)
            continue
        if entry.name not in chosen:  # --only: the other rows keep their last run
            if (run_dir / "run.json").exists():
                runs[entry.name] = mt.load_run(_subject(entry), run_dir)
            continue
        if args.render_only:
            runs[entry.name] = mt.load_run(_subject(entry), run_dir)
            continue
        expectations = REPO / entry.expectations if entry.expectations else None
        run = mt.run_subject(
            _subject(entry),
            run_dir,
            workers=args.workers,
            timeout=args.timeout,
            expectations=expectations,
        )
        runs[entry.name] = run
        state = run.problem or f"exit status {run.exit_code}"
        print(f"{entry.name:10} {run.wall:7.1f} s  {state}", flush=True)
    results = judge([e for e in ENTRIES if e.name in chosen or e.name in runs], runs, skipped)
    write_reports(results, args.report_dir)
    print(f"\n{_headline(results)}")
    for r in results:
        counted = _counts_text(r.doc)
        print(f"  {r.entry.name:10} {counted:70} {_wall(r):>7} {_ratio(r):>6}  {_status(r)}")
    print(
        f"{len(results)} rows in {time.monotonic() - start:.0f} s; report: "
        f"{args.report_dir / 'index.html'}, {args.report_dir / 'ecosystem.md'}"
    )
    return exit_code(results)


if __name__ == "__main__":
    raise SystemExit(main())
