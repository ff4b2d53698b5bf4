"""Run the slice on one runner in this process and record each test's verdict and time.

``python -m torchsuite.verdicts harness|spawn [--tests a,b] [--json PATH]``: one session
(a fresh interpreter: what a user's test run pays, imports included), the verdict of each
test (``pass``, ``skip``, ``fail``, ``error``), its wall time, the session's wall time
from interpreter start, and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import unittest
from dataclasses import asdict, dataclass
from typing import Any

from ._slice import SLICE

RUNNERS = ("harness", "warm", "spawn")


@dataclass(frozen=True)
class Verdict:
    """One test's outcome on one runner."""

    verdict: str
    seconds: float
    reason: str = ""


class _Recorder(unittest.TestResult):
    """A unittest result that keeps a verdict and a wall time per test method."""

    def __init__(self) -> None:
        super().__init__()
        self.verdicts: dict[str, Verdict] = {}
        self._started = 0.0

    def startTest(self, test: unittest.TestCase) -> None:  # noqa: N802 - unittest's name
        super().startTest(test)
        self._started = time.perf_counter()

    def _put(self, test: Any, verdict: str, reason: str = "") -> None:
        name = test.id().rsplit(".", 1)[-1]
        self.verdicts[name] = Verdict(verdict, time.perf_counter() - self._started, reason)

    def addSuccess(self, test: unittest.TestCase) -> None:  # noqa: N802
        super().addSuccess(test)
        self._put(test, "pass")

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:  # noqa: N802
        super().addSkip(test, reason)
        self._put(test, "skip", reason)

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:  # noqa: N802
        super().addFailure(test, err)
        self._put(test, "fail", self.failures[-1][1].splitlines()[-1])

    def addError(self, test: unittest.TestCase, err: Any) -> None:  # noqa: N802
        super().addError(test, err)
        self._put(test, "error", self.errors[-1][1].splitlines()[-1])


def run_slice(runner: str, names: tuple[str, ...] = SLICE) -> dict[str, Verdict]:
    """Run ``names`` of the slice on ``runner`` (``harness``, ``warm`` or ``spawn``) here."""
    from . import cases

    cls = {
        "harness": cases.TestDistBackendOnHarness,
        "warm": cases.TestDistBackendOnWarmGroup,
        "spawn": cases.TestDistBackendWithSpawn,
    }[runner]
    # Nested: unittest runs setUpClass/tearDownClass around the class (the warm group's
    # life) only for tests inside a suite.
    suite = unittest.TestSuite([unittest.TestSuite(cls(name) for name in names)])
    recorder = _Recorder()
    suite.run(recorder)
    return recorder.verdicts


def _session_start() -> float:
    """This interpreter's start on the monotonic clock (from /proc: imports count)."""
    ticks = os.sysconf("SC_CLK_TCK")
    with open("/proc/self/stat") as stat:
        started = int(stat.read().rsplit(")", 1)[1].split()[19]) / ticks
    with open("/proc/uptime") as uptime:
        now_since_boot = float(uptime.read().split()[0])
    return time.monotonic() - (now_since_boot - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchsuite.verdicts")
    parser.add_argument("runner", choices=RUNNERS)
    parser.add_argument("--tests", default="", help="comma-separated names (default: SLICE)")
    parser.add_argument("--json", default="", help="write the record here")
    opts = parser.parse_args(argv)
    started = _session_start()
    load_before = os.getloadavg()
    names = tuple(n for n in opts.tests.split(",") if n) or SLICE
    verdicts = run_slice(opts.runner, names)
    record = {
        "runner": opts.runner,
        "tests": {name: asdict(v) for name, v in verdicts.items()},
        "session_seconds": time.monotonic() - started,
        "load_before": load_before,
        "load_after": os.getloadavg(),
    }
    text = json.dumps(record, indent=1)
    if opts.json:
        with open(opts.json, "w") as out:
            out.write(text)
    else:
        print(text)
    bad = [n for n, v in verdicts.items() if v.verdict not in ("pass", "skip")]
    print(f"{opts.runner}: {len(verdicts)} tests, {len(bad)} not pass/skip", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
