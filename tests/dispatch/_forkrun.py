"""Fork ranks, give them one deadline, reap every one of them.

A stand-in for the harness's ``run_ranks`` until it lands.  Rules it enforces:

- the parent may have imported torch but never runs a torch op (baseline_perf.md
  §7: a parallel op in the parent hangs forked children); every child calls
  ``torch.set_num_threads(1)`` before its target runs;
- each rank writes its pickled result to ``<workdir>/result.<rank>`` (a file,
  so a big result can never block a child on a full pipe) and its fd-level
  stdout/stderr to ``<workdir>/output.<rank>``;
- ONE deadline for the group; ``faulthandler`` dumps a late child's stacks into
  its output just before the deadline; anything still alive at the deadline is
  SIGKILLed; once a rank fails the others get ``fail_grace`` seconds;
- every child is reaped, and the private workdir is removed afterwards.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import pickle
import select
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

POLL_INTERVAL = 0.01


@dataclass(frozen=True)
class RankContext:
    """What a rank's target gets: its rank, the group size and a private short dir."""

    rank: int
    world_size: int
    workdir: str

    @property
    def base_path(self) -> str:
        """UDS base path in the private (0700) workdir: short, unique per group."""
        return os.path.join(self.workdir, "g")


@dataclass(frozen=True)
class RankResult:
    rank: int
    pid: int
    status: str  # ok | raised | exited | signaled | timeout
    value: Any = None
    exc_type: str = ""
    message: str = ""
    traceback: str = ""
    exit_code: int | None = None
    signal: int | None = None
    output: str = ""

    def describe(self) -> str:
        head = f"--- rank {self.rank} (pid {self.pid}): {self.status}"
        if self.exit_code is not None:
            head += f", exit {self.exit_code}"
        if self.signal is not None:
            head += f", signal {signal.Signals(self.signal).name}"
        parts = [head]
        if self.exc_type:
            parts.append(f"{self.exc_type}: {self.message}\n{self.traceback}")
        if self.output.strip():
            parts.append("output:\n" + self.output[-4000:])
        return "\n".join(parts)


class GroupFailureError(AssertionError):
    """At least one rank did not return normally; the message holds every rank's report."""


def _child_main(target: Callable[..., Any], ctx: RankContext, args: tuple[Any, ...], left: float):
    out = os.open(os.path.join(ctx.workdir, f"output.{ctx.rank}"), os.O_WRONLY | os.O_CREAT, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    faulthandler.enable(file=sys.stderr)
    faulthandler.dump_traceback_later(max(0.5, left - 1.0), exit=True)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    try:
        payload = pickle.dumps(("ok", target(ctx, *args)))
    except BaseException as exc:  # everything goes back to the parent
        payload = pickle.dumps(("raised", type(exc).__name__, str(exc), traceback.format_exc()))
    final = os.path.join(ctx.workdir, f"result.{ctx.rank}")
    with open(final + ".tmp", "wb") as handle:
        handle.write(payload)
    os.rename(final + ".tmp", final)
    sys.stdout.flush()
    sys.stderr.flush()


def run_forked(
    target: Callable[..., Any],
    world_size: int,
    *,
    args: tuple[Any, ...] = (),
    timeout: float = 60.0,
    fail_grace: float = 15.0,
) -> list[RankResult]:
    """Run ``target(ctx, *args)`` in ``world_size`` forked ranks; one result per rank."""
    workdir = tempfile.mkdtemp(prefix="tpd", dir="/tmp")
    deadline = time.monotonic() + timeout
    pids: list[int] = []
    try:
        for rank in range(world_size):
            pid = os.fork()
            if pid == 0:  # pragma: no cover - runs in the child
                try:
                    ctx = RankContext(rank, world_size, workdir)
                    _child_main(target, ctx, args, deadline - time.monotonic())
                finally:
                    os._exit(0)
            pids.append(pid)
        statuses = _reap(pids, deadline, fail_grace, workdir)
        return [_result(rank, pid, statuses[pid], workdir) for rank, pid in enumerate(pids)]
    finally:
        for pid in pids:  # a fork failure half-way: never leave a child behind
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0] == 0:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
        shutil.rmtree(workdir, ignore_errors=True)


def _reap(pids: Sequence[int], deadline: float, grace: float, workdir: str) -> dict[int, int]:
    statuses: dict[int, int] = {}
    timed_out: set[int] = set()
    while len(statuses) < len(pids):
        for rank, pid in enumerate(pids):
            if pid in statuses:
                continue
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                statuses[pid] = status
                if not _returned_ok(status, workdir, rank):
                    deadline = min(deadline, time.monotonic() + grace)
        if len(statuses) == len(pids):
            break
        if time.monotonic() >= deadline:
            for pid in pids:
                if pid not in statuses:
                    os.kill(pid, signal.SIGKILL)
                    statuses[pid] = os.waitpid(pid, 0)[1]
                    timed_out.add(pid)
            break
        select.select([], [], [], POLL_INTERVAL)  # bounded poll of exit statuses
    for pid in timed_out:
        statuses[pid] = -1 - statuses[pid]  # mark: killed by us at the deadline
    return statuses


def _returned_ok(status: int, workdir: str, rank: int) -> bool:
    if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
        return False
    try:
        with open(os.path.join(workdir, f"result.{rank}"), "rb") as handle:
            return bool(pickle.load(handle)[0] == "ok")
    except (OSError, EOFError, pickle.UnpicklingError):
        return False


def _result(rank: int, pid: int, status: int, workdir: str) -> RankResult:
    output = ""
    with (
        contextlib.suppress(OSError),
        open(os.path.join(workdir, f"output.{rank}"), errors="replace") as handle,
    ):
        output = handle.read()
    if status < 0:
        raw = -1 - status
        sig = os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else None
        return RankResult(rank, pid, "timeout", signal=sig, output=output)
    if os.WIFSIGNALED(status):
        return RankResult(rank, pid, "signaled", signal=os.WTERMSIG(status), output=output)
    code = os.WEXITSTATUS(status)
    try:
        with open(os.path.join(workdir, f"result.{rank}"), "rb") as handle:
            result = pickle.load(handle)
    except (OSError, EOFError, pickle.UnpicklingError):
        return RankResult(rank, pid, "exited", exit_code=code, output=output)
    if result[0] == "ok":
        return RankResult(rank, pid, "ok", value=result[1], exit_code=code, output=output)
    _, exc_type, message, tb = result
    return RankResult(rank, pid, "raised", None, exc_type, message, tb, code, output=output)


def values(results: Sequence[RankResult]) -> list[Any]:
    """Every rank's return value, or :class:`GroupFailureError` describing each rank."""
    if any(result.status != "ok" for result in results):
        raise GroupFailureError("\n".join(result.describe() for result in results))
    return [result.value for result in results]
