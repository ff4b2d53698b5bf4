"""Benchmark: cost of one ``run_ranks`` group with a trivial target (not a timed test).

The parent imports torch first (the realistic case: a conformance run with tensors), runs
no torch op (never fork after one), then measures ``run_ranks(trivial, n)`` end to end:
workdir, pipes, fork x n, supervise, reap, read results, cleanup.

Bar (issue 3): world_size 2 <= 10 ms median on the 2-core CI box.

    /work/venv/bin/python benchmarks/bench_harness.py [--reps 60] [--no-torch]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def trivial(ctx: object) -> int:
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--no-torch", action="store_true", help="do not import torch")
    parser.add_argument("--sizes", default="2,4,8")
    opts = parser.parse_args()
    if not opts.no_torch:
        import torch  # noqa: F401 - the point: a warm parent with torch imported

    from tpbcast.harness import run_ranks

    sizes = [int(s) for s in opts.sizes.split(",")]
    print(f"python {sys.version.split()[0]}, torch imported: {not opts.no_torch}, "
          f"reps={opts.reps}")
    print(f"{'world':>5} {'median ms':>10} {'p10 ms':>8} {'p90 ms':>8} {'min ms':>8}")
    worst = 0.0
    for n in sizes:
        samples = []
        for i in range(opts.warmup + opts.reps):
            t0 = time.perf_counter()
            result = run_ranks(trivial, n, timeout=30.0)
            elapsed = time.perf_counter() - t0
            if not result.ok:
                print(result.report())
                return 1
            if i >= opts.warmup:
                samples.append(elapsed * 1000)
        samples.sort()
        med = statistics.median(samples)
        p10 = samples[len(samples) // 10]
        p90 = samples[(len(samples) * 9) // 10]
        print(f"{n:>5} {med:>10.2f} {p10:>8.2f} {p90:>8.2f} {samples[0]:>8.2f}")
        if n == 2:
            worst = med
    if 2 in sizes:
        verdict = "PASS" if worst <= 10.0 else "FAIL"
        print(f"bar: world 2 median {worst:.2f} ms <= 10 ms: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
