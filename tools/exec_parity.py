"""Judge the native C example through ctypes and through ``exec:``; the verdicts must match.

The ``exec:`` adapter is only trustworthy if it is transparent: the same C code, wrapped
in-process (``conformance/adapters/native``) or driven as its own executable
(``conformance/adapters/exec/cbcast_driver.c``), must get the same verdict on every clause.

    python tools/exec_parity.py [--report-dir DIR] [-- extra args for both runs]

Runs the suite twice (serially: both runs are timing-sensitive), writes each run's reports
under DIR/ctypes and DIR/exec, prints every clause whose verdict differs with the failing
checks of both sides, and exits 1 if any differs (0 otherwise).  One difference is by
design and listed apart: a clause UNSUPPORTED through exec: because the adapter refused
the call before the driver (``ExecNotAsked``, "the driver was never asked": BCAST-11).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

CTYPES_SPEC = "tpbcast.conformance.adapters.native.adapter:make"
# ExecNotAsked's message: the clause was not judged through exec: (README, "What the suite
# checks before calling the driver"), so its verdict cannot match and need not.
NOT_ASKED = "the driver was never asked"


def _run(spec: str, out: Path, extra: list[str]) -> dict[str, Any]:
    argv = [sys.executable, "-m", "tpbcast.conformance", "--tpbcast-impl", spec]
    argv += ["--report-dir", str(out), *extra]
    print("$", " ".join(argv), flush=True)
    subprocess.run(argv, check=False)  # the exit status is the verdicts', compared below
    report = out / "conformance.json"
    if not report.exists():
        sys.exit(f"exec_parity: the run for {spec!r} wrote no {report}")
    data: dict[str, Any] = json.loads(report.read_text())
    return data


def _bad_checks(clause: dict[str, Any]) -> list[str]:
    return [
        f"      {c['test_id']}: {c['verdict']}: {c['message'][:240]}"
        for c in clause["checks"]
        if c["verdict"] not in ("PASS", "UNSUPPORTED")
    ]


def _not_asked(clause: dict[str, Any] | None) -> bool:
    return bool(clause) and clause["verdict"] == "UNSUPPORTED" and NOT_ASKED in clause["message"]


def compare(left: dict[str, Any], right: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Lines describing every clause whose verdict differs (empty: identical verdicts), and
    the clauses exec: could not ask its driver about (differences by design)."""
    by_id = {c["id"]: c for c in right["clauses"]}
    lines: list[str] = []
    by_design: list[str] = []
    for clause in left["clauses"]:
        other = by_id.get(clause["id"])
        verdict = other["verdict"] if other else "MISSING"
        if clause["verdict"] == verdict:
            continue
        if _not_asked(other):
            by_design.append(f"  {clause['id']}: ctypes {clause['verdict']} / exec {verdict}")
            continue
        lines.append(f"  {clause['id']}: ctypes {clause['verdict']} / exec {verdict}")
        lines += _bad_checks(clause) + (_bad_checks(other) if other else [])
    return lines, by_design


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report-dir", type=Path, default=Path("reports/exec_parity"))
    parser.add_argument("extra", nargs="*", help="arguments for both suite runs")
    args = parser.parse_args()
    from tpbcast.conformance.adapters.exec import exec_spec

    ctypes_run = _run(CTYPES_SPEC, args.report_dir / "ctypes", args.extra)
    exec_run = _run(exec_spec(), args.report_dir / "exec", args.extra)
    lines, by_design = compare(ctypes_run, exec_run)
    for name, run in (("ctypes", ctypes_run), ("exec", exec_run)):
        print(f"{name}: {run['summary']['verdicts']} in {run['duration']:.0f} s")
    differ = sum(1 for line in lines if not line.startswith("      "))
    print(f"{len(ctypes_run['clauses'])} clauses, {differ} differ")
    print("\n".join(lines))
    if by_design:
        print(f"by design ({NOT_ASKED}: checked by the exec adapter before the driver):")
        print("\n".join(by_design))
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
