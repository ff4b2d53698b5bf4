"""Benchmark: cost of one ``run_ranks`` group with a trivial target (not a timed test).

The parent imports torch first (the realistic case: a conformance run with tensors), runs
no torch op (never fork after one), then measures ``run_ranks(trivial, n)`` end to end:
workdir, pipes, fork x n, supervise, reap, read results, cleanup.

For context it also measures, interleaved with the harness samples so both see the same
machine load, the floor: bare ``os.fork()`` x n + ``os._exit(0)`` + ``waitpid`` from the
same parent. With torch imported the parent has ~150 MB of anonymous memory, and the
kernel's page-table copy at fork plus the teardown at exit dominate both numbers.

Bar: world_size 2 <= 10 ms median on the 2-core CI box.

    /work/venv/bin/python benchmarks/bench_harness.py [--reps 60] [--no-torch]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def trivial(ctx: object) -> int:
    return 0


def bare_fork(n: int) -> None:
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--reps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--no-torch", action="store_true", help="do not import torch")
    parser.add_argument("--sizes", default="2,4,8")
    opts = parser.parse_args()
    if not opts.no_torch:
        import torch  # noqa: F401 - the point: a warm parent with torch imported

    from tpbcast.harness import run_ranks

    sizes = [int(s) for s in opts.sizes.split(",")]
    load = os.getloadavg()[0]
    print(
        f"python {sys.version.split()[0]}, torch imported: {not opts.no_torch}, "
        f"reps={opts.reps}, cpus={os.cpu_count()}, loadavg(1m) at start={load:.2f}"
    )
    print(
        f"{'world':>5} {'run_ranks median':>17} {'p10':>7} {'p90':>7} "
        f"{'bare fork median':>17} {'overhead':>9}   (ms)"
    )
    two = None
    for n in sizes:
        harness, bare = [], []
        for i in range(opts.warmup + opts.reps):
            t0 = time.perf_counter()
            result = run_ranks(trivial, n, timeout=30.0)
            t1 = time.perf_counter()
            bare_fork(n)
            t2 = time.perf_counter()
            if not result.ok:
                print(result.report())
                return 1
            if i >= opts.warmup:
                harness.append((t1 - t0) * 1000)
                bare.append((t2 - t1) * 1000)
        harness.sort()
        med, bmed = statistics.median(harness), statistics.median(bare)
        p10 = harness[len(harness) // 10]
        p90 = harness[(len(harness) * 9) // 10]
        print(f"{n:>5} {med:>17.2f} {p10:>7.2f} {p90:>7.2f} {bmed:>17.2f} {med - bmed:>+9.2f}")
        if n == 2:
            two = med
    print(f"loadavg(1m) at end={os.getloadavg()[0]:.2f}")
    if two is not None:
        verdict = "PASS" if two <= 10.0 else "FAIL"
        print(f"bar: world 2 median {two:.2f} ms <= 10 ms: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
