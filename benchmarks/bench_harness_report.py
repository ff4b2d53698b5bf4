"""``reports/bench/harness.md`` and its plots from ``reports/bench/harness.json``.

Written by ``bench_harness_cost.py`` (kept apart: the measuring script stays readable, and
the report can be redrawn without measuring again). The markdown is one section of
``reports/bench/bench.md``; the plots are PNGs next to it, each readable without the code.
"""

from __future__ import annotations

import os
import platform
import statistics
from pathlib import Path
from typing import Any

RUNNER_NAMES = {
    "tpbcast": "tpbcast_run: fork per test from the test process",
    "mptc": "torch MultiProcessTestCase: spawn per test and rank",
    "pool": "torch MultiProcContinuousTest: ranks + group kept per class (median = steady state)",
}
RUNNER_SHORT = {
    "tpbcast": "tpbcast_run",
    "mptc": "MultiProcessTestCase",
    "pool": "MultiProcContinuousTest (pool)",
}
SECTION_FILE = "harness.md"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms" if seconds < 10 else f"{seconds:,.1f} s"


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def _tests_section(tests: dict[str, Any], out: Path, lines: list[str]) -> None:
    sizes = [str(s) for s in tests["sizes"]]
    runners = tests.get("runners", ["tpbcast", "mptc"])
    per = tests["per_test"]
    n = tests["tests_per_size"]
    lines += [
        "### Per-test cost: tpbcast_run vs torch MultiProcessTestCase",
        "",
        "The same check in every runner: a gloo process group (FileStore), one `broadcast` of",
        "a 4-float tensor from rank 0, one assertion in every rank. The test module imports",
        "torch at the top, as users write it. Each runner's tests run as their own pytest",
        f"session, runners rotated over {tests['rounds']} round(s); per session and world size: "
        + ", ".join(f"{n[r]} {RUNNER_SHORT[r]}" for r in runners)
        + " tests.",
        "Per-test cost = wall time of the test's whole pytest protocol (setup + call +",
        "teardown + report; a hook in the generated conftest), and its CPU time (pytest and",
        "every rank it reaped, rusage: robust to the box's load); the median is the typical test,",
        "the mean also spreads a runner's one-off per-class cost (the pool's spawn) over its",
        "tests. Cross-check: (session wall - the same session's `--collect-only` startup) /",
        "tests, and the same for CPU time (pytest + every rank, rusage), medians over sessions",
        "(world sizes mixed).",
        f"Load average (1/5/15 min) before: {tests['load_before']}, after: {tests['load_after']}"
        f"; measured {tests.get('measured_at', '?')}.",
        "",
        "| world | runner | wall per test: median | mean | CPU per test: median | mean "
        "| MPTC / this: wall | CPU |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    cpu_per = tests.get("cpu_per_test", {})
    for size in sizes:
        theirs = _med(per["mptc"].get(size, [])) if "mptc" in per else float("nan")
        theirs_cpu = _med(cpu_per.get("mptc", {}).get(size, []))
        for runner in runners:
            values = per[runner].get(size, [])
            cpus = cpu_per.get(runner, {}).get(size, [])
            ratio, cpu_ratio = theirs / _med(values), theirs_cpu / _med(cpus)
            strong = "**" if runner == "tpbcast" else ""
            lines.append(
                f"| {size} | {RUNNER_SHORT[runner]} | {_ms(_med(values))} | {_ms(_mean(values))} "
                f"| {_ms(_med(cpus))} | {_ms(_mean(cpus))} "
                f"| {strong}{ratio:.1f}x{strong} | {strong}{cpu_ratio:.1f}x{strong} |"
            )
    lines += ["", "| runner | per test by session difference (wall) | (CPU) | session startup |"]
    lines.append("|---|---:|---:|---:|")
    for runner in runners:
        sessions = tests["sessions"][runner]
        cpu = [
            s["cpu_per_test_by_difference"] for s in sessions if "cpu_per_test_by_difference" in s
        ]
        wall = _ms(_med([s["per_test_by_difference"] for s in sessions]))
        startup = _med([s["startup_wall"] for s in sessions])
        cpu_text = _ms(_med(cpu)) if cpu else "-"
        lines.append(f"| {RUNNER_SHORT[runner]} | {wall} | {cpu_text} | {startup:.2f} s |")
    lines += [
        "",
        "Per-session loads: "
        + "; ".join(
            f"{RUNNER_SHORT[runner]} round {s['round']}: {s['load']}"
            for runner in runners
            for s in tests["sessions"][runner]
        )
        + ".",
        "",
        "![per-test cost](harness_per_test.png)",
        "",
    ]
    _plot_per_test(sizes, runners, per, out / "harness_per_test.png", tests["load_before"])


def _plot_per_test(
    sizes: list[str], runners: list[str], per: dict[str, Any], path: Path, load: str
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    width = 0.8 / len(runners)
    xs = list(range(len(sizes)))
    for i, runner in enumerate(runners):
        values = [_med(per[runner].get(s, [])) * 1000 for s in sizes]
        offset = (i - (len(runners) - 1) / 2) * width
        bars = ax.bar([x + offset for x in xs], values, width, label=RUNNER_NAMES[runner])
        ax.bar_label(bars, labels=[f"{v:,.0f} ms" for v in values], fontsize=8)
    ax.set_yscale("log")
    ax.set_xticks(xs, [f"{s} ranks" for s in sizes])
    ax.set_ylabel("wall time per test, ms (median, log scale)")
    ax.set_title(
        "Cost of one multi-rank gloo test (process group + broadcast + assert)\n"
        f"2 vCPU shared box, load avg at start {load}"
    )
    ax.legend(loc="upper left", fontsize=8)
    ax.set_ylim(top=ax.get_ylim()[1] * 6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _overhead_section(over: dict[str, Any], out: Path, lines: list[str]) -> None:
    lines += [
        "### run_ranks overhead over a bare fork of the same parent",
        "",
        f"Parent: a fresh interpreter with torch imported (no torch op run), RSS "
        f"{over['parent_rss_kib'] / 1024:.0f} MiB of which {over['parent_anon_kib'] / 1024:.0f}"
        f" MiB anonymous. `run_ranks(trivial, n)` (workdir, pipes, capture files, fork x n, "
        "supervise, reap, verdicts, cleanup) against `os.fork()` x n + `os._exit(0)` + "
        f"`waitpid`, interleaved, {over['reps']} samples each. CPU = parent + children "
        "(rusage), per group.",
        f"Load average before: {over['load_before']}, after: {over['load_after']}; measured "
        f"{over.get('measured_at', '?')}.",
        "",
        "| ranks | run_ranks median | bare fork median | overhead (median of paired differences) "
        "| ratio | CPU run_ranks | CPU bare fork |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size, row in over["sizes"].items():
        rr, bare = _med(row["wall_ms"]["run_ranks"]), _med(row["wall_ms"]["bare_fork"])
        lines.append(
            f"| {size} | {rr:.2f} ms | {bare:.2f} ms | **{row['paired_diff_median_ms']:+.2f} ms** "
            f"| {rr / bare:.2f} | {_med(row['cpu_ms']['run_ranks']):.1f} ms "
            f"| {_med(row['cpu_ms']['bare_fork']):.1f} ms |"
        )
    lines.append("")


def _forkrss_section(fr: dict[str, Any], out: Path, lines: list[str]) -> None:
    lines += [
        "### What a fork costs as the parent grows",
        "",
        "One child forked from a fresh interpreter holding N MiB of touched private anonymous",
        "memory (or with torch imported), `os._exit(0)` at once, reaped; medians. `fork()` is",
        "the parent's syscall (page-table copy); the total adds the child's exit (unmapping",
        "what it shares) and the reap.",
        f"Load average before: {fr['load_before']}, after: {fr['load_after']}.",
        "",
        "| parent | RSS | anonymous | page tables | fork() | fork + exit + waitpid |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for p in fr["points"]:
        name = "python" if p["kind"] == "plain" else "python + import torch"
        if p["extra_mib"]:
            name += f" + {p['extra_mib']} MiB"
        lines.append(
            f"| {name} | {p['rss_kib'] / 1024:.0f} MiB | {p['anon_kib'] / 1024:.0f} MiB "
            f"| {p['pte_kib']} KiB | {p['fork_ms']:.2f} ms | {p['total_ms']:.2f} ms |"
        )
    lines += ["", "![fork cost vs parent size](harness_fork_rss.png)", ""]
    _plot_forkrss(fr, out / "harness_fork_rss.png")


def _plot_forkrss(fr: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for kind, marker, label in (
        ("plain", "o", "python + N MiB touched anonymous memory"),
        ("torch", "s", "python + import torch (+ N MiB)"),
    ):
        pts = sorted((p for p in fr["points"] if p["kind"] == kind), key=lambda p: p["anon_kib"])
        xs = [p["anon_kib"] / 1024 for p in pts]
        ax.plot(xs, [p["total_ms"] for p in pts], marker=marker, label=f"{label}: fork+exit+wait")
        ax.plot(
            xs,
            [p["fork_ms"] for p in pts],
            marker=marker,
            linestyle="--",
            label=f"{label}: fork() only",
        )
    ax.set_xlabel("parent's anonymous RSS, MiB")
    ax.set_ylabel("time per child, ms (median)")
    ax.set_title(f"Fork cost vs parent size (one child)\n2 vCPU, load avg {fr['load_before']}")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _conformance_section(conf: dict[str, Any], lines: list[str]) -> None:
    runs = conf["runs"]
    serial = [r["wall"] for r in runs if r["workers"] == 0]
    par = [r["wall"] for r in runs if r["workers"] == 2]
    lines += [
        "### `python -m tpbcast.conformance`: serial vs two xdist workers",
        "",
        "The whole suite against the reference, `-n 0` and `-n 2` (the CLI passes `-n` to",
        "pytest-xdist; its default is `auto`), alternated; wall time of the command.",
        f"Load average before: {conf['load_before']}, after: {conf['load_after']}; "
        f"measured {conf.get('measured_at', '?')}.",
        "",
        "| run | workers | wall | exit | load before | pytest summary |",
        "|---:|---:|---:|---:|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r['round']} | {r['workers']} | {r['wall']:.1f} s | {r['exit']} "
            f"| {r['load_before']} | {r['summary']} |"
        )
    lines += [
        "",
        f"Median: serial {_med(serial):.1f} s, `-n 2` {_med(par):.1f} s: "
        f"**{_med(serial) / _med(par):.2f}x** faster with two workers.",
        "",
    ]


def write_report(data: dict[str, Any], out: Path) -> Path:
    """Write ``harness.md`` (and plots) for whatever parts ``data`` holds."""
    lines = [
        "## Harness: cost of a multi-rank test",
        "",
        f"Machine: {os.cpu_count()} vCPU ({_cpu_model()}), shared with other jobs (load "
        "averages below are the whole box's); Python "
        f"{platform.python_version()}. Produced by `benchmarks/bench_harness_cost.py` "
        "(raw data: `harness.json`). Ratios, never timed assertions.",
        "",
    ]
    if "tests" in data:
        _tests_section(data["tests"], out, lines)
    if "overhead" in data:
        _overhead_section(data["overhead"], out, lines)
    if "forkrss" in data:
        _forkrss_section(data["forkrss"], out, lines)
    if "conformance" in data:
        _conformance_section(data["conformance"], lines)
    notes = out / "harness_notes.md"
    if notes.exists():
        lines += [notes.read_text().rstrip(), ""]
    path = out / SECTION_FILE
    path.write_text("\n".join(lines))
    return path
