"""30 CPU gloo tests in the style of torch's continuous tests, on three runners.

The same test bodies (:class:`Bodies`, world size 2, one default gloo process group) run
on torch's ``MultiProcContinuousTest`` (spawned workers, group kept per class), on
``tpbcast.fixtures.torch.MultiProcContinuousTest`` (a warm forked group), and on torch's
spawn ``MultiProcessTestCase`` (two fresh interpreters and a new group per test).

    python benchmarks/_continuous_suite.py ours|torch|spawn [--tests a,b] [--fail NAME]
        [--json PATH]

runs one session in this interpreter and records each test's verdict and time and the
session's wall time from interpreter start.  ``--fail NAME`` makes that test fail in
rank 1 (the poison-pill comparison).  The classes live at module level: torch's spawn
runners pickle them by name.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import unittest
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.testing._internal.common_distributed import (
    MultiProcContinuousTest as TorchContinuous,
)
from torch.testing._internal.common_distributed import MultiProcessTestCase

from tpbcast.fixtures.torch import MultiProcContinuousTest as OursContinuous

WORLD = 2
FAIL_ENV = "TPBCAST_BENCH_FAIL"
RUNNERS = ("ours", "torch", "spawn")


def _t(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


class Bodies:
    """The tests; ``self.rank`` is the rank, the default group is gloo over WORLD ranks."""

    rank: int

    def _ready(self) -> None:
        """The spawn runner makes a group per test; the continuous ones have one."""
        if not dist.is_initialized():
            store = dist.FileStore(self.file_name, WORLD)  # type: ignore[attr-defined]
            dist.init_process_group("gloo", store=store, rank=self.rank, world_size=WORLD)
        if os.environ.get(FAIL_ENV) == self._testMethodName and self.rank == 1:  # type: ignore[attr-defined]
            raise AssertionError(f"{self._testMethodName} fails in rank 1 on purpose")  # type: ignore[attr-defined]

    def _check(self, got: torch.Tensor, want: torch.Tensor) -> None:
        torch.testing.assert_close(got, want)

    def _all_reduce(self, op: Any, want: float) -> None:
        self._ready()
        t = _t([float(self.rank + 1)] * 4)
        dist.all_reduce(t, op=op)
        self._check(t, _t([want] * 4))

    def test_all_reduce_sum(self) -> None:
        self._all_reduce(dist.ReduceOp.SUM, 3.0)

    def test_all_reduce_max(self) -> None:
        self._all_reduce(dist.ReduceOp.MAX, 2.0)

    def test_all_reduce_min(self) -> None:
        self._all_reduce(dist.ReduceOp.MIN, 1.0)

    def test_all_reduce_product(self) -> None:
        self._all_reduce(dist.ReduceOp.PRODUCT, 2.0)

    def _broadcast(self, root: int, n: int) -> None:
        self._ready()
        t = torch.arange(n, dtype=torch.float32) if self.rank == root else torch.zeros(n)
        dist.broadcast(t, root)
        self._check(t, torch.arange(n, dtype=torch.float32))

    def test_broadcast_root0(self) -> None:
        self._broadcast(0, 8)

    def test_broadcast_root1(self) -> None:
        self._broadcast(1, 8)

    def test_broadcast_large(self) -> None:
        self._broadcast(0, 1 << 18)

    def test_broadcast_object_list(self) -> None:
        self._ready()
        objs: list[Any] = [{"a": 1}, "two", 3] if self.rank == 0 else [None, None, None]
        dist.broadcast_object_list(objs, 0)
        assert objs == [{"a": 1}, "two", 3]

    def test_all_gather(self) -> None:
        self._ready()
        out = [torch.zeros(2) for _ in range(WORLD)]
        dist.all_gather(out, _t([float(self.rank)] * 2))
        self._check(torch.stack(out), _t([[0.0, 0.0], [1.0, 1.0]]))

    def test_all_gather_into_tensor(self) -> None:
        self._ready()
        out = torch.zeros(WORLD * 3)
        dist.all_gather_into_tensor(out, _t([float(self.rank)] * 3))
        self._check(out, _t([0.0] * 3 + [1.0] * 3))

    def test_all_gather_object(self) -> None:
        self._ready()
        out: list[Any] = [None] * WORLD
        dist.all_gather_object(out, {"rank": self.rank})
        assert out == [{"rank": 0}, {"rank": 1}]

    def test_gather(self) -> None:
        self._ready()
        out = [torch.zeros(1) for _ in range(WORLD)] if self.rank == 0 else None
        dist.gather(_t([float(self.rank + 5)]), out, dst=0)
        if out is not None:
            self._check(torch.cat(out), _t([5.0, 6.0]))

    def test_gather_object(self) -> None:
        self._ready()
        out: list[Any] | None = [None] * WORLD if self.rank == 0 else None
        dist.gather_object(self.rank * 10, out, dst=0)
        if out is not None:
            assert out == [0, 10]

    def test_scatter(self) -> None:
        self._ready()
        parts = [_t([1.0]), _t([2.0])] if self.rank == 0 else None
        got = torch.zeros(1)
        dist.scatter(got, parts, src=0)
        self._check(got, _t([float(self.rank + 1)]))

    def test_scatter_object_list(self) -> None:
        self._ready()
        got: list[Any] = [None]
        dist.scatter_object_list(got, ["a", "b"] if self.rank == 0 else None, src=0)
        assert got == [["a", "b"][self.rank]]

    def _reduce(self, dst: int) -> None:
        self._ready()
        t = _t([float(self.rank + 1)])
        dist.reduce(t, dst=dst)
        if self.rank == dst:
            self._check(t, _t([3.0]))

    def test_reduce_dst0(self) -> None:
        self._reduce(0)

    def test_reduce_dst1(self) -> None:
        self._reduce(1)

    def test_reduce_scatter_tensor(self) -> None:
        self._ready()
        out = torch.zeros(2)
        dist.reduce_scatter_tensor(out, _t([1.0, 1.0, 2.0, 2.0]))
        self._check(out, _t([2.0, 2.0] if self.rank == 0 else [4.0, 4.0]))

    def test_all_to_all_single(self) -> None:
        self._ready()
        out = torch.zeros(2)
        dist.all_to_all_single(out, _t([float(self.rank * 10), float(self.rank * 10 + 1)]))
        self._check(out, _t([float(self.rank), float(10 + self.rank)]))

    def test_barrier(self) -> None:
        self._ready()
        dist.barrier()

    def test_monitored_barrier(self) -> None:
        self._ready()
        dist.monitored_barrier(timeout=timedelta(seconds=30))

    def test_send_recv(self) -> None:
        self._ready()
        if self.rank == 0:
            dist.send(_t([7.0]), dst=1)
        else:
            t = torch.zeros(1)
            dist.recv(t, src=0)
            self._check(t, _t([7.0]))

    def test_isend_irecv(self) -> None:
        self._ready()
        peer = 1 - self.rank
        got = torch.zeros(1)
        reqs = [dist.isend(_t([float(self.rank)]), dst=peer), dist.irecv(got, src=peer)]
        for req in reqs:
            req.wait()
        self._check(got, _t([float(peer)]))

    def test_batch_isend_irecv(self) -> None:
        self._ready()
        peer = 1 - self.rank
        got = torch.zeros(3)
        ops = [
            dist.P2POp(dist.isend, _t([float(self.rank)] * 3), peer),
            dist.P2POp(dist.irecv, got, peer),
        ]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        self._check(got, _t([float(peer)] * 3))

    def test_async_all_reduce(self) -> None:
        self._ready()
        t = torch.ones(16)
        dist.all_reduce(t, async_op=True).wait()
        self._check(t, torch.full((16,), 2.0))

    def test_new_group_all_reduce(self) -> None:
        self._ready()
        group = dist.new_group([0, 1])
        t = torch.ones(2)
        dist.all_reduce(t, group=group)
        self._check(t, torch.full((2,), 2.0))
        dist.destroy_process_group(group)

    def test_get_rank_and_world_size(self) -> None:
        self._ready()
        assert dist.get_rank() == self.rank
        assert dist.get_world_size() == WORLD

    def test_get_backend(self) -> None:
        self._ready()
        assert dist.get_backend() == "gloo"

    def test_all_reduce_int(self) -> None:
        self._ready()
        t = torch.tensor([self.rank + 1], dtype=torch.int64)
        dist.all_reduce(t)
        assert t.item() == 3

    def test_all_reduce_many_small(self) -> None:
        self._ready()
        for i in range(20):
            t = torch.full((4,), float(i))
            dist.all_reduce(t)
            self._check(t, torch.full((4,), 2.0 * i))

    def test_broadcast_uint8(self) -> None:
        self._ready()
        t = (
            torch.arange(256, dtype=torch.uint8)
            if self.rank == 0
            else torch.zeros(256, dtype=torch.uint8)
        )
        dist.broadcast(t, 0)
        assert torch.equal(t, torch.arange(256, dtype=torch.uint8))

    def test_all_gather_uneven_objects(self) -> None:
        self._ready()
        out: list[Any] = [None] * WORLD
        dist.all_gather_object(out, "x" * (self.rank * 100 + 1))
        assert [len(o) for o in out] == [1, 101]


TESTS = tuple(sorted(name for name in vars(Bodies) if name.startswith("test_")))
assert len(TESTS) >= 30, len(TESTS)


class _ContinuousConfig:
    world_size = WORLD

    @classmethod
    def backend_str(cls) -> str:
        return "gloo"

    @classmethod
    def device_type(cls) -> str:
        return "cpu"


class OnTorchContinuous(Bodies, _ContinuousConfig, TorchContinuous):  # type: ignore[misc]
    """torch's continuous base: spawned workers, group per class, poison pill."""


class OnOursContinuous(Bodies, _ContinuousConfig, OursContinuous):  # type: ignore[misc]
    """tpbcast's: a warm forked group per class, each test judged alone."""


class OnTorchSpawn(Bodies, MultiProcessTestCase):  # type: ignore[misc]
    """torch's spawn runner: two interpreters and a new group per test."""

    @property
    def world_size(self) -> int:
        return WORLD

    def setUp(self) -> None:
        super().setUp()
        self._spawn_processes()


CLASSES = {"ours": OnOursContinuous, "torch": OnTorchContinuous, "spawn": OnTorchSpawn}


class _Recorder(unittest.TestResult):
    def __init__(self) -> None:
        super().__init__()
        self.verdicts: dict[str, dict[str, Any]] = {}
        self._started = 0.0

    def startTest(self, test: unittest.TestCase) -> None:  # noqa: N802 - unittest's name
        super().startTest(test)
        self._started = time.perf_counter()

    def _put(self, test: Any, verdict: str, reason: str = "") -> None:
        name = test.id().rsplit(".", 1)[-1]
        took = time.perf_counter() - self._started
        self.verdicts[name] = {"verdict": verdict, "seconds": took, "reason": reason[:300]}

    def addSuccess(self, test: unittest.TestCase) -> None:  # noqa: N802
        super().addSuccess(test)
        self._put(test, "pass")

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:  # noqa: N802
        super().addSkip(test, reason)
        self._put(test, "skip", reason)

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:  # noqa: N802
        super().addFailure(test, err)
        self._put(test, "fail", self.failures[-1][1].strip().splitlines()[-1])

    def addError(self, test: unittest.TestCase, err: Any) -> None:  # noqa: N802
        super().addError(test, err)
        self._put(test, "error", self.errors[-1][1].strip().splitlines()[-1])


def _session_start() -> float:
    """This interpreter's start on the monotonic clock (from /proc: imports count)."""
    ticks = os.sysconf("SC_CLK_TCK")
    with open("/proc/self/stat") as stat:
        started = int(stat.read().rsplit(")", 1)[1].split()[19]) / ticks
    with open("/proc/uptime") as uptime:
        now_since_boot = float(uptime.read().split()[0])
    return time.monotonic() - (now_since_boot - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/_continuous_suite.py")
    parser.add_argument("runner", choices=RUNNERS)
    parser.add_argument("--tests", default="", help="comma-separated names (default: all)")
    parser.add_argument("--fail", default="", help="this test fails in rank 1")
    parser.add_argument("--json", default="")
    opts = parser.parse_args(argv)
    started = _session_start()
    if opts.fail:
        os.environ[FAIL_ENV] = opts.fail  # inherited by forked and spawned ranks
    names = tuple(n for n in opts.tests.split(",") if n) or TESTS
    cls = CLASSES[opts.runner]
    suite = unittest.TestSuite([cls(name) for name in names])
    suite_wrapper = unittest.TestSuite([suite])  # class fixtures run around the class
    recorder = _Recorder()
    suite_wrapper.run(recorder)
    record = {
        "runner": opts.runner,
        "fail": opts.fail,
        "tests": recorder.verdicts,
        "session_seconds": time.monotonic() - started,
        "load_after": os.getloadavg(),
    }
    text = json.dumps(record, indent=1)
    if opts.json:
        with open(opts.json, "w") as out:
            out.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
