"""Summaries, goal ratios, the markdown section and the plots of ``bench_broadcast.py``.

Percentiles are nearest-rank.  The spread of a (method, size) cell is the range of the
medians of its interleaved blocks (each block saw the machine at a different moment), so
a cell whose block medians disagree widely was measured under changing load.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import _bcast_methods as methods

SMALL = 4 << 10  # the latency goal: sizes up to 4 KiB
LARGE = 4 << 20  # the throughput goal: sizes from 4 MiB
LATENCY_GOAL = 1.2  # reference p50 <= 1.2 x raw star
THROUGHPUT_GOAL = 0.85  # reference throughput >= 0.85 x raw star


def percentile(ordered: list[float], q: float) -> float:
    index = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[index]


def summarise(raw: dict[str, Any], sizes: list[int], names: list[str]) -> dict[str, Any]:
    """Per method and size: p50/p99/p10/p90/min in microseconds, n, block-median range."""
    out: dict[str, Any] = {}
    for name in names:
        cells: dict[str, Any] = {}
        for size in sizes:
            key = f"{name}/{size}"
            us = [ns / 1000.0 for ns in raw["samples"][key]]
            ends = raw["block_ends"][key]
            starts = [0, *ends[:-1]]
            block_medians = [  # nearest-rank, like the p50 beside them
                percentile(sorted(us[a:b]), 50) for a, b in zip(starts, ends, strict=True) if b > a
            ]
            ordered = sorted(us)
            cells[str(size)] = {
                "p50": percentile(ordered, 50),
                "p99": percentile(ordered, 99),
                "p10": percentile(ordered, 10),
                "p90": percentile(ordered, 90),
                "min": ordered[0],
                "n": len(us),
                "blocks": len(block_medians),
                "block_p50_min": min(block_medians),
                "block_p50_max": max(block_medians),
            }
        out[name] = cells
    return out


def human(size: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size // scale} {unit}"
    return f"{size} B"


def _us(value: float) -> str:
    if value >= 10000:
        return f"{value / 1000:,.1f} ms"
    return f"{value:,.1f}" if value < 100 else f"{value:,.0f}"


def ratios(run: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (TP, size): p50 of each method over the raw star's p50 (latency ratio;
    its inverse is the throughput ratio, the sizes being equal)."""
    rows = []
    for tp, group in run["groups"].items():
        if "raw" not in group:
            continue
        for size in run["sizes"]:
            raw = group["raw"][str(size)]["p50"]
            row: dict[str, Any] = {"tp": int(tp), "size": size}
            for name in ("reference", "gloo", "shm"):
                if name in group:
                    row[name] = group[name][str(size)]["p50"] / raw
            rows.append(row)
    return rows


def goals(run: dict[str, Any]) -> list[tuple[str, float, float, bool]]:
    """(description, measured ratio, goal, met) for each goal cell measured in this run."""
    out = []
    for row in ratios(run):
        ref = row.get("reference")
        if ref is None:
            continue
        tp, size = row["tp"], row["size"]
        if size <= SMALL and tp in (2, 4):
            text = f"TP {tp} {human(size)} p50 ref/raw"
            out.append((text, ref, LATENCY_GOAL, ref <= LATENCY_GOAL))
        if size >= LARGE:
            thr = 1 / ref
            text = f"TP {tp} {human(size)} throughput ref/raw"
            out.append((text, thr, THROUGHPUT_GOAL, thr >= THROUGHPUT_GOAL))
    return out


def _missed_by(value: float, goal: float) -> str:
    """The gap to the goal in ratio points, never rounded to zero."""
    gap = abs(value - goal)
    return f"{gap:.2f}" if gap >= 0.005 else f"{gap:.3f}"


def goals_text(run: dict[str, Any]) -> str:
    lines = [f"goals (load {' '.join(run['loadavg_start'])} -> {' '.join(run['loadavg_end'])}):"]
    for text, value, goal, met in goals(run):
        verdict = "met" if met else f"MISSED by {_missed_by(value, goal)}"
        lines.append(f"  {text}: {value:.2f} (goal {goal}) {verdict}")
    return "\n".join(lines)


def _where_the_time_goes(run: dict[str, Any]) -> list[str]:
    """Why the reference is slower than the raw star at small sizes: the syscalls it adds
    (a property of the code) and, when measured in this run, the split of its extra time
    per round between the peer's ``poll`` and Python (``_bcast_inprocess.py``)."""
    md = [
        "### Where the reference's extra time goes at small sizes",
        "",
        "Syscalls (check with `strace -f -c` on a run of either): per round the raw star "
        "makes one `sendto` per peer on rank 0 and one blocking `recvfrom` on each peer; the "
        "reference makes the same `sendto` (non-blocking, it succeeds at once) and, on each "
        "peer, one `poll` (the whole-call I/O deadline, the abort pipe of a concurrent "
        "`reset()`, EINTR not extending the wait) before the same one `recvfrom`. A "
        "kernel-side timeout (SO_RCVTIMEO) would save the `poll`, but CPython restarts an "
        "interrupted blocking call with the full timeout, so a signal storm would extend "
        "the deadline (TIME-9). The rest is Python per call: the re-entrancy claim, the "
        "state and root checks, the buffer check, restarting the deadline. At TP 4 and 8 "
        "the ranks share 2 cores, so every peer's extra CPU time adds up on the critical "
        "path.",
    ]
    ip = run.get("inprocess")
    if ip is None:
        if "inprocess_error" in run:
            md += ["", f"The in-process split was not measured: {run['inprocess_error']}."]
        return md
    us = ip["us"]
    md += [
        "",
        f"Measured in one process in this run (both ends in one thread, {ip['size']} B, "
        f"nothing waits; median over {ip['blocks']} interleaved blocks of "
        f"{ip['per_block']} rounds; `benchmarks/_bcast_inprocess.py`):",
        "",
        "| round | µs | spread of block means |",
        "|---|---:|---|",
    ]
    for name, label in (
        ("raw", "raw: blocking `sendall` + `recv_into`"),
        ("raw + poll", "raw + poll: non-blocking `send` + `poll` + `recv_into`"),
        ("implementation", "reference: rank 0's `broadcast` + the peer's `broadcast`"),
    ):
        low, high = ip["spread"][name]
        md.append(f"| {label} | {us[name]:.2f} | {low:.2f} to {high:.2f} |")
    extra = us["implementation"] - us["raw"]
    md += [
        "",
        f"So the reference costs {extra:.2f} µs more than the raw star per 2-rank round in "
        f"CPU alone: the peer's `poll` {ip['poll_us']:.2f} µs, Python {ip['python_us']:.2f} "
        "µs (both sides). Across processes each side also runs cold after a wake-up, so "
        "the gap in the tables above is larger.",
    ]
    return md


def _large_sizes() -> list[str]:
    """Why the throughput ratio sits a little under 1 at large sizes (code, not numbers)."""
    return [
        "### At large sizes",
        "",
        "Both move the same bytes with the same copies. The raw star's blocking `sendall` and "
        "`recv_into` sleep inside the kernel whenever the socket buffer is full (empty); "
        "the reference's non-blocking socket returns to Python each time instead: rank 0 "
        "sends again at once after progress and, when a send finds the buffer full (a "
        "BlockingIOError raised and caught in Python), `poll`s for POLLOUT; each peer "
        "`poll`s before every further read (each wait bounded by the call's deadline and "
        "watching the abort pipe). How much of the gap each part costs is not measured "
        "here. These cells rest on few rounds (8 to 60 per size), so they also move between "
        "runs; the spread of the block medians in the tables below shows how much within "
        "this run.",
    ]


def _markdown(run: dict[str, Any]) -> str:
    names = run["methods"]
    md = [
        "## Broadcast: latency and throughput vs payload size",
        "",
        f"`benchmarks/bench_broadcast.py`, run {run['started']}, {run['wall_s']:.0f} s, "
        f"{run['cpus']} CPUs, pinning `{run['pin']}`"
        + (" (rank r on CPU r mod ncpu)" if run["pin"] == "split" else "")
        + f", implementation `{run['impl']}`.",
        f"Load average (1/5/15 min): start {' '.join(run['loadavg_start'])}, "
        f"end {' '.join(run['loadavg_end'])}.",
        "",
        "One round = broadcast on every rank + a 1-byte ack from every peer to rank 0 over a "
        "pipe (the same pipes for every method), timed on rank 0; memcpy is one in-process "
        "`np.copyto` on rank 0 (no IPC, no ack). Methods are interleaved: per size, each "
        "method gets one verified round (peers start from zeros and compare) and a warm-up, "
        "then the timed rounds run in blocks, every block running every method in a "
        "rotating order. Throughput = payload bytes / p50 round time. Percentiles are "
        "nearest-rank; *spread* is the range of the per-block medians.",
        "",
        f"**TP 4 and TP 8 run 4 and 8 processes on {run['cpus']} cores: every method is "
        "oversubscribed there**, so those numbers measure scheduling as much as copying.",
        "",
        "Rounds per size (timed, warm-up, blocks): "
        + "; ".join(f"{human(int(s))}: {c[0]}/{c[1]}/{c[2]}" for s, c in run["counts"].items())
        + ".",
        "",
        "![latency](broadcast_latency.png)",
        "![throughput](broadcast_throughput.png)",
        "![ratios](broadcast_ratio.png)",
        "",
        "### Goals (ratios measured in this run)",
        "",
        f"p50 ≤ {LATENCY_GOAL} x raw star at ≤ 4 KiB (TP 2 and 4); throughput ≥ "
        f"{THROUGHPUT_GOAL} x raw star at ≥ 4 MiB.",
        "",
        "| cell | ratio | goal |",
        "|---|---:|---|",
    ]
    for text, value, goal, met in goals(run):
        verdict = "met" if met else f"**missed** by {_missed_by(value, goal)}"
        md.append(f"| {text} | {value:.2f} | {verdict} |")
    md += ["", *_where_the_time_goes(run), "", *_large_sizes(), ""]
    md += [
        "### p50 ratios to the raw star (above 1 = slower than the raw star)",
        "",
        "| TP | size | reference | gloo | shm |",
        "|---:|---:|---:|---:|---:|",
    ]
    for row in ratios(run):
        cells = [f"{row[k]:.2f}" if k in row else "-" for k in ("reference", "gloo", "shm")]
        md.append(f"| {row['tp']} | {human(row['size'])} | " + " | ".join(cells) + " |")
    for tp, group in run["groups"].items():
        md += [
            "",
            f"### TP {tp}: p50 / p99 µs (spread of block medians)",
            "",
            "| size | " + " | ".join(names) + " |",
            "|---:|" + "---:|" * len(names),
        ]
        for size in run["sizes"]:
            cells = []
            for name in names:
                c = group[name][str(size)]
                cells.append(
                    f"{_us(c['p50'])} / {_us(c['p99'])} "
                    f"({_us(c['block_p50_min'])} to {_us(c['block_p50_max'])})"
                )
            md.append(f"| {human(size)} | " + " | ".join(cells) + " |")
    md.append("")
    return "\n".join(md)


COLORS = {
    "reference": "tab:red",
    "raw": "tab:blue",
    "gloo": "tab:green",
    "shm": "tab:purple",
    "memcpy": "tab:gray",
}


def _size_axis(ax: Any, sizes: list[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([human(s).replace(" ", "") for s in sizes], rotation=60, fontsize=8)
    ax.set_xlabel("payload size")
    ax.grid(True, which="major", alpha=0.3)


def _plots(run: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = run["sizes"]
    tps = list(run["groups"])
    load = f"load {' '.join(run['loadavg_start'])} → {' '.join(run['loadavg_end'])}"
    where = f"{run['cpus']} CPUs, pin {run['pin']}, {load}"

    # Row 1: p50, row 2: p99; one y scale per row so the TP columns compare at a glance.
    fig, axes = plt.subplots(
        2, len(tps), figsize=(5.5 * len(tps), 9.5), squeeze=False, sharey="row"
    )
    for column, tp in enumerate(tps):
        for row, stat in enumerate(("p50", "p99")):
            ax = axes[row][column]
            for name in run["methods"]:
                cells = [run["groups"][tp][name][str(s)] for s in sizes]
                ax.plot(
                    sizes,
                    [c[stat] for c in cells],
                    "o-",
                    color=COLORS.get(name),
                    label=methods.LABELS[name],
                )
            _size_axis(ax, sizes)
            ax.set_yscale("log")
            ax.set_ylabel(f"{stat} round time (µs, log)")
            over = " (oversubscribed)" if int(tp) > run["cpus"] else ""
            ax.set_title(f"TP {tp}{over}: {stat}")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9)
    fig.suptitle(f"Broadcast round time (broadcast + 1-byte ack) vs payload size — {where}")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(out / "broadcast_latency.png", dpi=100)
    plt.close(fig)

    _throughput_plot(plt, run, out, where)
    _ratio_plot(plt, run, out, where)


def _throughput_plot(plt: Any, run: dict[str, Any], out: Path, where: str) -> None:
    sizes = run["sizes"]
    tps = list(run["groups"])
    fig, axes = plt.subplots(1, len(tps), figsize=(6 * len(tps), 6.0), squeeze=False)
    for ax, tp in zip(axes[0], tps, strict=True):
        for name in run["methods"]:
            cells = [run["groups"][tp][name][str(s)] for s in sizes]
            gbs = [s / (c["p50"] * 1e-6) / 1e9 for s, c in zip(sizes, cells, strict=True)]
            ax.plot(sizes, gbs, "o-", color=COLORS.get(name), label=methods.LABELS[name])
        _size_axis(ax, sizes)
        ax.set_yscale("log")
        ax.set_ylabel("payload throughput (GB/s = bytes / p50 round, log)")
        over = " (oversubscribed)" if int(tp) > run["cpus"] else ""
        ax.set_title(f"TP {tp}{over}")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=9)
    fig.suptitle(f"Broadcast throughput vs payload size — {where}")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(out / "broadcast_throughput.png", dpi=110)
    plt.close(fig)


def _ratio_plot(plt: Any, run: dict[str, Any], out: Path, where: str) -> None:
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

    sizes = run["sizes"]
    tps = list(run["groups"])
    rows = ratios(run)
    fig, axes = plt.subplots(1, 3, figsize=(18, 5.8), squeeze=False)
    for ax, name in zip(axes[0], ("reference", "shm", "gloo"), strict=True):
        for tp in tps:
            pts = [(r["size"], r[name]) for r in rows if r["tp"] == int(tp) and name in r]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=f"TP {tp}")
        ax.axhline(1.0, color="black", lw=0.8)
        if name == "reference":
            # Each goal only over the sizes it is about.
            small = [s for s in sizes if s <= SMALL]
            large = [s for s in sizes if s >= LARGE]
            if small:
                ax.plot(
                    [small[0], small[-1]],
                    [LATENCY_GOAL] * 2,
                    color="tab:red",
                    ls=":",
                    lw=2.5,
                    label=f"latency goal: ≤ {LATENCY_GOAL} at ≤ 4 KiB (TP 2, 4)",
                )
            if large:
                ax.plot(
                    [large[0], large[-1]] if len(large) > 1 else [large[0]] * 2,
                    [1 / THROUGHPUT_GOAL] * 2,
                    color="tab:orange",
                    ls=":",
                    lw=2.5,
                    label=f"throughput goal ≥ {THROUGHPUT_GOAL} at ≥ 4 MiB: "
                    f"ratio ≤ {1 / THROUGHPUT_GOAL:.2f}",
                )
        _size_axis(ax, sizes)
        values = [r[name] for r in rows if name in r]
        scale = "linear"
        if values and max(values) / max(min(values), 1e-9) > 20:  # gloo spans decades
            scale = "log"
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
            ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_ylabel(f"p50 round time ÷ raw star p50 ({scale}; below 1 = faster)")
        ax.set_title(f"{methods.LABELS[name]} vs raw UDS star")
        ax.legend(fontsize=8)
    fig.suptitle(f"p50 round time relative to the raw UDS star (same run) — {where}")
    fig.tight_layout()
    fig.savefig(out / "broadcast_ratio.png", dpi=100)
    plt.close(fig)


def write(run: dict[str, Any], out: Path) -> None:
    (out / "broadcast.json").write_text(json.dumps(run, indent=1) + "\n")
    (out / "broadcast.md").write_text(_markdown(run))
    _plots(run, out)
