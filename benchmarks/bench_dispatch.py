"""broadcast_cpu latency: UDS path vs collective fallback (gloo), in one run.

What one sample is (the method of benchmarks/bench_broadcast.py): rank 0 starts the clock, calls
``broadcast_cpu([tensor])``, then reads a 1-byte ack from every peer over a
pipe; a peer acks once its own ``broadcast_cpu`` returned (data visible).  So a
sample is one full dispatch on every rank plus one small ack hop, identical for
both paths.  ``call`` is rank 0's own ``broadcast_cpu`` duration (no ack).

Both paths share the same forked ranks and the same gloo group; the UDS
dispatcher wraps an initialized broadcaster, the fallback dispatcher a fresh,
never-initialized one (exactly the state that selects the fallback).  Each
path is timed in interleaved blocks of 50 calls (alternating which path goes
first), so a change in machine load hits both alike.  Each (size, path) is
preceded by one verified broadcast (peers start from zeros; every rank compares
with rank 0's bytes, drawn from a shared seed).

Usage::

    python benchmarks/bench_dispatch.py [--tp 2 4] [--sizes 64 1024 4096]
        [--iters 1000] [--warmup 100] [--json out.json] [--out reports/bench]

``--out DIR`` also writes ``DIR/dispatch.md``, the section ``bench_summary.py`` puts in
``bench.md``.

The parent imports torch but runs no torch op (forked children would hang in
the OpenMP pool); each rank uses ``torch.set_num_threads(1)``.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DEADLINE = 300.0  # seconds for one TP group, everything included
BLOCK = 50  # iterations per interleaved block


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    index = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]  # nearest rank


def _rank_main(
    *,
    rank: int,
    tp: int,
    workdir: str,
    acks: list[tuple[int, int]],
    sizes: list[int],
    iters: int,
    warmup: int,
) -> dict[str, Any]:
    import torch

    from tpbcast.reference_impl import CpuBroadcastDispatcher, TorchDistributedEngine
    from tpbcast.reference_impl._broadcaster import CpuTpBroadcaster
    from tpbcast.reference_impl._config import BroadcasterConfig

    torch.set_num_threads(1)
    engine = TorchDistributedEngine.create(rank, tp, workdir, timeout=60.0)
    config = BroadcasterConfig(connect_timeout=10.0, init_timeout=10.0, io_timeout=60.0)
    uds = CpuBroadcastDispatcher(CpuTpBroadcaster(config), engine, rank=rank)
    fallback = CpuBroadcastDispatcher(CpuTpBroadcaster(config), engine, rank=rank)
    decision = uds.bootstrap(
        tp_rank=rank,
        tp_size=tp,
        local_world_size=tp,
        base_path=os.path.join(workdir, "g"),
        config=config,
    )
    assert decision.uses_uds, decision.reason
    assert str(fallback.path) == "collective"
    ack_r = [r for r, _ in acks]
    ack_w = acks[rank - 1][1] if rank else -1
    results: dict[str, Any] = {}
    gen = torch.Generator().manual_seed(1234)
    paths = {"uds": uds, "fallback": fallback}

    def run(dispatcher: Any, buf: Any, count: int, sink: dict[str, list[float]] | None) -> None:
        for _ in range(count):
            if rank == 0:
                t0 = time.perf_counter_ns()
                dispatcher.broadcast_cpu([buf])
                t1 = time.perf_counter_ns()
                for fd in ack_r:
                    if os.read(fd, 1) != b"\x01":
                        raise RuntimeError("ack pipe closed: a peer died")
                t2 = time.perf_counter_ns()
                if sink is not None:
                    sink["round_us"].append((t2 - t0) / 1000.0)
                    sink["call_us"].append((t1 - t0) / 1000.0)
            else:
                dispatcher.broadcast_cpu([buf])
                os.write(ack_w, b"\x01")

    for size in sizes:
        bufs = {}
        for label, dispatcher in paths.items():
            buf = torch.zeros(size, dtype=torch.uint8)
            truth = torch.randint(0, 256, (size,), generator=gen, dtype=torch.uint8)
            # verified iteration: rank 0 sends `truth`, peers start from zeros
            if rank == 0:
                buf.copy_(truth)
            path = dispatcher.broadcast_cpu([buf])
            assert str(path) == ("uds" if label == "uds" else "collective"), path
            # same seed on every rank, so every rank knows rank 0's bytes
            assert torch.equal(buf, truth), f"rank {rank}: {label} {size} B wrong bytes"
            bufs[label] = buf
            run(dispatcher, buf, warmup, None)
        sinks: dict[str, dict[str, list[float]]] = {
            label: {"round_us": [], "call_us": []} for label in paths
        }
        # interleaved blocks, alternating which path goes first, so a change in
        # machine load hits both paths alike
        blocks = max(1, iters // BLOCK)
        for block in range(blocks):
            order = list(paths) if block % 2 == 0 else list(reversed(paths))
            for label in order:
                run(paths[label], bufs[label], iters // blocks, sinks[label])
        if rank == 0:
            for label in paths:
                results[f"{label}/{size}"] = sinks[label]
    uds.teardown()
    fallback.teardown()
    return results


def _run_group(tp: int, sizes: list[int], iters: int, warmup: int) -> dict[str, Any]:
    workdir = tempfile.mkdtemp(prefix="tpb", dir="/tmp")
    acks = [os.pipe() for _ in range(tp - 1)]
    pids: list[int] = []
    deadline = time.monotonic() + DEADLINE
    try:
        for rank in range(tp):
            pid = os.fork()
            if pid == 0:  # pragma: no cover - child
                code = 1
                try:
                    out = _rank_main(
                        rank=rank,
                        tp=tp,
                        workdir=workdir,
                        acks=acks,
                        sizes=sizes,
                        iters=iters,
                        warmup=warmup,
                    )
                    with open(os.path.join(workdir, f"r{rank}"), "w") as handle:
                        json.dump(out, handle)
                    code = 0
                except BaseException as exc:
                    print(f"rank {rank}: {type(exc).__name__}: {exc}", file=sys.stderr)
                finally:
                    os._exit(code)
            pids.append(pid)
        for r, w in acks:  # the parent keeps no pipe end open
            os.close(r)
            os.close(w)
        acks = []
        failed = _reap(pids, deadline)
        if failed:
            raise RuntimeError(f"TP {tp}: ranks failed or timed out: {failed}")
        with open(os.path.join(workdir, "r0")) as handle:
            result: dict[str, Any] = json.load(handle)
        return result
    finally:
        for r, w in acks:
            os.close(r)
            os.close(w)
        shutil.rmtree(workdir, ignore_errors=True)


def _reap(pids: list[int], deadline: float) -> list[str]:
    """Wait for every child until the deadline; SIGKILL the rest; report failures."""
    left = set(pids)
    failed: list[str] = []
    while left:
        for pid in list(left):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                left.discard(pid)
                if status != 0:
                    failed.append(f"pid {pid} status {status}")
        if left and time.monotonic() >= deadline:
            for pid in left:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                failed.append(f"pid {pid} killed at the deadline")
            break
        select.select([], [], [], 0.05)
    return failed


def _summary(samples: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(samples),
        "p99": _percentile(samples, 99),
        "n": float(len(samples)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tp", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 1024, 4096])
    parser.add_argument("--iters", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--json", help="also write the summary (and raw samples) here")
    parser.add_argument("--out", type=Path, help="also write the section DIR/dispatch.md")
    args = parser.parse_args(argv)

    import torch  # noqa: F401  - imported once here so forked ranks inherit it (no op runs)

    report: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "iters": args.iters,
        "loadavg_before": os.getloadavg()[0],
        "groups": {},
    }
    print(
        f"broadcast_cpu latency, {args.iters} iterations after {args.warmup} warm-up, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
        "round = dispatch on every rank + 1-byte ack (us)"
    )
    header = (
        f"{'TP':>3} {'size':>6} | {'UDS med':>8} {'UDS p99':>8} | {'fallback med':>12} "
        f"{'fallback p99':>12} | {'ratio med':>9} {'ratio p99':>9} | {'r0 call UDS/fb med':>18}"
    )
    print(header)
    print("-" * len(header))
    for tp in args.tp:
        raw = _run_group(tp, args.sizes, args.iters, args.warmup)
        for size in args.sizes:
            uds = _summary(raw[f"uds/{size}"]["round_us"])
            fb = _summary(raw[f"fallback/{size}"]["round_us"])
            uds_call = statistics.median(raw[f"uds/{size}"]["call_us"])
            fb_call = statistics.median(raw[f"fallback/{size}"]["call_us"])
            print(
                f"{tp:>3} {size:>6} | {uds['median']:>8.1f} {uds['p99']:>8.1f} | "
                f"{fb['median']:>12.1f} {fb['p99']:>12.1f} | "
                f"{fb['median'] / uds['median']:>8.1f}x {fb['p99'] / uds['p99']:>8.1f}x | "
                f"{uds_call:>8.1f} / {fb_call:<8.1f}"
            )
            report["groups"][f"tp{tp}/{size}"] = {
                "uds": uds,
                "fallback": fb,
                "uds_call_median": uds_call,
                "fallback_call_median": fb_call,
            }
    report["loadavg_after"] = os.getloadavg()[0]
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "dispatch.md").write_text(section(report, args.warmup))
    return 0


def section(report: dict[str, Any], warmup: int) -> str:
    """The markdown section for bench.md: what a sample is, the load, one row per cell."""
    method = " ".join((__doc__ or "").split("\n\n")[1].split())
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        "## Dispatch: broadcast_cpu on the UDS path vs the collective fallback (gloo)",
        "",
        f"`benchmarks/bench_dispatch.py`, run {when}, "
        f"{report['cpus']} CPUs, {report['iters']} timed calls per cell after {warmup} warm-up; "
        f"load average (1 min) {report['loadavg_before']:.2f} before, "
        f"{report['loadavg_after']:.2f} after.",
        "",
        method,
        "",
        "| TP | payload | UDS round p50 (us) | p99 | fallback round p50 (us) | p99 "
        "| fallback / UDS p50 | p99 | rank 0's own call p50, UDS / fallback (us) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for cell, row in report["groups"].items():
        tp, size = cell.removeprefix("tp").split("/")
        uds, fb = row["uds"], row["fallback"]
        lines.append(
            f"| {tp} | {size} B | {uds['median']:.1f} | {uds['p99']:.1f} | "
            f"{fb['median']:.1f} | {fb['p99']:.1f} | {fb['median'] / uds['median']:.1f}x | "
            f"{fb['p99'] / uds['p99']:.1f}x | {row['uds_call_median']:.1f} / "
            f"{row['fallback_call_median']:.1f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
