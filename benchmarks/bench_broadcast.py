"""Broadcast latency and throughput vs payload size: the reference against its baselines.

One run, methods interleaved: for every TP group (2, 4, 8 forked ranks through the
harness's ``run_ranks``) and every payload size, each method first gets one verified round
(peers start from zeros and compare with rank 0's bytes) and a warm-up, then the timed
rounds are cut into blocks and each block runs every method in turn, the order rotating
from block to block, so a change in machine load hits all methods alike.

One round (the same for every method): rank 0 starts the clock, broadcasts, then reads a
1-byte ack from every peer over a pipe (the same pipes for all methods); a peer acks once
its broadcast returned, i.e. the bytes are in its own buffer.  ``memcpy`` is one in-process
copy on rank 0 (no IPC, no ack).  Methods: see ``_bcast_methods.py``.

Pinning (``--pin``): ``split`` puts rank r on CPU r mod ncpu (the default), ``same`` puts
every rank on the first CPU, ``none`` leaves placement to the scheduler.  At TP 4 and 8 on
a 2-core machine every method is oversubscribed.

Output: ``reports/bench/broadcast.md`` (tables, goal ratios, load average at start and end),
``broadcast.json`` (summaries) and ``broadcast_*.png``; ``--quick`` for a smoke run.

    python benchmarks/bench_broadcast.py [--tp 2 4 8] [--sizes 64 4096 ...] [--quick]
        [--scale 1.0] [--pin split] [--impl module:factory] [--out reports/bench]
    python benchmarks/bench_broadcast.py --report [--out reports/bench]   # re-render only
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _bcast_inprocess as inprocess
import _bcast_methods as methods
import _bcast_report as report

KIB, MIB = 1 << 10, 1 << 20
SIZES = [64, 256, KIB, 4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB]
QUICK_SIZES = [64, 4 * KIB, 256 * KIB, 4 * MIB]
DEFAULT_IMPL = "tpbcast.reference_impl.conformance_adapter:make"


def counts(size: int, scale: float) -> tuple[int, int, int]:
    """(timed rounds, warm-up rounds, blocks) for one size: fewer rounds for big sizes."""
    if size <= 4 * KIB:
        rounds, warm, blocks = 2000, 100, 20
    elif size <= 64 * KIB:
        rounds, warm, blocks = 1000, 50, 20
    elif size <= 256 * KIB:
        rounds, warm, blocks = 400, 20, 10
    elif size <= MIB:
        rounds, warm, blocks = 150, 10, 10
    elif size <= 4 * MIB:
        rounds, warm, blocks = 60, 5, 10
    elif size <= 16 * MIB:
        rounds, warm, blocks = 20, 2, 5
    else:
        rounds, warm, blocks = 8, 1, 4
    rounds = max(blocks, round(rounds * scale))
    return rounds - rounds % blocks, max(1, round(warm * scale)), blocks


def _pin(rank: int, mode: str, cpus: list[int]) -> None:
    if mode == "split":
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    elif mode == "same":
        os.sched_setaffinity(0, {cpus[0]})


def _round_root(method: methods.Method, ack_r: list[int]) -> int:
    t0 = time.perf_counter_ns()
    method.root()
    if method.acked:
        for fd in ack_r:
            if os.read(fd, 1) != b"\x01":
                raise ConnectionError(f"ack pipe {fd} closed: a peer died")
    return time.perf_counter_ns() - t0


def _verify(method: methods.Method, n: int, rank: int, chans: methods.Channels, recv: Any) -> None:
    """One untimed round that must deliver rank 0's exact bytes (peers start from zeros)."""
    if rank == 0:
        if method.name == "memcpy":
            recv[:n] = 0
        _round_root(method, [r for r, _ in chans.ack])
        if method.name == "memcpy" and not (recv[:n] == chans.payload[:n]).all():
            raise AssertionError(f"memcpy {n} B: wrong bytes")
        return
    if method.name == "memcpy":
        return
    recv[:n] = 0
    method.peer()
    ok = bool((recv[:n] == chans.payload[:n]).all())
    os.write(chans.ack[rank - 1][1], b"\x01")
    if not ok:
        raise AssertionError(f"rank {rank}: {method.name} {n} B: wrong bytes received")


def rank_main(ctx: Any, chans: methods.Channels, opts: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    rank = ctx.rank
    _pin(rank, opts["pin"], opts["cpus"])
    recv = np.zeros(chans.max_size, dtype=np.uint8)  # pre-touched
    recv[:] = 1
    made = [methods.make(name, ctx, chans, recv, impl=opts["impl"]) for name in opts["methods"]]
    ack_r = [r for r, _ in chans.ack]
    ack_w = chans.ack[rank - 1][1] if rank else -1
    samples: dict[str, list[int]] = {}
    blocks_of: dict[str, list[int]] = {}
    for size in opts["sizes"]:
        rounds, warm, blocks = counts(size, opts["scale"])
        for method in made:
            method.prepare(size)
            _verify(method, size, rank, chans, recv)
            _run(method, warm, rank=rank, ack_r=ack_r, ack_w=ack_w, sink=None)
        per_block = rounds // blocks
        for block in range(blocks):
            shift = block % len(made)
            for method in made[shift:] + made[:shift]:
                key = f"{method.name}/{size}"
                sink = samples.setdefault(key, [])
                _run(method, per_block, rank=rank, ack_r=ack_r, ack_w=ack_w, sink=sink)
                blocks_of.setdefault(key, []).append(len(sink))
    for method in made:
        method.close()
    if rank:
        return {}
    return {"samples": samples, "block_ends": blocks_of}


def _run(
    method: methods.Method,
    count: int,
    *,
    rank: int,
    ack_r: list[int],
    ack_w: int,
    sink: list[int] | None,
) -> None:
    if rank == 0:
        for _ in range(count):
            elapsed = _round_root(method, ack_r)
            if sink is not None:
                sink.append(elapsed)
    elif method.acked:
        for _ in range(count):
            method.peer()
            os.write(ack_w, b"\x01")


def _inprocess_split(impl: str) -> dict[str, Any]:
    """``{"inprocess": ...}`` (see ``_bcast_inprocess.py``), or ``{"inprocess_error": why}``
    for an implementation that cannot run two ranks in one thread (an ``exec:`` driver):
    the sweep before it is kept either way."""
    from tpbcast.harness import load_implementation

    try:
        return {
            "inprocess": inprocess.measure(
                load_implementation(impl), io_deadline=methods.IO_DEADLINE
            )
        }
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"
        print(f"in-process split not measured: {why}", file=sys.stderr)
        return {"inprocess_error": why}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tp", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--sizes", type=int, nargs="+")
    parser.add_argument("--methods", nargs="+", default=list(methods.ALL))
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the round counts")
    parser.add_argument("--quick", action="store_true", help="4 sizes, 1/10 of the rounds")
    parser.add_argument("--pin", choices=("split", "same", "none"), default="split")
    parser.add_argument("--impl", default=DEFAULT_IMPL)
    parser.add_argument("--out", default="reports/bench")
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument(
        "--report",
        action="store_true",
        help="only re-render the report from --out's json (every other flag is ignored)",
    )
    args = parser.parse_args(argv)
    if args.report:  # e.g. after a change to the report's text: same numbers, new page
        out = Path(args.out)
        report.write(json.loads((out / "broadcast.json").read_text()), out)
        print(f"re-rendered {out}/broadcast.md and broadcast_*.png from broadcast.json")
        return 0
    sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    scale = args.scale * (0.1 if args.quick else 1.0)

    import torch  # noqa: F401 - imported (never used) here so the forked ranks inherit it

    from tpbcast.harness import run_ranks

    cpus = sorted(os.sched_getaffinity(0))
    opts = {
        "pin": args.pin,
        "cpus": cpus,
        "impl": args.impl,
        "methods": args.methods,
        "sizes": sizes,
        "scale": scale,
    }
    run: dict[str, Any] = {
        "loadavg_start": Path("/proc/loadavg").read_text().split()[:3],
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "cpus": len(cpus),
        "pin": args.pin,
        "impl": args.impl,
        "sizes": sizes,
        "methods": args.methods,
        "counts": {str(s): counts(s, scale) for s in sizes},
        "groups": {},
    }
    print(f"bench_broadcast: TP {args.tp}, {len(sizes)} sizes, load {run['loadavg_start']}")
    t_start = time.monotonic()
    for tp in args.tp:
        chans = methods.Channels.create(tp, max(sizes), args.seed)
        try:
            t0 = time.monotonic()
            result = run_ranks(rank_main, tp, timeout=900.0, args=(chans, opts), label="bench")
        finally:
            chans.close()
        if not result.ok:
            print(result.report(), file=sys.stderr)
            return 1
        raw = result.outcomes[0].value
        run["groups"][str(tp)] = report.summarise(raw, sizes, args.methods)
        print(f"  TP {tp}: {time.monotonic() - t0:.1f} s")
    if "reference" in args.methods:  # where its extra time goes, without any IPC
        run.update(_inprocess_split(args.impl))
    run["wall_s"] = time.monotonic() - t_start
    run["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report.write(run, out)
    print(report.goals_text(run))
    print(f"wrote {out}/broadcast.md, broadcast.json, broadcast_*.png in {run['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
