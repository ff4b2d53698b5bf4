"""Soak: many checksummed broadcasts with resets and re-inits; fd count and RSS per rank.

Judges ONE implementation through the adapter contract (DESIGN.md, "Adapter contract"),
like the conformance suite: ``--impl module:callable`` or ``--impl "exec:<command ...>"``
(default: the reference).  Each rank of a ``run_ranks`` group (one group deadline)
loads the implementation itself, so a mutant that patches the reference at import time
patches only the ranks.

What one run does, per rank, all ranks following the same seeded schedule:

* ``--broadcasts`` calls of a random total size, log-uniform over 1 B ... ``--max-bytes``
  plus some 0 B and some exactly-max calls; with the ``multi_buffer`` capability a call
  carries 1 ... ``--max-buffers`` buffers (random cuts of the total, 0 B ones included),
  laid out in one preallocated arena with random gaps (so alignments vary);
* rank 0 fills each buffer from a seeded random pool at a random offset and stamps its
  first bytes with the call and buffer index; peers zero theirs first.  After the call
  EVERY rank (rank 0 too: a root must not scribble on its own buffer) compares each
  buffer with the bytes it computed independently from the seed: one mismatching buffer
  is one corruption (the first few are described: call, buffer, size, first bad offset);
* every ~``--reset-every`` calls (randomised) all ranks ``reset()``, meet at a sync point
  (so no peer reaches rank 0's old listener), and re-initialize: sometimes on another
  base path, sometimes with a fresh broadcaster object from the factory.  Half of the
  calls right before a reset end in a 0 B buffer: peers then hold every byte while rank 0
  is still in its call, and their reset must not fail it;
* after every call the rank records its open fd count and RSS: over this process and
  the adapter's ``resource_pids()`` (an ``exec:`` driver), minus its ``private_fds()``.

Verdict (a ratio/difference within the run, never a timed assert): zero corruptions;
fd count flat (mean of the last ``--window`` calls minus the first ``--window`` <=
``--fd-tolerance``, default 0); RSS flat (that difference <= ``--rss-tolerance-mib``
and the least-squares RSS slope over the second half, extrapolated over the whole run,
<= the same tolerance: not still climbing).  A second group at ``--rss-tp`` (8) records
each rank's RSS before initialize, after it and after a few verified broadcasts.

Reports: ``<report-dir>/soak.md``, ``soak.json`` and, with matplotlib, ``soak.png``.

    python benchmarks/soak.py [--impl SPEC] [--tp 4] [--broadcasts 10000] [--seed N]
        [--report-dir reports/soak]

The parent imports no torch (a parent that ran a torch op cannot fork safely).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from soak_rank import rss_rank, soak_rank
from soak_report import RankSeries, SoakReport, write_reports
from soak_schedule import MIB, SoakConfig, arena_size, make_schedule

from tpbcast.harness import GroupResult, load_implementation, run_ranks
from tpbcast.harness.adapter import DEFAULT_IMPLEMENTATION

__all__ = [  # what the self-test (tests/test_soak.py) reaches through this module
    "DEFAULT_IMPLEMENTATION",
    "MIB",
    "SoakConfig",
    "SoakReport",
    "arena_size",
    "judge",
    "main",
    "make_schedule",
    "run_soak",
    "series_of",
]


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _slope(values: Sequence[float]) -> float:
    n = len(values)
    if n < 2:
        return 0.0
    mx, my = (n - 1) / 2, _mean(values)
    num = sum((i - mx) * (v - my) for i, v in enumerate(values))
    den = sum((i - mx) ** 2 for i in range(n))
    return num / den


def series_of(config: SoakConfig, value: dict[str, Any]) -> RankSeries:
    """First-vs-last-window means and the trend of one rank's samples, judged."""
    window = config.effective_window()
    fds: list[int] = value["fds"]
    rss = [b / MIB for b in value["rss"]]
    half = rss[len(rss) // 2 :]
    trend = _slope(half) * len(rss)
    fd_first, fd_last = _mean(fds[:window]), _mean(fds[-window:])
    rss_first, rss_last = _mean(rss[:window]), _mean(rss[-window:])
    windows = [_mean(rss[i : i + window]) for i in range(0, len(rss), window)]
    return RankSeries(
        rank=value["rank"],
        fd_first=fd_first,
        fd_last=fd_last,
        rss_first_mib=rss_first,
        rss_last_mib=rss_last,
        rss_trend_mib=trend,
        window_means_mib=windows,
        resources_first_mib=_mean(value.get("rss_resources", [])[:window]) / MIB,
        resources_last_mib=_mean(value.get("rss_resources", [])[-window:]) / MIB,
        fd_flat=fd_last - fd_first <= config.fd_tolerance,
        rss_flat=rss_last - rss_first <= config.rss_tolerance_mib
        and trend <= config.rss_tolerance_mib,
    )


def judge(config: SoakConfig, result: GroupResult) -> SoakReport:
    """Turn the soak group's outcomes into verdicts (zero corruptions, fd and RSS flat)."""
    if not result.ok:
        failed = [f"FAIL: {o.summary()}" for o in result.failures_first() if not o.ok]
        return SoakReport(config, False, ["FAIL: the soak group failed", *failed], result.report())
    values: list[dict[str, Any]] = [dict(o.value) for o in result.outcomes]  # type: ignore[call-overload]
    ranks = [series_of(config, v) for v in values]
    corruptions = sum(v["corruptions"] for v in values)
    payload = values[0]["payload_bytes"]
    totals = {
        "broadcasts": values[0]["broadcasts"],
        "buffers": values[0]["buffers"],
        "payload_bytes": payload,
        "delivered_bytes": payload * (config.world_size - 1),
        "verified_bytes_all_ranks": sum(v["verified_bytes"] for v in values),
        "corruptions": corruptions,
        "resets": values[0]["resets"],
        "fresh_objects": values[0]["fresh_objects"],
        "multi_buffer": values[0]["multi_buffer"],
        "wall_s": max(v["wall_s"] for v in values),
        "group_s": result.duration,
        "window": config.effective_window(),
    }
    verdicts = [
        f"{'PASS' if corruptions == 0 else 'FAIL'}: {corruptions} corrupted buffer(s) "
        f"in {totals['buffers']} buffers x {config.world_size} ranks"
    ]
    for series in ranks:
        verdicts.append(
            f"{'PASS' if series.fd_flat else 'FAIL'}: rank {series.rank} fd count "
            f"{series.fd_first:.2f} -> {series.fd_last:.2f} (tolerance +{config.fd_tolerance:g})"
        )
        verdicts.append(
            f"{'PASS' if series.rss_flat else 'FAIL'}: rank {series.rank} RSS "
            f"{series.rss_first_mib:.2f} -> {series.rss_last_mib:.2f} MiB "
            f"(+{series.rss_last_mib - series.rss_first_mib:.2f}), second-half trend "
            f"{series.rss_trend_mib:+.2f} MiB over the run (tolerance {config.rss_tolerance_mib:g})"
        )
    ok = all(v.startswith("PASS") for v in verdicts)
    return SoakReport(config, ok, verdicts, "", values[0]["impl"], ranks, totals, [], values)


def run_soak(config: SoakConfig) -> SoakReport:
    """Run the soak group (and the RSS sample group, if ``rss_tp``) and judge it."""
    result = run_ranks(
        soak_rank,
        config.world_size,
        timeout=config.group_timeout(),
        args=(config,),
        sigpipe="default",
        label="soak",
    )
    report = judge(config, result)
    if config.rss_tp:
        sample = run_ranks(rss_rank, config.rss_tp, timeout=120.0, args=(config,), label="rss")
        if not sample.ok:
            report.ok = False
            report.verdicts.append(f"FAIL: the TP {config.rss_tp} RSS sample failed")
            report.failure += sample.report()
        else:
            report.rss_sample = [dict(o.value) for o in sample.outcomes]  # type: ignore[call-overload]
            bad = sum(v["corruptions"] for v in report.rss_sample)
            report.verdicts.append(
                f"{'PASS' if bad == 0 else 'FAIL'}: TP {config.rss_tp} sample, {bad} corrupted"
            )
            report.ok = report.ok and bad == 0
    return report


def source_state() -> str:
    """The commit measured and which of reference_impl/ and harness/ differ from it (the
    tree is shared: a soak of a work in progress must say so)."""
    repo = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *args], cwd=repo, capture_output=True, text=True, check=False
            )
        except OSError:
            return None
        return done.stdout if done.returncode == 0 else None

    head = git("rev-parse", "--short", "HEAD")
    dirty = git("status", "--porcelain", "--", "reference_impl", "harness")
    if head is None or dirty is None:
        return f"unknown ({repo} is not a git checkout)"
    changed = [line[3:] for line in dirty.splitlines() if line.strip()]
    state = f"uncommitted changes in {', '.join(changed)}" if changed else "clean"
    return f"commit {head.strip()}, reference_impl/ and harness/ {state}"


def _loadavg() -> str:
    with open("/proc/loadavg") as handle:
        return " ".join(handle.read().split()[:3])


def parse_args(argv: Sequence[str] | None) -> tuple[SoakConfig, Path]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--impl", default=DEFAULT_IMPLEMENTATION, help="module:callable or exec:")
    parser.add_argument("--tp", type=int, default=4)
    parser.add_argument("--broadcasts", type=int, default=10_000)
    parser.add_argument("--max-bytes", type=int, default=8 * MIB)
    parser.add_argument("--max-buffers", type=int, default=4)
    parser.add_argument("--reset-every", type=int, default=500)
    parser.add_argument("--seed", type=int, default=None, help="default: random, printed")
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--fd-tolerance", type=float, default=0.0)
    parser.add_argument("--rss-tolerance-mib", type=float, default=4.0)
    parser.add_argument("--timeout", type=float, default=0.0, help="group deadline, s")
    parser.add_argument("--rss-tp", type=int, default=8, help="0 skips the RSS sample")
    parser.add_argument("--report-dir", type=Path, default=Path("reports/soak"))
    parser.add_argument("--note", default="", help="a line for the report (what was soaked)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    config = SoakConfig(
        impl=args.impl,
        world_size=args.tp,
        broadcasts=args.broadcasts,
        max_bytes=args.max_bytes,
        max_buffers=args.max_buffers,
        reset_every=args.reset_every,
        seed=seed,
        window=args.window,
        fd_tolerance=args.fd_tolerance,
        rss_tolerance_mib=args.rss_tolerance_mib,
        timeout=args.timeout,
        rss_tp=args.rss_tp,
        note=args.note,
    )
    return config, args.report_dir


def main(argv: Sequence[str] | None = None) -> int:
    config, out = parse_args(argv)
    impl = load_implementation(config.impl)  # fail early on a bad spec
    args = list(sys.argv[1:] if argv is None else argv)
    command = shlex.join(["python", "benchmarks/soak.py", *args])
    if "--seed" not in command:
        command += f" --seed {config.seed}"
    start_load = _loadavg()
    print(
        f"soak: {impl.name} {impl.version}, TP {config.world_size}, {config.broadcasts} "
        f"broadcasts, seed {config.seed} (replay: --seed {config.seed}), load {start_load}",
        flush=True,
    )
    report = run_soak(config)
    report.source = source_state()
    loadavg = (start_load, _loadavg())
    write_reports(report, out, loadavg, command)
    for verdict in report.verdicts:
        print(verdict)
    if report.failure:
        print(report.failure, file=sys.stderr)
    t = report.totals
    if t:
        print(
            f"{t['broadcasts']} broadcasts, {t['payload_bytes'] / (1 << 30):.2f} GiB payload, "
            f"{t['resets']} resets, {t['wall_s']:.1f} s, load {loadavg[0]} -> {loadavg[1]}"
        )
    print(f"soak: {'PASS' if report.ok else 'FAIL'}; reports in {out}/")
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
