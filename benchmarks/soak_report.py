"""The soak's results and how they are written: soak.md, soak.json and soak.png.

The plot (matplotlib, optional) shows fd count and RSS per rank against the broadcast
index, with the resets, the first and last windows and the RSS tolerance marked.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from soak_schedule import MIB, SoakConfig


@dataclass
class RankSeries:
    rank: int
    fd_first: float
    fd_last: float
    rss_first_mib: float
    rss_last_mib: float
    rss_trend_mib: float  # second-half slope x broadcasts
    window_means_mib: list[float]
    fd_flat: bool
    rss_flat: bool
    resources_first_mib: float = 0.0  # part of the RSS in the adapter's resource pids
    resources_last_mib: float = 0.0


@dataclass
class SoakReport:
    config: SoakConfig
    ok: bool
    verdicts: list[str]
    failure: str = ""
    impl: str = ""
    ranks: list[RankSeries] = field(default_factory=list)
    totals: dict[str, Any] = field(default_factory=dict)
    rss_sample: list[dict[str, Any]] = field(default_factory=list)
    raw: list[dict[str, Any]] = field(default_factory=list)
    source: str = ""


def _mib(value: int) -> str:
    return f"{value / MIB:.1f}"


def render_markdown(
    report: SoakReport, loadavg: tuple[str, str], command: str, *, image: str | None = None
) -> str:
    """The report page; ``image``: the plot's file name beside it (embedded when given)."""
    c, t = report.config, report.totals
    lines = [
        "# Soak",
        "",
        f"Implementation `{c.impl}` ({report.impl or 'n/a'}), TP {c.world_size}, seed "
        f"{c.seed}. Verdict: **{'PASS' if report.ok else 'FAIL'}**.",
        "",
        f"Command: `{command}`  ",
        f"Source: {report.source}  ",
        *([f"Note: {c.note}  "] if c.note else []),
        f"Load average (1/5/15 min): {loadavg[0]} at start, {loadavg[1]} at end "
        f"({os.cpu_count()} CPUs, shared).",
        "",
    ]
    if t:
        gib = t["payload_bytes"] / (1 << 30)
        lines += [
            "| broadcasts | buffers | payload | delivered to peers | corruptions | resets "
            "(fresh objects) | wall | payload rate |",
            "|---|---|---|---|---|---|---|---|",
            f"| {t['broadcasts']} | {t['buffers']} (multi_buffer: {t['multi_buffer']}) | "
            f"{gib:.2f} GiB | {t['delivered_bytes'] / (1 << 30):.2f} GiB | "
            f"{t['corruptions']} | {t['resets']} ({t['fresh_objects']}) | "
            f"{t['wall_s']:.1f} s | {gib / t['wall_s'] * 1024:.0f} MiB/s |",
            "",
            f"Sizes: total per call log-uniform over 1 B ... {_mib(c.max_bytes)} MiB, "
            f"2 % 0 B, 1 % exactly {_mib(c.max_bytes)} MiB; up to {c.max_buffers} buffers "
            "per call. Every rank checks every buffer against the bytes it derives from the "
            f"seed. Reset + re-init every {c.reset_every // 2}...{c.reset_every * 3 // 2} "
            "calls (sometimes another base path or a fresh object); the first call after "
            "every initialize carries the maximum (warm-up of high-water marks) and, with "
            "several buffers, half of the calls before a reset end in a 0 B buffer.",
            "",
            f"## fd count and RSS per rank: first vs last {t['window']} broadcasts",
            "",
            "Sampled after every broadcast: this rank plus the adapter's resource processes "
            "(statm RSS, which includes pages shared with the parent).",
            "",
            "| rank | fds first | fds last | RSS first (MiB) | RSS last (MiB) | growth (MiB) "
            "| 2nd-half trend (MiB/run) | flat |",
            "|---|---|---|---|---|---|---|---|",
        ]
        if any(r.resources_last_mib for r in report.ranks):
            lines[-2] += " of which resource processes (MiB) |"
            lines[-1] += "---|"
        for r in report.ranks:
            flat = "yes" if r.fd_flat and r.rss_flat else "**no**"
            lines.append(
                f"| {r.rank} | {r.fd_first:.2f} | {r.fd_last:.2f} | {r.rss_first_mib:.2f} | "
                f"{r.rss_last_mib:.2f} | {r.rss_last_mib - r.rss_first_mib:+.2f} | "
                f"{r.rss_trend_mib:+.2f} | {flat} |"
                + (
                    f" {r.resources_first_mib:.2f} -> {r.resources_last_mib:.2f} |"
                    if r.resources_last_mib
                    else ""
                )
            )
        lines += [
            "",
            f"Tolerances: fd mean growth <= {c.fd_tolerance:g}; RSS growth and trend <= "
            f"{c.rss_tolerance_mib:g} MiB. RSS per window of {t['window']} (MiB):",
            "",
        ]
        for r in report.ranks:
            lines.append(f"- rank {r.rank}: " + ", ".join(f"{m:.1f}" for m in r.window_means_mib))
        lines.append("")
        if image is not None:
            lines += [f"![fd count and RSS per rank over the run]({image})", ""]
    if report.rss_sample:
        lines += [
            f"## RSS per rank at TP {c.rss_tp} (after init + {len(report.rss_sample[0]['sizes'])}"
            " verified broadcasts)",
            "",
            "| rank | RSS before init | after init | after broadcasts | VmHWM | PSS | USS | "
            "growth from before init | resource processes: RSS (USS) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for v in report.rss_sample:
            b, i, a = v["before_init"], v["after_init"], v["after_broadcasts"]
            extra = v["resource_processes"]
            others = (
                f"{_mib(sum(e['VmRSS'] for e in extra))} ({_mib(sum(e['USS'] for e in extra))})"
                if extra
                else "none"
            )
            lines.append(
                f"| {v['rank']} | {_mib(b['VmRSS'])} | {_mib(i['VmRSS'])} | {_mib(a['VmRSS'])} "
                f"| {_mib(a['VmHWM'])} | {_mib(a['Pss'])} | {_mib(a['USS'])} | "
                f"{(a['VmRSS'] - b['VmRSS']) / MIB:+.1f} | {others} |"
            )
        lines += [
            "",
            "MiB, this rank's process (an `exec:` driver is in the last column). Each rank "
            "holds a seeded pool (2 x max size) and a receive arena (max size) of its own; "
            "the implementation's share in the rank is the growth column.",
            "",
        ]
    lines += ["## Verdicts", "", *[f"- {v}" for v in report.verdicts], ""]
    examples = [e for v in report.raw for e in v.get("corruption_examples", [])]
    if examples:
        lines += ["## Corruptions (first examples)", "", "```"]
        lines += [json.dumps(e) for e in examples[:20]]
        lines += ["```", ""]
    if report.failure:
        lines += ["## Failure", "", "```", report.failure.rstrip(), "```", ""]
    return "\n".join(lines)


def plot(report: SoakReport, path: Path) -> bool:
    """fd count and RSS vs broadcast index, one line per rank; False without matplotlib."""
    try:  # optional (nox -s soak installs it); untyped, hence Any
        matplotlib: Any = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        plt: Any = importlib.import_module("matplotlib.pyplot")
    except ImportError:
        return False
    c = report.config
    fig, (ax_fd, ax_rss) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    window = report.totals["window"]
    n = report.totals["broadcasts"]
    styles = ["-", "--", "-.", ":"]
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    rss_low, rss_high = math.inf, -math.inf
    for i, (value, series) in enumerate(zip(report.raw, report.ranks, strict=True)):
        # flat lines of several ranks coincide: thicker first, dashed after, all visible
        look = {
            "label": f"rank {value['rank']}",
            "linestyle": styles[i % len(styles)],
            "linewidth": max(1.0, 3.0 - 0.6 * i),
            "color": colours[i % len(colours)],
        }
        xs = range(len(value["fds"]))
        ax_fd.plot(xs, value["fds"], **look)
        rss = [b / MIB for b in value["rss"]]
        ax_rss.plot(xs, rss, **look)
        limit = series.rss_first_mib + c.rss_tolerance_mib
        ax_rss.axhline(limit, color=look["color"], linestyle=":", linewidth=0.8, alpha=0.7)
        rss_low, rss_high = min(rss_low, *rss), max(rss_high, limit)
    ax_rss.set_ylim(rss_low - 1.0, rss_high + 1.0)  # the tolerance stays in view
    # Ranks whose fd lines coincide (all flat at the same count, the usual good outcome)
    # hide each other whatever the line styles: name them at the lines' right end.
    last_fds: dict[int, list[int]] = {}
    for value in report.raw:
        last_fds.setdefault(value["fds"][-1], []).append(value["rank"])
    for count, ranks in sorted(last_fds.items()):
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"
        ax_fd.annotate(
            f"{who}: {count} fds at the end",
            xy=(len(report.raw[0]["fds"]) - 1, count),
            xytext=(-6, 5),
            textcoords="offset points",
            ha="right",
            fontsize=8,
        )
    low_fd = min(min(v["fds"]) for v in report.raw)
    high_fd = max(max(v["fds"]) for v in report.raw)
    ax_fd.set_ylim(low_fd - 1.5, high_fd + 1.5 + c.fd_tolerance)
    for ax in (ax_fd, ax_rss):
        for at in report.raw[0]["reset_points"]:
            ax.axvline(at, color="grey", alpha=0.25, linewidth=0.8)
        ax.axvspan(0, window, color="tab:green", alpha=0.08)
        ax.axvspan(n - window, n, color="tab:red", alpha=0.08)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    ax_fd.set_ylabel("open fds (count)")
    ax_rss.set_ylabel(f"RSS (MiB); dotted: first window + {c.rss_tolerance_mib:g} MiB")
    ax_rss.set_xlabel("broadcast index (grey lines: reset + re-init; shaded: first/last window)")
    fig.suptitle(
        f"Soak of {report.impl} at TP {c.world_size}: fd count and RSS per rank "
        f"({report.totals['broadcasts']} broadcasts, seed {c.seed})"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def run_length(values: list[int]) -> list[list[int]]:
    """``[value, count]`` pairs: a flat series of 10,000 samples is one pair, not 10,000."""
    pairs: list[list[int]] = []
    for value in values:
        if pairs and pairs[-1][0] == value:
            pairs[-1][1] += 1
        else:
            pairs.append([value, 1])
    return pairs


def write_reports(report: SoakReport, out: Path, loadavg: tuple[str, str], command: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    plotted = bool(report.raw) and plot(report, out / "soak.png")
    if report.raw and not plotted:
        print("matplotlib not installed: no soak.png", file=sys.stderr)
    image = "soak.png" if plotted else None
    (out / "soak.md").write_text(render_markdown(report, loadavg, command, image=image))
    data = {
        "config": asdict(report.config),
        "ok": report.ok,
        "impl": report.impl,
        "verdicts": report.verdicts,
        "totals": report.totals,
        "load_average": {"start": loadavg[0], "end": loadavg[1]},
        "source": report.source,
        "ranks": [asdict(r) for r in report.ranks],
        "rss_sample": report.rss_sample,
        "samples_encoding": "run-length: [value, repeat count] pairs, one value per broadcast",
        "samples": [
            {
                "rank": v["rank"],
                **{k: run_length(v[k]) for k in ("fds", "rss", "rss_resources")},
            }
            for v in report.raw
        ],
        "corruption_examples": [e for v in report.raw for e in v["corruption_examples"]],
        "failure": report.failure,
    }
    (out / "soak.json").write_text(json.dumps(data, indent=1))
