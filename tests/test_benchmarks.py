"""The benchmarks still run: a tiny round of each measuring core, so an API change that
breaks ``nox -s bench`` fails CI instead of the next person who measures.

(``bench_dispatch.py`` did rot unnoticed: it passed a dispatcher where
``_dispatch_bootstrap.bootstrap`` takes a broadcaster, and every rank died with an
AttributeError.)  These are smoke runs, never timings: the numbers are only checked to
exist and be positive; what they mean is the benchmarks' own business.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tpbcast.harness import load_implementation, run_ranks

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # the benchmarks are scripts with sibling modules
import _bcast_inprocess as inprocess  # noqa: E402 - needs the path above
import _bcast_methods as methods  # noqa: E402
import _bcast_report as report  # noqa: E402
import bench_broadcast  # noqa: E402


def test_bench_dispatch_times_both_paths(tmp_path: Path) -> None:
    """The script end to end (its own forked ranks, a gloo group, both dispatch paths)."""
    out = tmp_path / "dispatch.json"
    run = subprocess.run(
        [
            sys.executable,
            str(BENCHMARKS / "bench_dispatch.py"),
            *("--tp", "2", "--sizes", "64", "--iters", "20", "--warmup", "2"),
            *("--json", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, f"bench_dispatch failed:\n{run.stdout}\n{run.stderr}"
    cell = json.loads(out.read_text())["groups"]["tp2/64"]
    for path in ("uds", "fallback"):
        assert cell[path]["n"] == 20, cell
        assert cell[path]["median"] > 0, cell


def test_bench_broadcast_measures_every_method_on_verified_bytes() -> None:
    """``rank_main`` of bench_broadcast.py for every method: each first gets a round whose
    bytes the peers compare with rank 0's (a wrong byte fails the rank), then timed rounds."""
    sizes = [64, 4096]
    names = list(methods.ALL)
    opts = {
        "pin": "none",
        "cpus": sorted(os.sched_getaffinity(0)),
        "impl": bench_broadcast.DEFAULT_IMPL,
        "methods": names,
        "sizes": sizes,
        "scale": 0.005,
    }
    chans = methods.Channels.create(2, max(sizes), seed=1)
    try:
        result = run_ranks(bench_broadcast.rank_main, 2, timeout=120.0, args=(chans, opts))
    finally:
        chans.close()
    result.raise_for_failure()
    summary = report.summarise(result.outcomes[0].value, sizes, names)
    for name in names:
        for size in sizes:
            cell = summary[name][str(size)]
            assert cell["n"] == bench_broadcast.counts(size, 0.005)[0], (name, size, cell)
            assert cell["p50"] > 0, (name, size, cell)


def test_the_in_process_split_of_the_reference_s_extra_time() -> None:
    """``_bcast_inprocess.measure``: both ranks in one thread, a checked round first."""
    impl = load_implementation(bench_broadcast.DEFAULT_IMPL)
    result = inprocess.measure(impl, io_deadline=30.0, blocks=3, per_block=50)
    assert set(result["us"]) == {"raw", "raw + poll", "implementation"}, result
    assert all(value > 0 for value in result["us"].values()), result
    assert result["python_us"] == result["us"]["implementation"] - result["us"]["raw + poll"]


def test_the_summary_takes_in_the_soak_report_as_a_section(tmp_path: Path) -> None:
    """bench.md = this folder's sections, then ../soak/soak.md one heading level down with
    its own relative links pointed into ../soak/ (absolute and ../ links left alone)."""
    import bench_summary

    bench, soak = tmp_path / "bench", tmp_path / "soak"
    bench.mkdir()
    soak.mkdir()
    (bench / "broadcast.md").write_text("## Broadcast\n\n![plot](broadcast_ratio.png)\n")
    (soak / "soak.md").write_text(
        "# Soak\n\n## RSS\n\n![rss](soak.png) [spec](https://x/y) [up](../other.md)\n"
    )
    assert bench_summary.main(["--dir", str(bench)]) == 0
    text = (bench / "bench.md").read_text()
    assert "![plot](broadcast_ratio.png)" in text  # this folder's links stay as they are
    assert "\n## Soak\n" in text and "\n### RSS\n" in text
    assert "![rss](../soak/soak.png) [spec](https://x/y) [up](../other.md)" in text
    assert text.index("## Broadcast") < text.index("## Soak")
    assert "Not run into this folder yet: harness." in text
