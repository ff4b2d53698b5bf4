"""What each rank of a soak runs: the calls, the byte checks, the fd and RSS samples.

Targets for ``run_ranks`` (``soak_rank``, ``rss_rank``); each loads the implementation
itself through the adapter contract (DESIGN.md, "Adapter contract"), so an
implementation that patches modules at import time patches only the ranks.
"""

from __future__ import annotations

import array
import os
import random
import time
from dataclasses import dataclass
from typing import Any

from soak_schedule import MIB, Call, SoakConfig, arena_size, make_schedule, stamp

from tpbcast.harness import RankContext, load_implementation

PAGE = os.sysconf("SC_PAGE_SIZE")
CORRUPTION_EXAMPLES = 10  # described per rank; all are counted
DEADLINES = {"connect": 30.0, "init": 30.0, "io": 120.0}  # per call, seconds (``deadlines``)


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
