"""Warm groups side by side: tpbcast's MultiProcContinuousTest vs torch's, and vs spawn.

One run, three runners, the same 30+ CPU gloo test bodies (``_continuous_suite.py``, world
size 2), each session a fresh interpreter (imports included: what a user waits for):

* ``ours``: ``tpbcast.fixtures.torch.MultiProcContinuousTest`` (a warm forked group);
* ``torch``: torch's ``MultiProcContinuousTest`` (spawned workers, group per class);
* ``spawn``: torch's ``MultiProcessTestCase`` (two spawned interpreters per test).

Then the poison pill: one test made to fail in rank 1 (``--fail``), on ``ours`` and on
``torch``: ours fails that test alone, torch's skips every later test of the class.
Then, with ``--slice``, examples/torch_suite's ``_DistTestBase`` slice on warm groups
(``torchsuite.verdicts warm``) against torch's spawn runner.  Ratios measured in one run,
never a pass/fail bar; the load average is recorded around each session.

    python benchmarks/bench_continuous.py [--rounds 1] [--tests a,b] [--runners ours,torch,spawn]
        [--slice] [--out reports/bench]

Writes ``<out>/continuous.json`` and the section ``<out>/continuous.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SUITE = Path(__file__).resolve().parent / "_continuous_suite.py"
SLICE_SRC = ROOT / "examples" / "torch_suite" / "src"
LABEL = {
    "ours": "tpbcast MultiProcContinuousTest (warm fork)",
    "torch": "torch MultiProcContinuousTest (spawn, group per class)",
    "spawn": "torch MultiProcessTestCase (spawn per test)",
    "warm": "slice on tpbcast warm groups",
    "slice-spawn": "slice on torch's spawn runner",
}
FAIL_TEST = "test_barrier"  # early in the sorted order: many tests follow it


def _session(command: list[str], out: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    load_before = os.getloadavg()
    started = time.monotonic()
    subprocess.run(
        command,
        check=True,
        timeout=7200,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    record: dict[str, Any] = json.loads(out.read_text())
    record["wall_seconds"] = time.monotonic() - started
    record["load_before"] = load_before
    record["load_after"] = os.getloadavg()
    return record


def run_suite(runner: str, tests: str, fail: str, out: Path) -> dict[str, Any]:
    command = [sys.executable, str(SUITE), runner, "--json", str(out)]
    if tests:
        command += ["--tests", tests]
    if fail:
        command += ["--fail", fail]
    return _session(command, out)


def run_slice(runner: str, tests: str, out: Path) -> dict[str, Any]:
    path = os.environ.get("PYTHONPATH", "")
    env = {**os.environ, "PYTHONPATH": f"{SLICE_SRC}{os.pathsep + path if path else ''}"}
    command = [sys.executable, "-m", "torchsuite.verdicts", runner, "--json", str(out)]
    if tests:
        command += ["--tests", tests]
    return _session(command, out, env)


def _verdicts(record: dict[str, Any]) -> dict[str, str]:
    return {name: v["verdict"] for name, v in record["tests"].items()}


def _counts(record: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for verdict in _verdicts(record).values():
        counts[verdict] = counts.get(verdict, 0) + 1
    return ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))


def _load(record: dict[str, Any]) -> str:
    return f"{record['load_before'][0]:.2f} -> {record['load_after'][0]:.2f}"


def render(data: dict[str, Any]) -> str:
    """The markdown section (bench.md picks it up)."""
    rounds = data["rounds"]
    lines = [
        "## Warm rank groups: tpbcast's MultiProcContinuousTest vs torch's, and vs spawn",
        "",
        f"`benchmarks/bench_continuous.py`, {data['when']}, {len(rounds)} round(s) on "
        f"{os.cpu_count()} cores.  {data['n_tests']} CPU gloo tests in the style of torch's "
        "continuous tests (`benchmarks/_continuous_suite.py`, world size 2, one default "
        "group), the same bodies on each runner; each session a fresh interpreter, "
        "imports included.",
        "",
    ]
    names = [r for r in ("ours", "torch", "spawn") if all(r in rnd for rnd in rounds)]
    if names:
        same = all(
            len({json.dumps(_verdicts(rnd[r]), sort_keys=True) for r in names}) == 1
            for rnd in rounds
        )
        lines += [
            f"**Verdicts:** {_counts(rounds[0][names[0]])} on every runner; identical "
            f"test by test: {'yes' if same else 'NO'}.",
            "",
            "| per session | " + " | ".join(LABEL[r] for r in names) + " | ratios | load (1 min) |",
            "|---|" + "---:|" * len(names) + "---|---|",
        ]
        for i, rnd in enumerate(rounds, 1):
            secs = {r: rnd[r]["session_seconds"] for r in names}
            ratios = [f"**{secs[r] / secs['ours']:.1f}x** vs {r}" for r in names if r != "ours"]
            lines.append(
                f"| round {i} | "
                + " | ".join(f"{secs[r]:.1f} s" for r in names)
                + f" | {'; '.join(ratios)} | "
                + ", ".join(f"{r} {_load(rnd[r])}" for r in names)
                + " |"
            )
        for r in names:
            if r == "ours":
                continue
            med = statistics.median(
                rnd[r]["session_seconds"] / rnd["ours"]["session_seconds"] for rnd in rounds
            )
            goal = 3 if r == "torch" else None
            lines.append("")
            lines.append(
                f"Per session, ours vs {LABEL[r]}: **{med:.1f}x** (median of {len(rounds)})"
                + (f"; goal >= {goal}x" if goal else "")
                + "."
            )
        per_test = {
            r: statistics.median(
                sum(v["seconds"] for v in rnd[r]["tests"].values()) for rnd in rounds
            )
            for r in names
        }
        lines += [
            "",
            "Summed per-test time (unittest's view, medians; the first test of a continuous "
            "class includes starting its workers): "
            + ", ".join(f"{r} {per_test[r]:.2f} s" for r in names)
            + ".",
            "",
        ]
    poison = data.get("poison")
    if poison:
        lines += [
            f"**One failing test** (`{poison['test']}` fails in rank 1; {data['n_tests']} tests):",
            "",
            "| runner | verdicts | the tests after it | load |",
            "|---|---|---|---|",
        ]
        for r in ("ours", "torch"):
            rec = poison[r]
            after = [n for n in sorted(rec["tests"]) if n > poison["test"]]
            tail = _counts({"tests": {n: rec["tests"][n] for n in after}})
            lines.append(f"| {LABEL[r]} | {_counts(rec)} | {tail} | {_load(rec)} |")
        lines.append("")
        reason = next(
            (v["reason"] for v in poison["torch"]["tests"].values() if v["verdict"] == "skip"),
            "",
        )
        if reason:
            lines += [f"torch's skip reason: `{reason}`", ""]
    sl = data.get("slice")
    if sl:
        warm, spawn = sl["warm"], sl["slice-spawn"]
        same = _verdicts(warm) == _verdicts(spawn)
        ratio = spawn["session_seconds"] / warm["session_seconds"]
        lines += [
            "**examples/torch_suite's slice** (torch's own `_DistTestBase`, "
            f"{len(warm['tests'])} gloo tests, world size 2) on warm groups "
            "(`TestDistBackendOnWarmGroup`: the process group made once per fork, each test "
            "only its method) vs torch's spawn runner, one session each:",
            "",
            "| per session | slice on warm groups | torch spawn runner | ratio | load |",
            "|---|---:|---:|---:|---|",
            f"| 1 | {warm['session_seconds']:.1f} s | {spawn['session_seconds']:.1f} s | "
            f"**{ratio:.1f}x** (goal >= 50x) | warm {_load(warm)}, spawn {_load(spawn)} |",
            "",
            f"Verdicts: warm {_counts(warm)}; spawn {_counts(spawn)}; identical test by "
            f"test: {'yes' if same else 'NO'}.",
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/bench_continuous.py")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--tests", default="", help="comma-separated test names (default: all)")
    parser.add_argument("--runners", default="ours,torch,spawn")
    parser.add_argument("--no-poison", action="store_true", help="skip the one-failure run")
    parser.add_argument("--slice", action="store_true", help="also the torch_suite slice")
    parser.add_argument("--slice-tests", default="")
    parser.add_argument("--out", default="reports/bench")
    opts = parser.parse_args(argv)
    runners = [r for r in opts.runners.split(",") if r]
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "rounds": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp) / "session.json"
        for i in range(opts.rounds):
            order = runners if i % 2 == 0 else runners[::-1]
            data["rounds"].append({r: run_suite(r, opts.tests, "", scratch) for r in order})
        first = data["rounds"][0]
        data["n_tests"] = len(next(iter(first.values()))["tests"]) if first else 0
        if not opts.no_poison and {"ours", "torch"} <= set(runners):
            tests = opts.tests
            if tests and FAIL_TEST not in tests.split(","):
                tests = ",".join(sorted({*tests.split(","), FAIL_TEST}))
            data["poison"] = {
                "test": FAIL_TEST,
                **{r: run_suite(r, tests, FAIL_TEST, scratch) for r in ("ours", "torch")},
            }
        if opts.slice:
            data["slice"] = {
                "warm": run_slice("warm", opts.slice_tests, scratch),
                "slice-spawn": run_slice("spawn", opts.slice_tests, scratch),
            }
    (out / "continuous.json").write_text(json.dumps(data, indent=1))
    text = render(data)
    (out / "continuous.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
