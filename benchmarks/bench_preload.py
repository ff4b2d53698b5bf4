"""Benchmark: per-test time of a torch.distributed test with and without ``--tpbcast-preload``.

The test module is what a user writes first: no ``import torch`` at the top, each rank
gets a gloo group from ``process_group(ctx)`` and runs one ``all_reduce``.  Without
preload every rank of every test imports torch after the fork; with
``--tpbcast-preload=torch`` the test process imports it once, before the first fork, and
the ranks inherit it.  Measured before: 3.3 s vs 0.10 s per 2-rank test (4 ranks: 6.5 s
vs 0.16 s).

Each mode runs as its own pytest session (a subprocess, so the parent starts without
torch both times), alternating between modes per round so both see the same machine load.
Per-test times come from the JUnit XML (setup + call + teardown).  A preloaded session
pays its one import of torch at session start, outside every test: the session wall
times show it.  A ratio, not a timed test: nothing here asserts a bound.

    python benchmarks/bench_preload.py [--rounds 2] [--tests 4] [--sizes 2,4]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

BODY = textwrap.dedent(
    """
    import pytest

    from tpbcast.fixtures import process_group


    def all_reduce(ctx):
        import torch
        import torch.distributed as dist

        with process_group(ctx) as group:
            t = torch.ones(4)
            dist.all_reduce(t, group=group)
            return t.tolist()


    @pytest.mark.world_size({sizes})
    @pytest.mark.parametrize("n", range({tests}))
    def test_all_reduce(tpbcast_run, world_size, n):
        result = tpbcast_run(all_reduce)
        assert result.outcomes[0].value == [float(world_size)] * 4
    """
)


def run_session(project: Path, preload: bool, tag: str) -> tuple[float, dict[str, float]]:
    """One pytest session; returns (wall seconds, {test id: seconds})."""
    xml = project / f"junit-{tag}.xml"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}"]
    if preload:
        argv.append("--tpbcast-preload=torch")
    env = {k: v for k, v in os.environ.items() if k != "TPBCAST_PRELOAD"}
    start = time.monotonic()
    done = subprocess.run(argv, cwd=project, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"pytest failed ({tag}):\n{done.stdout}\n{done.stderr}")
    times = {
        case.get("name", "?"): float(case.get("time", "nan"))
        for case in ET.parse(xml).getroot().iter("testcase")  # noqa: S314 - our own JUnit file
    }
    return wall, times


def by_size(times: dict[str, float]) -> dict[int, list[float]]:
    """Per-test seconds grouped by world size (the ``tp<N>`` part of the id)."""
    out: dict[int, list[float]] = {}
    for name, seconds in times.items():
        found = re.search(r"\btp(\d+)\b", name)
        if found is None:
            continue
        out.setdefault(int(found.group(1)), []).append(seconds)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tests", type=int, default=4, help="tests per world size")
    parser.add_argument("--sizes", default="2,4")
    opts = parser.parse_args()
    sizes = [int(s) for s in opts.sizes.split(",")]
    print(
        f"python {sys.version.split()[0]}, cpus={os.cpu_count()}, "
        f"loadavg(1m) at start={os.getloadavg()[0]:.2f}, rounds={opts.rounds}, "
        f"{opts.tests} tests per world size"
    )
    samples: dict[bool, dict[int, list[float]]] = {True: {}, False: {}}
    walls: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="tpbcast-bench-preload-") as tmp:
        project = Path(tmp)
        (project / "test_dist.py").write_text(
            BODY.format(sizes=", ".join(map(str, sizes)), tests=opts.tests)
        )
        (project / "pytest.ini").write_text("[pytest]\n")
        for round_ in range(opts.rounds):
            for preload in (round_ % 2 == 0, round_ % 2 != 0):  # alternate who goes first
                wall, times = run_session(project, preload, f"{round_}-{preload}")
                walls[preload].append(wall)
                for size, values in by_size(times).items():
                    samples[preload].setdefault(size, []).extend(values)
    print(f"{'world':>5} {'without preload':>16} {'with preload':>13} {'ratio':>7}")
    for size in sizes:
        without = statistics.median(samples[False][size])
        with_ = statistics.median(samples[True][size])
        print(f"{size:>5} {without:>15.3f}s {with_:>12.3f}s {without / with_:>6.1f}x")
    print(
        f"median session wall ({len(sizes) * opts.tests} tests, interpreter start and the "
        f"preloaded session's one torch import included): without "
        f"{statistics.median(walls[False]):.2f}s, with {statistics.median(walls[True]):.2f}s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
