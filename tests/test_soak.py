"""CI's short soak (``benchmarks/soak.py``, ``nox -s soak`` runs the long one).

* The reference survives 200 checksummed broadcasts at TP 3 with resets, re-inits on
  other base paths and fresh objects: zero corruptions, fd count and RSS flat.
* Each check fails its smallest wrong implementation, loaded through the adapter contract
  in the ranks only (a mutant patches the reference at import time):
  ``mutants.m_reset_leaks_fds`` (rank 0 leaks its listener on every reset) fails the fd
  check of rank 0 alone; a peer that flips one byte of some payloads fails the
  corruption check; an implementation that hoards 64 KiB per call fails the RSS check.
* The schedule is a pure function of the seed and covers 0 B, the maximum and 0 B
  buffers inside a list; the flatness judgement on synthetic samples.
"""

from __future__ import annotations

import mmap
import sys
from pathlib import Path
from typing import Any

from mutants._base import Delegating

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # the soak is a script with sibling modules
import soak  # noqa: E402 - needs the path above

SHORT = {
    "world_size": 3,
    "broadcasts": 200,
    "max_bytes": 256 << 10,
    "reset_every": 40,
    "window": 50,
    "seed": 20261201,
    "rss_tp": 0,
    "timeout": 60.0,
    "fresh_object_chance": 0.5,
}


def _short(impl: str = soak.DEFAULT_IMPLEMENTATION, **changes: Any) -> Any:
    return soak.SoakConfig(impl=impl, **{**SHORT, **changes})


def _ran(config: Any) -> Any:
    """The soak's report, which must have got through every call (judged, not crashed)."""
    report = soak.run_soak(config)
    assert report.totals, "\n".join(report.verdicts) + "\n" + report.failure
    return report


# -- mutants defined here (loaded by the ranks as f"{__name__}:...") -------------------------


class FlipsAByte(Delegating):
    """Every 17th call, a peer's last buffer has its middle byte inverted after receiving."""

    calls = 0
    rank = 0

    def initialize(self, rank: int, world_size: int, base_path: str) -> Any:
        FlipsAByte.rank = rank
        return self.inner.initialize(rank, world_size, base_path)

    def broadcast(self, buffers: Any, root: int = 0) -> Any:
        out = self.inner.broadcast(buffers, root)
        FlipsAByte.calls += 1
        last = memoryview((buffers if isinstance(buffers, list) else [buffers])[-1]).cast("B")
        if FlipsAByte.rank != 0 and FlipsAByte.calls % 17 == 0 and len(last):
            last[len(last) // 2] ^= 0xFF
        return out


class HoardsMemory(Delegating):
    """Keeps 64 KiB (written, so resident) for every call: a per-call leak.

    Each hoard is its own anonymous mapping, so every call adds fresh resident pages: a
    heap allocation can be carved from memory the soak's freed payload buffers left
    resident, and then RSS need not grow (the test once saw every rank flat in a
    clean-clone run; heap reuse is the likely cause, not a proven one).
    """

    hoard: list[mmap.mmap] = []  # noqa: RUF012 - the defect is exactly this shared list

    def broadcast(self, buffers: Any, root: int = 0) -> Any:
        block = mmap.mmap(-1, 64 << 10)
        block.write(b"\x01" * len(block))
        HoardsMemory.hoard.append(block)
        return self.inner.broadcast(buffers, root)


def make_flips_a_byte() -> FlipsAByte:
    return FlipsAByte()


def make_hoards_memory() -> HoardsMemory:
    return HoardsMemory()


# -- the short soak ----------------------------------------------------------------------------


def test_the_reference_passes_a_short_soak_with_resets() -> None:
    report = _ran(_short())
    assert report.ok, "\n".join(report.verdicts)
    totals = report.totals
    assert totals["broadcasts"] == 200 and totals["corruptions"] == 0
    # the schedule really exercised what the soak claims: resets, fresh objects, lists
    assert totals["resets"] >= 3 and totals["fresh_objects"] >= 1, totals
    assert totals["multi_buffer"] and totals["buffers"] > totals["broadcasts"]
    assert totals["verified_bytes_all_ranks"] == totals["payload_bytes"] * 3
    assert [len(v["fds"]) for v in report.raw] == [200, 200, 200]
    assert all(r.fd_first == r.fd_last for r in report.ranks)


def test_an_fd_leak_per_reset_fails_the_fd_check_of_that_rank() -> None:
    report = _ran(_short("mutants.m_reset_leaks_fds:make"))
    assert not report.ok
    assert report.totals["corruptions"] == 0  # the leak is all that is wrong
    leaked = {r.rank: r.fd_last - r.fd_first for r in report.ranks}
    assert leaked[0] >= 2 and leaked[1] == leaked[2] == 0, leaked
    failed = [v for v in report.verdicts if v.startswith("FAIL")]
    assert failed == [v for v in report.verdicts if v.startswith("FAIL: rank 0 fd count")]


def test_a_flipped_byte_fails_the_corruption_check() -> None:
    report = _ran(_short(f"{__name__}:make_flips_a_byte"))
    assert not report.ok
    # exactly the calls the mutant touched: every 17th whose last buffer is not empty, on
    # both peers
    calls, _, _ = soak.make_schedule(_short(), multi_buffer=True)
    flipped = [i for i, c in enumerate(calls) if (i + 1) % 17 == 0 and c.sizes[-1]]
    assert report.totals["corruptions"] == 2 * len(flipped) > 0
    assert report.verdicts[0].startswith("FAIL: ")
    for peer in (1, 2):
        examples = report.raw[peer]["corruption_examples"]
        assert [e["broadcast"] for e in examples] == flipped[: len(examples)]
        for example, index in zip(examples, flipped, strict=False):
            assert example["buffer"] == len(calls[index].sizes) - 1
            assert example["first_bad_offset"] == example["size"] // 2
            assert example["bad_bytes"] in (1, -1) and example["got"] != example["want"]
    assert report.raw[0]["corruptions"] == 0  # rank 0's own buffers were left alone
    assert all(r.fd_flat and r.rss_flat for r in report.ranks)


def test_memory_hoarded_per_call_fails_the_rss_check() -> None:
    report = _ran(_short(f"{__name__}:make_hoards_memory"))
    assert not report.ok and report.totals["corruptions"] == 0
    assert all(not r.rss_flat and r.fd_flat for r in report.ranks), report.verdicts
    growth = [r.rss_last_mib - r.rss_first_mib for r in report.ranks]
    assert all(g > 6.0 for g in growth), growth  # 150 calls x 64 KiB between the windows


def test_the_rss_sample_reports_every_rank() -> None:
    report = soak.run_soak(_short(broadcasts=8, window=2, reset_every=1000, rss_tp=4))
    assert report.ok, "\n".join(report.verdicts) + report.failure
    assert [v["rank"] for v in report.rss_sample] == [0, 1, 2, 3]
    for value in report.rss_sample:
        assert value["corruptions"] == 0
        assert value["after_broadcasts"]["VmRSS"] > 0 and value["after_broadcasts"]["USS"] > 0


# -- pure parts ------------------------------------------------------------------------------


def test_samples_are_stored_run_length_encoded() -> None:
    from soak_report import run_length

    assert run_length([]) == []
    assert run_length([5, 5, 5, 7, 5]) == [[5, 3], [7, 1], [5, 1]]


def test_the_schedule_is_a_pure_function_of_the_seed_and_covers_the_edges() -> None:
    config = soak.SoakConfig(
        broadcasts=3000, max_bytes=1 << 20, seed=7, fresh_object_chance=0.5, new_path_chance=0.9
    )
    calls, resets, pool = soak.make_schedule(config, multi_buffer=True)
    assert (calls, resets) == soak.make_schedule(config, multi_buffer=True)[:2]
    assert soak.make_schedule(soak.SoakConfig(seed=8, broadcasts=50), True)[0] != calls[:50]
    totals = [sum(c.sizes) for c in calls]
    assert min(totals) == 0 and max(totals) == 1 << 20
    assert any(t < 64 for t in totals) and any(t > 512 << 10 for t in totals)
    assert any(0 in c.sizes and len(c.sizes) > 1 for c in calls)  # 0 B buffer in a list
    assert {1, 2, 3, 4} <= {len(c.sizes) for c in calls} <= {1, 2, 3, 4, 5}
    assert 3 <= len(resets) <= 12 and any(r.fresh for r in resets)
    # the first call after every initialize is a max-size warm-up (high-water marks)
    assert calls[0].sizes == (1 << 20,)
    assert all(calls[r.after + 1].sizes[-1:] in ((1 << 20,), (0,)) for r in resets)
    before_reset = [calls[r.after].sizes for r in resets]
    assert any(s[-1] == 0 for s in before_reset), before_reset
    assert all(len(c.sizes) <= 4 or c.sizes[-1] == 0 for c in calls)
    assert any(r.path_variant for r in resets)
    arena = soak.arena_size(config)
    for call in calls:
        ends = [p + s for p, s in zip(call.positions, call.sizes, strict=True)]
        assert ends[-1] <= arena and all(
            o + s <= pool for o, s in zip(call.offsets, call.sizes, strict=True)
        )
        assert all(e <= p for e, p in zip(ends, call.positions[1:], strict=False))  # no overlap
    single, _, _ = soak.make_schedule(config, multi_buffer=False)
    assert all(len(c.sizes) == 1 for c in single)


def test_flatness_is_judged_from_first_and_last_windows_and_the_trend() -> None:
    config = soak.SoakConfig(broadcasts=1000, window=100, rss_tolerance_mib=4.0)
    mib = soak.MIB

    def judged(fds: list[int], rss: list[float]) -> Any:
        return soak.series_of(config, {"rank": 0, "fds": fds, "rss": [int(r * mib) for r in rss]})

    flat = judged([20] * 1000, [50.0] * 1000)
    assert flat.fd_flat and flat.rss_flat
    # a step early (warm-up) inside the tolerance is flat; one fd more at the end is not
    warm = judged([20] * 999 + [21], [48.0] * 50 + [50.0] * 950)
    assert warm.rss_flat and not warm.fd_flat
    # slow growth: 3.96 MiB first -> last window (inside), but climbing at 4.4 MiB/run
    climbing = judged([20] * 1000, [50.0 + 4.4 * i / 1000 for i in range(1000)])
    assert climbing.rss_last_mib - climbing.rss_first_mib < 4.0
    assert not climbing.rss_flat and climbing.rss_trend_mib > 4.0
