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
import signal
import subprocess
import sys
from pathlib import Path

import pytest

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
    # Its own session: on a timeout the script and the ranks it forked go with one killpg.
    proc = subprocess.Popen(
        [
            sys.executable,
            str(BENCHMARKS / "bench_dispatch.py"),
            *("--tp", "2", "--sizes", "64", "--iters", "20", "--warmup", "2"),
            *("--json", str(out), "--out", str(tmp_path)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        raise AssertionError(f"bench_dispatch hung for 240 s:\n{stdout}\n{stderr}") from None
    assert proc.returncode == 0, f"bench_dispatch failed:\n{stdout}\n{stderr}"
    cell = json.loads(out.read_text())["groups"]["tp2/64"]
    for path in ("uds", "fallback"):
        assert cell[path]["n"] == 20, cell
        assert cell[path]["median"] > 0, cell
    section = (tmp_path / "dispatch.md").read_text()  # bench.md's section, same numbers
    ratio = cell["fallback"]["median"] / cell["uds"]["median"]
    row = f"| 2 | 64 B | {cell['uds']['median']:.1f} | {cell['uds']['p99']:.1f} | "
    assert row in section and f"| {ratio:.1f}x |" in section, section
    assert section.startswith("## Dispatch:") and "load average" in section


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
        "[top](#verdicts) [abs](/srv/x.md) [caps](HTTPS://x/z)\n\n```\n# not a heading\n"
        "[kept](soak.json)\n```\n"
    )
    assert bench_summary.main(["--dir", str(bench)]) == 0
    text = (bench / "bench.md").read_text()
    assert "![plot](broadcast_ratio.png)" in text  # this folder's links stay as they are
    assert "\n## Soak\n" in text and "\n### RSS\n" in text
    assert "![rss](../soak/soak.png) [spec](https://x/y) [up](../other.md)" in text
    assert "[top](#verdicts) [abs](/srv/x.md) [caps](HTTPS://x/z)" in text
    assert "```\n# not a heading\n[kept](soak.json)\n```" in text  # code is left alone
    assert text.index("## Broadcast") < text.index("## Soak")
    assert "Not run into this folder yet: harness, dispatch." in text


class _RefusingRank:
    """An implementation's rank whose initialize fails (rank 1 at once, rank 0 too)."""

    resets = 0

    def initialize(self, rank: int, world_size: int, base_path: str) -> None:
        raise RuntimeError(f"rank {rank} refuses to initialize")

    def reset(self) -> None:
        type(self).resets += 1


class _RefusingImplementation:
    def supports(self, capability: str) -> bool:
        return False

    def create(self) -> _RefusingRank:
        return _RefusingRank()


def test_a_failed_in_process_split_leaves_nothing_behind_and_is_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both ranks reset, rank 0's thread gone, the temporary directory removed; and the
    report says why the split is missing instead of losing the sweep."""
    import tempfile
    import threading

    made: list[str] = []
    real_mkdtemp = tempfile.mkdtemp

    def recording_mkdtemp(*args: object, **kwargs: object) -> str:
        path = real_mkdtemp(*args, **kwargs)  # type: ignore[call-overload]
        made.append(path)
        return path

    monkeypatch.setattr(inprocess.tempfile, "mkdtemp", recording_mkdtemp)
    _RefusingRank.resets = 0
    with pytest.raises(RuntimeError, match="rank 1 refuses to initialize"):
        inprocess.measure(_RefusingImplementation(), io_deadline=1.0, blocks=1, per_block=1)
    assert _RefusingRank.resets == 2
    assert not [t for t in threading.enumerate() if t.name == "bench-inprocess-rank0"]
    assert len(made) == 1 and not os.path.exists(made[0]), made
    page = "\n".join(report._where_the_time_goes({"inprocess_error": "RuntimeError: no"}))
    assert "The in-process split was not measured: RuntimeError: no." in page


def test_bench_torch_suite_report_from_a_synthetic_run(tmp_path: Path) -> None:
    """The side-by-side section (per session with load, per test, floor) from made-up
    numbers: the real run takes half an hour (torch's spawn runner), so only the report
    code is smoked here."""
    import bench_torch_suite as suite

    def session(scale: float, verdicts: dict[str, str]) -> dict[str, object]:
        return {
            "tests": {
                name: {"verdict": v, "seconds": scale * (i + 1), "reason": ""}
                for i, (name, v) in enumerate(verdicts.items())
            },
            "wall_seconds": 10 * scale,
            "load_before": [1.0, 1.0, 1.0],
            "load_after": [2.0, 1.0, 1.0],
        }

    verdicts = {"test_get_rank": "pass", "test_broadcast": "pass", "test_x_group": "skip"}
    data = {
        "when": "now",
        "rounds": 1,
        "torch": "2.x",
        "reps": 3,
        "empty_ms": {"torch": 10.0, "suite": 30.0},
        "floor": {"as_is": 0.3, "poll_2ms": 0.1, "load": 1.0},
        "sessions": {"harness": [session(1.0, verdicts)], "spawn": [session(25.0, verdicts)]},
        "bad": [],
    }
    text = suite.write_report(data, tmp_path)
    assert (tmp_path / "torch_suite.md").read_text() == text
    assert "2 pass, 1 skip on both runners; identical test by test" in text
    assert "| round 1 | 10.0 s | 250.0 s | **25.0x** | harness 1.00 -> 2.00" in text
    assert "Per session: **25.0x**" in text
    assert "`test_get_rank` takes 1.00 s on the harness" in text
    assert "torch's barrier polling is **67%** of a harness test here" in text


def test_bench_continuous_report_from_a_synthetic_run() -> None:
    """The warm-group side by side (three runners, the poison pill, the slice) from
    made-up numbers: the real run spawns interpreters per test for minutes, so only the
    report code is smoked here; ``nox -s bench -- quick`` runs the real thing small."""
    import bench_continuous as cont

    def session(scale: float, verdicts: dict[str, str]) -> dict[str, object]:
        return {
            "tests": {
                name: {"verdict": v, "seconds": scale, "reason": "why" if v == "skip" else ""}
                for name, v in verdicts.items()
            },
            "session_seconds": 10 * scale,
            "load_before": [1.0, 1.0, 1.0],
            "load_after": [2.0, 1.0, 1.0],
        }

    ok = {"test_a": "pass", "test_barrier": "pass", "test_c": "pass"}
    data = {
        "when": "now",
        "n_tests": 3,
        "rounds": [{"ours": session(1, ok), "torch": session(4, ok), "spawn": session(60, ok)}],
        "poison": {
            "test": "test_barrier",
            "ours": session(1, {**ok, "test_barrier": "fail"}),
            "torch": session(4, {**ok, "test_barrier": "error", "test_c": "skip"}),
        },
        "slice": {"warm": session(1, ok), "slice-spawn": session(55, ok)},
    }
    text = cont.render(data)
    assert "**Verdicts:** 3 pass on every runner; identical test by test: yes." in text
    assert "| round 1 | 10.0 s | 40.0 s | 600.0 s | **4.0x** vs torch; **60.0x** vs spawn" in text
    assert "**4.0x** (median of 1); goal >= 3x." in text
    assert "| 1 fail, 2 pass | 1 pass |" in text  # ours: the test after the failure passes
    assert "| 1 error, 1 pass, 1 skip | 1 skip |" in text  # torch: poisoned
    assert "**55.0x** (goal >= 50x)" in text


def test_continuous_suite_runs_on_our_base(tmp_path: Path) -> None:
    """The benchmark's suite end to end on tpbcast's continuous base, two tests, one made
    to fail in rank 1: it fails alone, the other passes (torch's runners are the
    benchmark's business: they spawn interpreters for seconds)."""
    pytest.importorskip("expecttest")
    out = tmp_path / "ours.json"
    tests = "test_all_reduce_sum,test_barrier,test_broadcast_root0"
    proc = subprocess.run(
        [
            *(sys.executable, str(BENCHMARKS / "_continuous_suite.py"), "ours"),
            *("--tests", tests, "--fail", "test_barrier", "--json", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    verdicts = {k: v["verdict"] for k, v in json.loads(out.read_text())["tests"].items()}
    assert verdicts == {
        "test_all_reduce_sum": "pass",
        "test_barrier": "fail",
        "test_broadcast_root0": "pass",
    }
