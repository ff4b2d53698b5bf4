"""Flake proof: the conformance run, again and again, with and without a CPU hog.

A verdict that changes between two runs of the same implementation is worth nothing.
This runs ``python -m tpbcast.conformance`` against one implementation ``--runs`` times
in a row (default 20); every second run starts a busy-loop process first, so one of the
machine's cores is taken, as on a shared CI runner.  It reports, per run: the load,
the wall time, the exit status and every clause that was not PASS/UNSUPPORTED/NOT_TESTED
(FAIL or ERROR), and exits non-zero if any run had one.

Not part of CI (20 full runs take ~10 minutes on 2 cores); run it by hand::

    python benchmarks/repeat_conformance.py --runs 20
    python benchmarks/repeat_conformance.py --impl mypkg.adapter:make --runs 4

The summary is printed and written to ``reports/flake/summary.md``.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tpbcast.harness._proc import set_pdeathsig

REFERENCE: Final = "tpbcast.reference_impl.conformance_adapter:make"
BAD: Final = frozenset({"FAIL", "ERROR"})


@dataclass(frozen=True)
class Run:
    """One conformance run and what went wrong in it."""

    index: int
    loaded: bool
    wall: float
    exit_status: int
    bad: tuple[str, ...]  # "CLAUSE VERDICT: first message line"

    def row(self) -> str:
        bad = "; ".join(self.bad) if self.bad else "-"
        load = "busy loop on 1 core" if self.loaded else "idle"
        return f"| {self.index} | {load} | {self.wall:.1f} s | {self.exit_status} | {bad} |"


def _dies_with_us(sig: int) -> None:
    """``preexec_fn`` that makes a child get ``sig`` when this script dies.

    A killed script must leave nothing behind: the hog loops forever, and a conformance
    run would go on judging for nobody.  (multiprocessing's hog left a busy loop and its
    resource tracker re-parented to init when the script was killed.)
    """
    set_pdeathsig(sig)


def _start_hog() -> subprocess.Popen[bytes]:
    """A busy loop on one core (the load of a shared CI runner)."""
    return subprocess.Popen(
        [sys.executable, "-c", "while True: pass"],
        preexec_fn=lambda: _dies_with_us(signal.SIGKILL),  # noqa: PLW1509 - one thread
    )


def _one(index: int, impl: str, loaded: bool, extra: list[str]) -> Run:
    hog = _start_hog() if loaded else None
    try:
        with tempfile.TemporaryDirectory(prefix="tpbcast-flake-") as tmp:
            started = time.monotonic()
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "tpbcast.conformance",
                    f"--tpbcast-impl={impl}",
                    f"--report-dir={tmp}",
                    *extra,
                ],
                capture_output=True,
                text=True,
                check=False,
                preexec_fn=lambda: _dies_with_us(signal.SIGTERM),
            )
            wall = time.monotonic() - started
            report = Path(tmp) / "conformance.json"
            if not report.exists():
                tail = (proc.stdout + proc.stderr)[-400:].replace("\n", " ")
                return Run(index, loaded, wall, proc.returncode, (f"no report: {tail}",))
            doc = json.loads(report.read_text())
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    bad = tuple(
        f"{c['id']} {c['verdict']}: {(c['message'].splitlines() or [''])[0][:200]}"
        for c in doc["clauses"]
        if c["verdict"] in BAD
    )
    return Run(index, loaded, wall, proc.returncode, bad)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="how many runs (default 20)")
    parser.add_argument("--impl", default=REFERENCE, help="MODULE:FACTORY (default: reference)")
    parser.add_argument("--out", default="reports/flake", help="where summary.md goes")
    parser.add_argument("extra", nargs="*", help="passed on to python -m tpbcast.conformance")
    args = parser.parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so the temporary report dirs and the hog go too.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    runs = []
    for index in range(1, args.runs + 1):
        run = _one(index, args.impl, loaded=index % 2 == 0, extra=args.extra)
        print(run.row(), flush=True)
        runs.append(run)
    failed = [r for r in runs if r.bad or r.exit_status != 0]
    walls = sorted(r.wall for r in runs)
    lines = [
        "# Conformance flake proof",
        "",
        f"Implementation `{args.impl}`, {len(runs)} consecutive runs, every second one with a "
        "busy-loop process hogging one core.",
        "",
        f"**{len(failed)} run(s) with a FAIL or ERROR clause or a non-zero exit.** "
        f"Wall time: median {walls[len(walls) // 2]:.1f} s, max {walls[-1]:.1f} s.",
        "",
        "| run | load | wall | exit | FAIL/ERROR clauses |",
        "|---:|---|---:|---:|---|",
        *(r.row() for r in runs),
        "",
    ]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").write_text("\n".join(lines))
    print("\n".join(lines[:6]))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
