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
import array
import importlib
import json
import math
import os
import random
import struct
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tpbcast.harness import GroupResult, RankContext, load_implementation, run_ranks
from tpbcast.harness.adapter import DEFAULT_IMPLEMENTATION

MIB = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")
GAP = 64  # up to this many bytes between two buffers of one call (alignment variety)
CORRUPTION_EXAMPLES = 10  # described per rank; all are counted
PATH_VARIANTS = 3  # re-inits cycle over this many base paths
TRAILING_EMPTY_CHANCE = 0.5  # of the calls right before a reset, with ``multi_buffer``
DEADLINES = {"connect": 30.0, "init": 30.0, "io": 120.0}  # per call, seconds (``deadlines``)


@dataclass(frozen=True)
class SoakConfig:
    """Everything a run depends on; the same config and seed give the same schedule."""

    impl: str = DEFAULT_IMPLEMENTATION
    world_size: int = 4
    broadcasts: int = 10_000
    max_bytes: int = 8 * MIB
    max_buffers: int = 4
    reset_every: int = 500
    fresh_object_chance: float = 0.25
    new_path_chance: float = 0.5
    seed: int = 0
    window: int = 1000
    fd_tolerance: float = 0.0
    rss_tolerance_mib: float = 4.0
    timeout: float = 0.0  # 0: computed from the number of broadcasts
    rss_tp: int = 8  # 0: skip the RSS sample
    note: str = ""  # printed in the report

    def group_timeout(self) -> float:
        """The soak group's one deadline: generous, it only has to catch a hang."""
        return self.timeout or 300.0 + 0.25 * self.broadcasts

    def effective_window(self) -> int:
        return max(1, min(self.window, self.broadcasts // 4))


# -- the schedule -----------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One broadcast: buffer sizes, where each lies in the arena and in the pool."""

    sizes: tuple[int, ...]
    positions: tuple[int, ...]
    offsets: tuple[int, ...]


@dataclass(frozen=True)
class ResetStep:
    """After call ``after``: reset, then re-initialize (fresh object? which base path?)."""

    after: int
    fresh: bool
    path_variant: int


def _total_size(rng: random.Random, max_bytes: int) -> int:
    draw = rng.random()
    if draw < 0.02:
        return 0
    if draw < 0.03:
        return max_bytes
    return min(max_bytes, int(2 ** rng.uniform(0.0, math.log2(max_bytes + 1))))


def make_schedule(
    config: SoakConfig, multi_buffer: bool
) -> tuple[list[Call], list[ResetStep], int]:
    """The calls and resets every rank follows, and the pool size they need (pure).

    The first call after every initialize carries ``max_bytes``: an implementation that
    keeps buffers as large as the largest payload so far (a driver's receive buffer,
    the allocator's high-water mark) reaches that size at once, so the RSS verdict sees
    growth beyond it, not the warm-up.
    """
    rng = random.Random(config.seed)  # noqa: S311 - a replayable schedule, not a secret
    pool_size = 2 * config.max_bytes + 16
    calls: list[Call] = []
    for _ in range(config.broadcasts):
        total = _total_size(rng, config.max_bytes)
        count = rng.randint(1, config.max_buffers) if multi_buffer else 1
        cuts = sorted(rng.randint(0, total) for _ in range(count - 1))
        sizes = tuple(b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True))
        positions, pos = [], 0
        for size in sizes:
            pos += rng.randint(0, GAP - 1)
            positions.append(pos)
            pos += size
        offsets = tuple(rng.randint(0, pool_size - size) for size in sizes)
        calls.append(Call(sizes, tuple(positions), offsets))

    def warm_up(index: int) -> None:
        if index < len(calls):
            offset = rng.randint(0, pool_size - config.max_bytes)
            calls[index] = Call((config.max_bytes,), (0,), (offset,))

    warm_up(0)
    resets: list[ResetStep] = []
    low, high = max(1, config.reset_every // 2), max(1, config.reset_every * 3 // 2)
    after = rng.randint(low, high)
    while after < config.broadcasts - 1:
        fresh = rng.random() < config.fresh_object_chance
        variant = rng.randrange(PATH_VARIANTS) if rng.random() < config.new_path_chance else 0
        resets.append(ResetStep(after, fresh, variant))
        if multi_buffer and rng.random() < TRAILING_EMPTY_CHANCE:
            calls[after] = _with_trailing_empty(calls[after])
        warm_up(after + 1)
        after += rng.randint(low, high)
    return calls, resets, pool_size


def _with_trailing_empty(call: Call) -> Call:
    """The call before a reset ending in a 0 B buffer: peers have every byte before rank 0
    is done with the list, and leave at once; rank 0 must not fail on them (nothing is
    left to send)."""
    end = call.positions[-1] + call.sizes[-1]
    return Call((*call.sizes, 0), (*call.positions, end), (*call.offsets, 0))


def arena_size(config: SoakConfig) -> int:
    return config.max_bytes + (config.max_buffers + 1) * GAP


def stamp(call: int, buffer: int) -> bytes:
    """The first bytes of every buffer: never zero in byte 0, so an unwritten peer buffer
    (zeroed before the call) never passes, and distinct per call, so a stale one neither."""
    return bytes([0xC0 | (buffer & 0x3F)]) + struct.pack("<Q", call)[:7]


# -- footprint: fds and RSS of the implementation -------------------------------------------


def _pids(bcast: object) -> tuple[int, ...]:
    extra = getattr(bcast, "resource_pids", None)
    return (os.getpid(), *(tuple(extra()) if callable(extra) else ()))


def fd_count(bcast: object) -> int:
    """Open fds of this rank and of the adapter's resource pids, minus its plumbing fds."""
    private_of = getattr(bcast, "private_fds", None)
    private = frozenset(private_of()) if callable(private_of) else frozenset()
    count = 0
    for pid in _pids(bcast):
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except FileNotFoundError:  # a resource process that just ended: it holds nothing
            continue
        count += sum(1 for name in names if (pid, int(name)) not in private)
    return count - 1  # listdir's own directory fd


def rss_bytes(bcast: object) -> tuple[int, int]:
    """Resident set (statm, bytes) of this rank and of the adapter's resource pids."""
    own, others = 0, 0
    for pid in _pids(bcast):
        try:
            with open(f"/proc/{pid}/statm", "rb") as handle:
                pages = int(handle.read().split()[1])
        except FileNotFoundError:
            continue
        if pid == os.getpid():
            own = pages * PAGE
        else:
            others += pages * PAGE
    return own, others


def memory_detail(pid: int | None = None) -> dict[str, int]:
    """VmHWM, Rss, Pss and USS (private clean + dirty) of one process, in bytes."""
    where = f"/proc/{pid or 'self'}"
    out: dict[str, int] = {}
    with open(f"{where}/status") as handle:
        for line in handle:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1]) * 1024
    with open(f"{where}/smaps_rollup") as handle:
        for line in handle:
            key, _, rest = line.partition(":")
            if key in ("Pss", "Private_Clean", "Private_Dirty"):
                out[key] = int(rest.split()[0]) * 1024
    out["USS"] = out.pop("Private_Clean", 0) + out.pop("Private_Dirty", 0)
    return out


# -- one rank -------------------------------------------------------------------------------


class SoakStepError(RuntimeError):
    """A call or a reset of the implementation raised: names the rank and the step."""


@dataclass
class _Buffers:
    """The rank's pool (rank 0's bytes, derived from the seed) and its receive arena."""

    pool: memoryview
    arena: bytearray
    view: memoryview
    zeros: memoryview

    @classmethod
    def make(cls, seed: int, pool_size: int, size: int) -> _Buffers:
        rng = random.Random(seed ^ 0x5EED)  # noqa: S311 - payload bytes, not a secret
        pool = memoryview(rng.randbytes(pool_size))
        arena = bytearray(b"\xa5") * size  # written now: its pages count from the start
        return cls(pool, arena, memoryview(arena), memoryview(bytes(size)))

    def fill(self, rank: int, index: int, call: Call) -> list[memoryview]:
        out = []
        for j, (size, pos, off) in enumerate(
            zip(call.sizes, call.positions, call.offsets, strict=True)
        ):
            target = self.view[pos : pos + size]
            if rank == 0:
                target[:] = self.pool[off : off + size]
                head = min(8, size)
                target[:head] = stamp(index, j)[:head]
            else:
                target[:] = self.zeros[:size]
            out.append(target)
        return out

    def check(self, index: int, call: Call) -> list[dict[str, Any]]:
        """Compare every buffer with the expected bytes; describe each bad one."""
        bad = []
        for j, (size, pos, off) in enumerate(
            zip(call.sizes, call.positions, call.offsets, strict=True)
        ):
            head = min(8, size)
            good = self.arena.startswith(stamp(index, j)[:head], pos) and self.arena.startswith(
                self.pool[off + head : off + size], pos + head
            )
            if not good:
                bad.append(self._describe(index, j, size, pos, off))
        return bad

    def _describe(self, index: int, j: int, size: int, pos: int, off: int) -> dict[str, Any]:
        want = bytearray(self.pool[off : off + size])
        head = min(8, size)
        want[:head] = stamp(index, j)[:head]
        got = bytes(self.view[pos : pos + size])
        first = next(k for k in range(size) if got[k] != want[k])
        differ = sum(1 for k in range(size) if got[k] != want[k]) if size <= 1 << 16 else -1
        return {
            "broadcast": index,
            "buffer": j,
            "size": size,
            "first_bad_offset": first,
            "bad_bytes": differ,  # -1: not counted (large buffer)
            "got": got[first : first + 8].hex(),
            "want": bytes(want[first : first + 8]).hex(),
        }


def _fresh(impl_spec: str) -> tuple[Any, Any]:
    impl = load_implementation(impl_spec)
    bcast = impl.create()
    if impl.supports("deadlines"):
        bcast.set_deadlines(**DEADLINES)  # type: ignore[attr-defined]
    return impl, bcast


def soak_rank(ctx: RankContext, config: SoakConfig) -> dict[str, Any]:
    """One rank of the soak: the schedule, the checks, the fd/RSS samples."""
    impl, bcast = _fresh(config.impl)
    multi = impl.supports("multi_buffer")
    calls, resets, pool_size = make_schedule(config, multi)
    buffers = _Buffers.make(config.seed, pool_size, arena_size(config))
    # preallocated: samples appended to a growing array would show up as RSS growth
    fds = array.array("q", bytes(8 * len(calls)))
    rss = array.array("q", bytes(8 * len(calls)))
    rss_resources = array.array("q", bytes(8 * len(calls)))  # part of rss: resource pids
    corruptions: list[dict[str, Any]] = []
    corrupted = 0
    fresh_objects = 0
    by_index = {step.after: step for step in resets}
    verified = 0

    def base(variant: int) -> str:
        return ctx.base_path if variant == 0 else f"{ctx.base_path}{variant}"

    start = time.monotonic()
    bcast.initialize(ctx.rank, ctx.world_size, base(0))
    for index, call in enumerate(calls):
        views = buffers.fill(ctx.rank, index, call)
        try:
            bcast.broadcast(views if multi else views[0])
        except Exception as exc:
            raise SoakStepError(
                f"rank {ctx.rank}: broadcast {index} of {list(call.sizes)} B raised "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        bad = buffers.check(index, call)
        if bad:
            corrupted += len(bad)
            corruptions.extend(bad[: CORRUPTION_EXAMPLES - len(corruptions)])
        verified += sum(call.sizes)
        fds[index] = fd_count(bcast)
        own, others = rss_bytes(bcast)
        rss[index] = own + others
        rss_resources[index] = others
        step = by_index.get(index)
        if step is None:
            continue
        try:
            bcast.reset()
            if step.fresh:
                fresh_objects += 1
                impl, bcast = _fresh(config.impl)
            ctx.sync(f"reset-{index}")
            bcast.initialize(ctx.rank, ctx.world_size, base(step.path_variant))
        except Exception as exc:
            raise SoakStepError(
                f"rank {ctx.rank}: reset/re-init after broadcast {index} "
                f"(fresh object: {step.fresh}, path {base(step.path_variant)!r}) raised "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    wall = time.monotonic() - start
    bcast.reset()
    return {
        "rank": ctx.rank,
        "impl": f"{impl.name} {impl.version}",
        "multi_buffer": multi,
        "broadcasts": len(calls),
        "buffers": sum(len(c.sizes) for c in calls),
        "payload_bytes": sum(sum(c.sizes) for c in calls),
        "verified_bytes": verified,
        "corruptions": corrupted,
        "corruption_examples": corruptions,
        "resets": len(resets),
        "fresh_objects": fresh_objects,
        "wall_s": wall,
        "fds": fds.tolist(),
        "rss": rss.tolist(),
        "rss_resources": rss_resources.tolist(),
        "reset_points": [s.after for s in resets],
    }


def rss_rank(ctx: RankContext, config: SoakConfig) -> dict[str, Any]:
    """RSS of one rank before initialize, after it and after a few verified broadcasts."""
    impl, bcast = _fresh(config.impl)
    multi = impl.supports("multi_buffer")
    sizes = sorted(s for s in {0, 1, 4096, 65536, MIB, config.max_bytes} if s <= config.max_bytes)
    pool_size = 2 * config.max_bytes + 16
    buffers = _Buffers.make(config.seed, pool_size, arena_size(config))
    before = memory_detail()
    bcast.initialize(ctx.rank, ctx.world_size, ctx.base_path)
    after_init = memory_detail()
    bad = 0
    for index, size in enumerate(sizes):
        call = Call((size,), (0,), ((index * 7919) % (pool_size - size + 1),))
        views = buffers.fill(ctx.rank, index, call)
        bcast.broadcast(views if multi else views[0])
        bad += len(buffers.check(index, call))
    after = memory_detail()
    extra = [memory_detail(pid) for pid in _pids(bcast)[1:]]
    bcast.reset()
    return {
        "rank": ctx.rank,
        "sizes": sizes,
        "corruptions": bad,
        "before_init": before,
        "after_init": after_init,
        "after_broadcasts": after,
        "resource_processes": extra,
    }


# -- the run and its verdict -----------------------------------------------------------------


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


# -- reports ---------------------------------------------------------------------------------


def _mib(value: int) -> str:
    return f"{value / MIB:.1f}"


def render_markdown(report: SoakReport, loadavg: tuple[str, str], command: str) -> str:
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


def write_reports(report: SoakReport, out: Path, loadavg: tuple[str, str], command: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "soak.md").write_text(render_markdown(report, loadavg, command))
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
        "samples": [{k: v[k] for k in ("rank", "fds", "rss", "rss_resources")} for v in report.raw],
        "corruption_examples": [e for v in report.raw for e in v["corruption_examples"]],
        "failure": report.failure,
    }
    (out / "soak.json").write_text(json.dumps(data, indent=1))
    if report.raw and not plot(report, out / "soak.png"):
        print("matplotlib not installed: no soak.png", file=sys.stderr)


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
    command = " ".join(["python benchmarks/soak.py", *(sys.argv[1:] if argv is None else argv)])
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
