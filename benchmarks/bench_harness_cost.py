"""Benchmark: what a multi-rank test costs with tpbcast's harness and with the alternatives.

Four parts, each a ratio measured in one run (never a timed assertion). Raw numbers go to
``reports/bench/harness.json`` (one key per part, so parts can be re-run alone), and
``--report`` turns that file into ``reports/bench/harness.md`` and its PNG plots.

``tests``: the same 2-rank and 4-rank gloo check (a process group, one broadcast, one
    assertion) written as a pytest test for the ``tpbcast_run`` fixture and as a torch
    ``MultiProcessTestCase`` (``torch.testing._internal.common_distributed``; spawns every
    rank, which imports torch again). Each runner's tests run as their own pytest
    session (a subprocess: the test module imports torch at the top, as users write it);
    sessions alternate between runners per round, so both see the same load. Per-test
    cost is counted two ways: the wall time of each test's whole pytest protocol (setup,
    call, teardown, reporting; a hook in the generated conftest), and the session wall
    minus the same session's ``--collect-only`` startup, divided by the number of tests.
``overhead``: ``run_ranks`` of a trivial target against the floor, a bare ``os.fork`` of
    the same number of children that ``os._exit(0)`` at once, reaped with ``waitpid``,
    from the same parent (torch imported, no torch op run), interleaved; wall medians
    and CPU (rusage, parent + children) per group.
``forkrss``: what a fork costs as the parent grows: fork + exit + waitpid of one child
    from a fresh interpreter holding N MiB of touched private anonymous memory, and from
    one that imported torch (the template a fork server would fork from).
``conformance``: ``python -m tpbcast.conformance`` wall time, serial (``-n 0``) against
    two pytest-xdist workers (``-n 2``), alternated.

Every part records the load average (``/proc/loadavg``) before and after it: the box
is shared, and a ratio means nothing without the load it was measured under.

    python benchmarks/bench_harness_cost.py                     # every part, then the report
    python benchmarks/bench_harness_cost.py --parts tests,overhead --rounds 3
    python benchmarks/bench_harness_cost.py --report            # report from the JSON only
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT_DEFAULT = ROOT / "reports" / "bench"
PARTS = ("tests", "overhead", "forkrss", "conformance", "hugepages")

# --------------------------------------------------------------------------- the check

TPBCAST_TESTS = textwrap.dedent(
    """
    import pytest
    import torch
    import torch.distributed as dist

    from tpbcast.fixtures import process_group


    def check(ctx):
        with process_group(ctx) as group:
            t = torch.full((4,), 7.0) if ctx.rank == 0 else torch.zeros(4)
            dist.broadcast(t, src=0, group=group)
            assert t.tolist() == [7.0] * 4, t


    @pytest.mark.world_size({sizes})
    @pytest.mark.parametrize("n", range({tests}))
    def test_broadcast(tpbcast_run, world_size, n):
        tpbcast_run(check)
    """
)

MPTC_TESTS_HEAD = textwrap.dedent(
    """
    import torch
    import torch.distributed as dist
    from torch.testing._internal.common_distributed import MultiProcessTestCase


    class _Check(MultiProcessTestCase):
        def setUp(self):
            super().setUp()
            self._spawn_processes()

        def check(self):
            store = dist.FileStore(self.file_name, self.world_size)
            dist.init_process_group(
                "gloo", store=store, rank=self.rank, world_size=self.world_size
            )
            t = torch.full((4,), 7.0) if self.rank == 0 else torch.zeros(4)
            dist.broadcast(t, src=0)
            self.assertEqual(t.tolist(), [7.0] * 4)
    """
)

MPTC_CLASS = textwrap.dedent(
    """

    class TestBroadcastTp{size}(_Check):
        @property
        def world_size(self):
            return {size}
    {methods}
    """
)

POOL_TESTS_HEAD = textwrap.dedent(
    """
    import torch
    import torch.distributed as dist
    from torch.testing._internal.common_distributed import MultiProcContinuousTest


    class _Pool(MultiProcContinuousTest):
        @classmethod
        def backend_str(cls):
            return "gloo"

        def check(self):
            t = torch.full((4,), 7.0) if self.rank == 0 else torch.zeros(4)
            dist.broadcast(t, src=0)
            self.assertEqual(t.tolist(), [7.0] * 4)
    """
)

POOL_CLASS = textwrap.dedent(
    """

    class TestPoolTp{size}(_Pool):
        world_size = {size}
    {methods}
    """
)

MODULES = {
    "tpbcast": "test_tpbcast_cost.py",
    "tpbcast_thp": "test_tpbcast_cost.py",  # the same tests, TPBCAST_HUGEPAGES=1
    "mptc": "test_mptc_cost.py",
    "pool": "test_pool_cost.py",
}

CONFTEST = textwrap.dedent(
    """
    import json
    import os
    import resource
    import time

    import pytest

    _TIMES = {}
    _CPU = {}


    def _cpu():
        me = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        cpu = _cpu()
        start = time.perf_counter()
        yield
        _TIMES[item.nodeid] = time.perf_counter() - start
        _CPU[item.nodeid] = _cpu() - cpu


    def pytest_sessionfinish(session):
        out = os.environ.get("BENCH_TIMES")
        if out:
            me = resource.getrusage(resource.RUSAGE_SELF)
            kids = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
            with open(out, "w") as f:
                json.dump(
                    {"times": _TIMES, "cpus": _CPU, "maxrss_kib": me.ru_maxrss, "cpu": cpu}, f
                )
    """
)


def _loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _write_project(project: Path, sizes: list[int], tests: int, mptc_tests: int) -> None:
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "conftest.py").write_text(CONFTEST)
    (project / "test_tpbcast_cost.py").write_text(
        TPBCAST_TESTS.format(sizes=", ".join(map(str, sizes)), tests=tests)
    )
    methods = "".join(
        f"\n    def test_broadcast_{n:02d}(self):\n        self.check()\n"
        for n in range(mptc_tests)
    )
    body = MPTC_TESTS_HEAD + "".join(
        MPTC_CLASS.format(size=size, methods=methods) for size in sizes
    )
    (project / "test_mptc_cost.py").write_text(body)
    pool_methods = "".join(
        f"\n    def test_broadcast_{n:02d}(self):\n        self.check()\n" for n in range(tests)
    )
    (project / "test_pool_cost.py").write_text(
        POOL_TESTS_HEAD
        + "".join(POOL_CLASS.format(size=size, methods=pool_methods) for size in sizes)
    )


def _session(project: Path, runner: str, *, collect_only: bool) -> dict[str, Any]:
    """One pytest session of one runner's test file; wall time and per-test times."""
    module = MODULES[runner]
    times_file = project / f"times-{runner}-{int(collect_only)}.json"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
    argv += [module, "--collect-only"] if collect_only else [module]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TPBCAST_", "BENCH_"))}
    if runner == "tpbcast_thp":
        env["TPBCAST_HUGEPAGES"] = "1"
    env["BENCH_TIMES"] = str(times_file)
    # MultiProcessTestCase leaves a FileStore file per test in the temp dir: keep them in ours.
    env["TMPDIR"] = str(project / "tmp")
    (project / "tmp").mkdir(exist_ok=True)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    failed = [
        line.split(" - ")[0].removeprefix("FAILED ").removeprefix("ERROR ")
        for line in done.stdout.splitlines()
        if line.startswith(("FAILED ", "ERROR "))
    ]
    if done.returncode != 0 and (not times_file.exists() or not failed):
        raise SystemExit(f"{runner} session failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    if failed:  # reported with the numbers, never hidden; the run goes on
        print(f"  {runner}: {len(failed)} test(s) failed: {failed}", flush=True)
    data = json.loads(times_file.read_text())
    times_file.unlink()
    return {
        "wall": wall,
        "failed": failed,
        "times": data["times"],
        "cpus": data["cpus"],
        "maxrss_kib": data["maxrss_kib"],
        "cpu": data["cpu"],
    }


def _size_of(nodeid: str) -> int | None:
    """World size from a test id: ``[tp4-3]`` (tpbcast) or ``TestBroadcastTp4`` (MPTC)."""
    import re

    found = re.search(r"tp(\d+)", nodeid, flags=re.IGNORECASE)
    return int(found.group(1)) if found else None


def part_tests(opts: argparse.Namespace, runners: list[str] | None = None) -> dict[str, Any]:
    sizes = [int(s) for s in opts.sizes.split(",")]
    runners = opts.runners.split(",") if runners is None else runners
    result: dict[str, Any] = {
        "sizes": sizes,
        "tests_per_size": {
            "tpbcast": opts.tests,
            "tpbcast_thp": opts.tests,
            "mptc": opts.mptc_tests,
            "pool": opts.tests,
        },
        "rounds": opts.rounds,
        "load_before": _loadavg(),
        "runners": list(runners),
        "per_test": {runner: {} for runner in runners},
        "cpu_per_test": {runner: {} for runner in runners},
        "sessions": {runner: [] for runner in runners},
    }
    with tempfile.TemporaryDirectory(prefix="tpbcast-bench-cost-") as tmp:
        project = Path(tmp)
        _write_project(project, sizes, opts.tests, opts.mptc_tests)
        for round_ in range(opts.rounds):
            order = runners[round_ % len(runners) :] + runners[: round_ % len(runners)]
            for runner in order:
                startup = _session(project, runner, collect_only=True)
                full = _session(project, runner, collect_only=False)
                n_tests = len(full["times"])
                result["sessions"][runner].append(
                    {
                        "round": round_,
                        "startup_wall": startup["wall"],
                        "wall": full["wall"],
                        "tests": n_tests,
                        "per_test_by_difference": (full["wall"] - startup["wall"]) / n_tests,
                        "cpu_per_test_by_difference": (full["cpu"] - startup["cpu"]) / n_tests,
                        "maxrss_kib": full["maxrss_kib"],
                        "failed": full["failed"],
                        "load": _loadavg(),
                    }
                )
                for nodeid, seconds in full["times"].items():
                    size = str(_size_of(nodeid))
                    result["per_test"][runner].setdefault(size, []).append(seconds)
                    cpu = full["cpus"][nodeid]
                    result["cpu_per_test"][runner].setdefault(size, []).append(cpu)
                print(
                    f"  round {round_} {runner:8s} startup {startup['wall']:.2f}s, session "
                    f"{full['wall']:.2f}s for {n_tests} tests, load {_loadavg()}",
                    flush=True,
                )
    result["load_after"] = _loadavg()
    return result


# --------------------------------------------------------------------------- overhead


def _cpu_ms() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return 1000 * (me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime)


def trivial(ctx: object) -> None:
    """The target whose run_ranks is measured: the group's own cost and nothing else. It
    returns nothing, like a test that only asserts (a returned value adds its pickling in
    the fresh rank: ~0.1-0.2 ms, see harness/_channel.py)."""


def bare_fork(n: int) -> None:
    """The floor: ``os.fork`` x n + ``os._exit(0)`` + ``waitpid`` from the same parent."""
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)


def _overhead_in_process(sizes: list[int], reps: int, warmup: int) -> dict[str, Any]:
    import torch  # noqa: F401 - the realistic parent: torch imported, no torch op run

    from tpbcast.harness import run_ranks

    def harness(n: int) -> None:
        result = run_ranks(trivial, n, timeout=30.0)
        if not result.ok:
            raise SystemExit(result.report())

    out: dict[str, Any] = {"load_before": _loadavg(), "reps": reps, "sizes": {}}
    harness(2)  # with TPBCAST_HUGEPAGES=1, the collapse happens here, before the samples
    with open("/proc/self/status") as f:
        status = dict(line.split(":", 1) for line in f)
    with open("/proc/self/smaps_rollup") as f:
        rollup = dict(line.split(":", 1) for line in f if ":" in line and " kB" in line)
    out["parent_rss_kib"] = int(status["VmRSS"].split()[0])
    out["parent_anon_kib"] = int(status["RssAnon"].split()[0])
    out["parent_thp_kib"] = int(rollup.get("AnonHugePages", "0 kB").split()[0])
    out["hugepages"] = os.environ.get("TPBCAST_HUGEPAGES", "")
    for n in sizes:
        wall: dict[str, list[float]] = {"run_ranks": [], "bare_fork": []}
        cpu: dict[str, list[float]] = {"run_ranks": [], "bare_fork": []}
        runners: list[tuple[str, Callable[[int], None]]] = [
            ("run_ranks", harness),
            ("bare_fork", bare_fork),
        ]
        for i in range(warmup + reps):
            for name, fn in runners if i % 2 == 0 else runners[::-1]:
                c0 = _cpu_ms()
                t0 = time.perf_counter()
                fn(n)
                t1 = time.perf_counter()
                c1 = _cpu_ms()
                if i >= warmup:
                    wall[name].append((t1 - t0) * 1000)
                    cpu[name].append(c1 - c0)
        paired = [a - b for a, b in zip(wall["run_ranks"], wall["bare_fork"], strict=True)]
        out["sizes"][str(n)] = {
            "wall_ms": wall,
            "cpu_ms": cpu,
            "paired_diff_median_ms": statistics.median(paired),
        }
    out["load_after"] = _loadavg()
    return out


def part_overhead(opts: argparse.Namespace, *, hugepages: bool = False) -> dict[str, Any]:
    """In a fresh interpreter, so the parent is exactly "torch + the harness"."""
    return _child_json(
        ["--_overhead", opts.overhead_sizes, str(opts.reps), str(opts.warmup)],
        env={"TPBCAST_HUGEPAGES": "1" if hugepages else "0"},
    )


def part_hugepages(opts: argparse.Namespace) -> dict[str, Any]:
    """TPBCAST_HUGEPAGES=1 against the default, in one run: per-test cost (tpbcast_run
    sessions with and without it, rotated) and run_ranks vs bare fork with it."""
    return {
        "load_before": _loadavg(),
        "tests": part_tests(opts, ["tpbcast", "tpbcast_thp"]),
        "overhead_default": part_overhead(opts),
        "overhead_hugepages": part_overhead(opts, hugepages=True),
        "load_after": _loadavg(),
    }


# --------------------------------------------------------------------------- fork vs RSS


def _fork_probe(reps: int) -> dict[str, float]:
    """Wall and CPU (parent's fork syscall; the child's whole life, its exit included)."""
    fork_only, total, fork_cpu, child_cpu = [], [], [], []
    for _ in range(reps):
        me0 = resource.getrusage(resource.RUSAGE_SELF)
        kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        t1 = time.perf_counter()
        me1 = resource.getrusage(resource.RUSAGE_SELF)
        os.waitpid(pid, 0)
        t2 = time.perf_counter()
        kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        fork_only.append((t1 - t0) * 1000)
        total.append((t2 - t0) * 1000)
        fork_cpu.append(1000 * (me1.ru_stime - me0.ru_stime + me1.ru_utime - me0.ru_utime))
        child_cpu.append(1000 * (kids1.ru_stime - kids0.ru_stime + kids1.ru_utime - kids0.ru_utime))
    with open("/proc/self/status") as f:
        status = dict(line.split(":", 1) for line in f)
    with open("/proc/self/smaps_rollup") as f:
        rollup = dict(line.split(":", 1) for line in f if ":" in line and " kB" in line)
    return {
        "thp_kib": int(rollup.get("AnonHugePages", "0 kB").split()[0]),
        "fork_ms": statistics.median(fork_only),
        "total_ms": statistics.median(total),
        "fork_cpu_ms": statistics.mean(fork_cpu),
        "child_cpu_ms": statistics.mean(child_cpu),
        "rss_kib": int(status["VmRSS"].split()[0]),
        "anon_kib": int(status["RssAnon"].split()[0]),
        "pte_kib": int(status["VmPTE"].split()[0]),
    }


def _forkrss_in_process(kind: str, mib: int, reps: int) -> dict[str, Any]:
    import mmap

    keep: list[object] = []
    if kind == "torch":
        import torch  # noqa: F401 - the template: torch imported, no op run
    if mib:
        block = mmap.mmap(-1, mib << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        if kind == "thp":  # transparent huge pages: one page-table entry per 2 MiB
            block.madvise(mmap.MADV_HUGEPAGE)
        for off in range(0, mib << 20, 4096):
            block[off] = 1  # touch every page: it is the mapped pages that fork copies
        keep.append(block)
    _fork_probe(5)
    return {"kind": kind, "extra_mib": mib, **_fork_probe(reps)}


def part_forkrss(opts: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"load_before": _loadavg(), "points": []}
    cases = [("plain", m) for m in (0, 64, 128, 256, 512)] + [("torch", 0), ("torch", 128)]
    cases += [("thp", 256)]
    for kind, mib in cases:
        point = _child_json(["--_forkrss", kind, str(mib), str(opts.reps)])
        out["points"].append(point)
        print(
            f"  {kind:5s} +{mib:3d} MiB: rss {point['rss_kib'] / 1024:6.1f} MiB, fork "
            f"{point['fork_ms']:.2f} ms, fork+exit+wait {point['total_ms']:.2f} ms, CPU "
            f"{point['fork_cpu_ms']:.2f} + {point['child_cpu_ms']:.2f} ms",
            flush=True,
        )
    out["load_after"] = _loadavg()
    return out


# --------------------------------------------------------------------------- conformance


def part_conformance(opts: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"load_before": _loadavg(), "runs": []}
    with tempfile.TemporaryDirectory(prefix="tpbcast-bench-conf-") as tmp:
        for round_ in range(opts.conformance_rounds):
            order = ("0", "2") if round_ % 2 == 0 else ("2", "0")
            for workers in order:
                argv = [
                    sys.executable,
                    "-m",
                    "tpbcast.conformance",
                    "-n",
                    workers,
                    "--report-dir",
                    str(Path(tmp) / f"r{round_}-n{workers}"),
                    "--",
                    "-q",
                ]
                load = _loadavg()
                kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                start = time.perf_counter()
                done = subprocess.run(argv, capture_output=True, text=True, check=False)
                wall = time.perf_counter() - start
                kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = (kids1.ru_utime + kids1.ru_stime) - (kids0.ru_utime + kids0.ru_stime)
                tail = done.stdout.strip().splitlines()[-1:] or [""]
                failed = [
                    line.split(" - ")[0].removeprefix("FAILED ").removeprefix("ERROR ")
                    for line in done.stdout.splitlines()
                    if line.startswith(("FAILED ", "ERROR "))
                ]
                out["runs"].append(
                    {
                        "round": round_,
                        "workers": int(workers),
                        "wall": wall,
                        "cpu": cpu,
                        "failed": failed,
                        "exit": done.returncode,
                        "load_before": load,
                        "load_after": _loadavg(),
                        "summary": tail[0],
                    }
                )
                print(f"  -n {workers}: {wall:.1f}s exit {done.returncode} {tail[0]}", flush=True)
    out["load_after"] = _loadavg()
    return out


# --------------------------------------------------------------------------- plumbing


def _child_json(args: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
    )
    if done.returncode != 0:
        raise SystemExit(f"{args[0]} failed:\n{done.stdout}\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _load_json(path: Path) -> dict[str, Any]:
    if path.exists():
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    return {}


def main(argv: list[str] | None = None) -> int:
    raw = sys.argv[1:] if argv is None else argv
    if raw and raw[0] == "--_overhead":
        sizes = [int(s) for s in raw[1].split(",")]
        print(json.dumps(_overhead_in_process(sizes, int(raw[2]), int(raw[3]))))
        return 0
    if raw and raw[0] == "--_forkrss":
        print(json.dumps(_forkrss_in_process(raw[1], int(raw[2]), int(raw[3]))))
        return 0
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS), help=f"any of {','.join(PARTS)}")
    parser.add_argument("--out", type=Path, default=OUT_DEFAULT)
    parser.add_argument("--report", action="store_true", help="only write the report")
    parser.add_argument("--rounds", type=int, default=2, help="sessions per runner (tests)")
    parser.add_argument("--sizes", default="2,4", help="world sizes (tests)")
    parser.add_argument("--tests", type=int, default=20, help="tpbcast tests per world size")
    parser.add_argument("--mptc-tests", type=int, default=4, help="MPTC tests per world size")
    parser.add_argument(
        "--runners",
        default="tpbcast,mptc,pool",
        help="tpbcast (tpbcast_run), mptc (MultiProcessTestCase), pool (MultiProcContinuousTest)",
    )
    parser.add_argument("--overhead-sizes", default="2,4")
    parser.add_argument("--reps", type=int, default=100, help="overhead/forkrss samples")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--conformance-rounds", type=int, default=2)
    opts = parser.parse_args(raw)
    opts.out.mkdir(parents=True, exist_ok=True)
    data_path = opts.out / "harness.json"
    if not opts.report:
        runners = {
            "tests": part_tests,
            "overhead": part_overhead,
            "forkrss": part_forkrss,
            "conformance": part_conformance,
            "hugepages": part_hugepages,
        }
        for part in opts.parts.split(","):
            print(f"{part}: load {_loadavg()}", flush=True)
            result = runners[part](opts)
            result["measured_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            data = _load_json(data_path)
            data[part] = result
            data_path.write_text(json.dumps(data, indent=1) + "\n")
    from bench_harness_report import write_report

    write_report(_load_json(data_path), opts.out)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    raise SystemExit(main())
