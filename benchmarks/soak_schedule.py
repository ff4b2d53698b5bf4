"""The soak's seeded schedule: which buffers each call carries and when the ranks reset.

A pure function of :class:`SoakConfig` (and of whether the implementation takes several
buffers per call), so every rank computes the same schedule and every rank can derive
rank 0's bytes on its own (see ``benchmarks/soak.py``).
"""

from __future__ import annotations

import math
import random
import struct
from dataclasses import dataclass

from tpbcast.harness.adapter import DEFAULT_IMPLEMENTATION

MIB = 1 << 20
GAP = 64  # up to this many bytes between two buffers of one call (alignment variety)
PATH_VARIANTS = 3  # re-inits cycle over this many base paths
TRAILING_EMPTY_CHANCE = 0.5  # of the calls right before a reset, with ``multi_buffer``


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
