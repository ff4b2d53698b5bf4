"""torch's own ``_DistTestBase`` slice on torch's spawn runner vs tpbcast's harness.

Side by side in one run (``examples/torch_suite``, 55 gloo tests at world size 2): each
round runs the whole slice once per runner, each in a fresh interpreter
(``python -m torchsuite.verdicts``), alternating which goes first; per test (the test's
wall time as unittest sees it) and per session (interpreter start to exit: imports
included, what a user waits for), with the load average around each session.  Then the
floor: an empty 2-rank ``run_ranks`` group in a process with only torch imported and with
torch's distributed test modules loaded, and the slice's near-empty test
(``test_get_rank``), whose time is torch's own file barrier (``Barrier.sync``, polling
every 0.1 s, before and after every test) plus ``init_process_group``.

    python benchmarks/bench_torch_suite.py [--rounds 2] [--tests a,b] [--out reports/bench]

Writes ``<out>/torch_suite.json`` and the section ``<out>/torch_suite.md`` (bench.md picks
it up).  Ratios measured in one run, never a pass/fail bar.
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
SUITE_SRC = ROOT / "examples" / "torch_suite" / "src"
RUNNERS = ("harness", "spawn")
LABEL = {"harness": "tpbcast harness (fork)", "spawn": "torch spawn runner"}


def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": f"{SUITE_SRC}{os.pathsep + path if path else ''}"}


def run_session(runner: str, tests: str, out: Path) -> dict[str, Any]:
    """One session of ``runner`` in a fresh interpreter; its record plus the wall time
    seen from here (process start to exit) and the load average around it."""
    load_before = os.getloadavg()
    started = time.monotonic()
    command = [sys.executable, "-m", "torchsuite.verdicts", runner, "--json", str(out)]
    if tests:
        command += ["--tests", tests]
    subprocess.run(
        command, check=True, env=_env(), timeout=3600, stdout=subprocess.DEVNULL, stderr=None
    )
    record: dict[str, Any] = json.loads(out.read_text())
    record["wall_seconds"] = time.monotonic() - started
    record["load_before"] = load_before
    record["load_after"] = os.getloadavg()
    return record


def empty_group_ms(reps: int) -> dict[str, float]:
    """Median ms of an empty 2-rank ``run_ranks`` group, measured in two fresh
    interpreters: torch imported; torch's distributed test modules imported too."""
    code = """
import json, statistics, sys, time
import torch
if sys.argv[1] == "suite":
    import torchsuite.cases  # torch's distributed_test + common_distributed + common_utils
from tpbcast.harness import run_ranks
run_ranks(lambda ctx: None, 2, timeout=30).values()
times = []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter()
    run_ranks(lambda ctx: None, 2, timeout=30).values()
    times.append(time.perf_counter() - t)
print(json.dumps(statistics.median(times) * 1000))
"""
    found = {}
    for what in ("torch", "suite"):
        done = subprocess.run(
            [sys.executable, "-c", code, what, str(reps)],
            check=True,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        found[what] = float(done.stdout.strip().splitlines()[-1])
    return found


FLOOR_TESTS = ("test_get_rank", "test_broadcast", "test_reduce_sum", "test_all_reduce_sum")


def barrier_floor(rounds: int) -> dict[str, float]:
    """Seconds per test of a few slice tests on the harness, as they are and with torch's
    ``Barrier.sync`` polling every 2 ms instead of 0.1 s (a measurement only: the module's
    ``time`` is swapped in this one interpreter, never in the example or the suite)."""
    code = """
import json, sys, time, unittest
import torchsuite.cases as cases
from torch.testing._internal.distributed import distributed_test
names = sys.argv[1].split(",") * int(sys.argv[2])
def per_test():
    suite = unittest.TestSuite(cases.TestDistBackendOnHarness(n) for n in names)
    result = unittest.TestResult()
    started = time.perf_counter()
    suite.run(result)
    return (time.perf_counter() - started) / len(names)
found = {"as_is": per_test()}
class FastPoll:
    def __getattr__(self, name):
        return getattr(time, name)
    @staticmethod
    def sleep(seconds):
        time.sleep(min(seconds, 0.002))
distributed_test.time = FastPoll()
found["poll_2ms"] = per_test()
print(json.dumps(found))
"""
    done = subprocess.run(
        [sys.executable, "-c", code, ",".join(FLOOR_TESTS), str(rounds)],
        check=True,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    found: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def _med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _load(record: dict[str, Any]) -> str:
    return f"{record['load_before'][0]:.2f} -> {record['load_after'][0]:.2f}"


def write_report(data: dict[str, Any], out: Path) -> str:
    sessions: dict[str, list[dict[str, Any]]] = data["sessions"]
    names = list(sessions["harness"][0]["tests"])
    per_test = {
        r: {n: _med([s["tests"][n]["seconds"] for s in sessions[r]]) for n in names}
        for r in RUNNERS
    }
    verdicts = {r: {n: sessions[r][0]["tests"][n]["verdict"] for n in names} for r in RUNNERS}
    same = all(
        s["tests"][n]["verdict"] == verdicts["spawn"][n]
        for r in RUNNERS
        for s in sessions[r]
        for n in names
    )
    passed = [n for n in names if verdicts["harness"][n] == "pass"]
    skipped = [n for n in names if verdicts["harness"][n] == "skip"]
    summed = {r: sum(per_test[r].values()) for r in RUNNERS}
    ran = {r: sum(per_test[r][n] for n in passed) for r in RUNNERS}
    lines = [
        "## torch's own distributed tests: spawn runner vs tpbcast harness",
        "",
        f"`benchmarks/bench_torch_suite.py`, {data['when']}, {data['rounds']} round(s) "
        f"on {os.cpu_count()} cores.  {len(names)} gloo tests of torch's "
        "`DistributedTest._DistTestBase` (`examples/torch_suite`, world size 2, torch "
        f"{data['torch']}): the same class on torch's spawn runner "
        "(`TestDistBackend` as torch's own `test_distributed_spawn.py` uses it) and with "
        "`tpbcast.fixtures.torch.MultiProcessTestCase` as its first base.  Each session is "
        "a fresh interpreter running the whole slice (imports included).",
        "",
        f"**Verdicts:** {len(passed)} pass, {len(skipped)} skip on both runners; "
        + ("identical test by test in every session." if same else "**they differ**.")
        + (f" Not pass/skip: {data['bad']}." if data["bad"] else ""),
        "",
        "| per session | " + " | ".join(LABEL[r] for r in RUNNERS) + " | ratio | load (1 min) |",
        "|---|---:|---:|---:|---|",
    ]
    ratios = []
    for i, (h, s) in enumerate(zip(sessions["harness"], sessions["spawn"], strict=True)):
        ratio = s["wall_seconds"] / h["wall_seconds"]
        ratios.append(ratio)
        lines.append(
            f"| round {i + 1} | {h['wall_seconds']:.1f} s | {s['wall_seconds']:.1f} s | "
            f"**{ratio:.1f}x** | harness {_load(h)}, spawn {_load(s)} |"
        )
    lines += [
        "",
        f"Per session: **{_med(ratios):.1f}x** (median of {len(ratios)}; goal >= 20x).  "
        f"Summed per-test time (medians): spawn {summed['spawn']:.1f} s, harness "
        f"{summed['harness']:.1f} s, **{summed['spawn'] / summed['harness']:.1f}x**; over "
        f"the {len(passed)} passing tests alone {ran['spawn'] / ran['harness']:.1f}x.",
        "",
        "**The floor is torch's, not the fork's.**  An empty 2-rank `run_ranks` group "
        f"costs {data['empty_ms']['torch']:.1f} ms with torch imported and "
        f"{data['empty_ms']['suite']:.1f} ms with torch's distributed test modules loaded "
        f"(median of {data['reps']}).  The slice's near-empty test `test_get_rank` takes "
        f"{per_test['harness'].get('test_get_rank', float('nan')):.2f} s on the harness: "
        "`TestDistBackend._run` calls torch's file barrier `Barrier.sync` (it polls a "
        "directory every 0.1 s) before and after each test, around `init_process_group` "
        "on a FileStore.  Median harness test: "
        f"{_med(list(per_test['harness'].values())):.2f} s; median spawn test: "
        f"{_med(list(per_test['spawn'].values())):.2f} s (two interpreters that import "
        "torch, per test).",
    ]
    floor = data.get("floor")
    if floor:
        lines += [
            "",
            f"Measured apart ({', '.join(f'`{n}`' for n in FLOOR_TESTS)}, load "
            f"{floor['load']:.2f}): {floor['as_is']:.3f} s per test as they are, "
            f"{floor['poll_2ms']:.3f} s with `Barrier.sync` polling every 2 ms instead of "
            f"0.1 s (swapped in the measuring process only): torch's barrier polling is "
            f"**{1 - floor['poll_2ms'] / floor['as_is']:.0%}** of a harness test here.",
        ]
    lines += [
        "",
        "<details><summary>Per test (median seconds over the rounds)</summary>",
        "",
        "| test | verdict | spawn | harness | ratio |",
        "|---|---|---:|---:|---:|",
    ]
    for n in names:
        s, h = per_test["spawn"][n], per_test["harness"][n]
        ratio = f"{s / h:.0f}x" if h > 0.001 else "-"
        lines.append(f"| `{n}` | {verdicts['harness'][n]} | {s:.2f} | {h:.2f} | {ratio} |")
    lines += ["", "</details>", ""]
    text = "\n".join(lines)
    (out / "torch_suite.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="sessions per runner")
    parser.add_argument("--tests", default="", help="comma-separated subset (default: all)")
    parser.add_argument("--reps", type=int, default=30, help="empty groups to time")
    parser.add_argument("--out", default="reports/bench")
    parser.add_argument(
        "--floor-only",
        action="store_true",
        help="measure only the barrier floor and add it to <out>/torch_suite.json",
    )
    opts = parser.parse_args(argv)
    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    if opts.floor_only:
        data = json.loads((out / "torch_suite.json").read_text())
        data["floor"] = {**barrier_floor(2), "load": os.getloadavg()[0]}
        (out / "torch_suite.json").write_text(json.dumps(data, indent=1))
        print(write_report(data, out))
        return 0
    import torch

    sessions: dict[str, list[dict[str, Any]]] = {r: [] for r in RUNNERS}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(opts.rounds):
            order = RUNNERS if i % 2 == 0 else RUNNERS[::-1]
            for runner in order:
                record = run_session(runner, opts.tests, Path(tmp) / f"{runner}{i}.json")
                sessions[runner].append(record)
                print(f"round {i + 1} {runner}: {record['wall_seconds']:.1f} s", flush=True)
    bad = sorted(
        {
            f"{r}:{n}={t['verdict']}"
            for r in RUNNERS
            for s in sessions[r]
            for n, t in s["tests"].items()
            if t["verdict"] not in ("pass", "skip")
        }
    )
    data = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "rounds": opts.rounds,
        "torch": torch.__version__,
        "reps": opts.reps,
        "empty_ms": empty_group_ms(opts.reps),
        "floor": {**barrier_floor(2), "load": os.getloadavg()[0]},
        "sessions": sessions,
        "bad": bad,
    }
    (out / "torch_suite.json").write_text(json.dumps(data, indent=1))
    print(write_report(data, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
