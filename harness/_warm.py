"""``WarmGroup``: N forked ranks that run many targets one after another, each judged alone.

Why: a multi-rank test that builds expensive per-rank state (a torch process group, a
loaded model) pays for it once per test on ``run_ranks``.  A warm group forks the ranks
once, runs ``setup`` in each (that state stays), then sends each target by reference
(module and qualified name, never pickled code) to every rank; a rank runs it with a
fresh context, puts back what the target may have changed, and answers.

Isolation, the part torch's ``MultiProcContinuousTest`` lacks (its "poison pill" skips
the rest of a class after one failure; a stalled rank hangs it):

* a target that raises, exits, crashes or hangs in any rank ends the group exactly as
  ``run_ranks`` ends one (fail-fast, stack dumps of hung ranks, SIGTERM then SIGKILL,
  every process reaped, survivors and leftover files reported), and that result, per
  rank with its stack, is the target's result; the next target gets a freshly forked
  group (``setup`` again);
* between targets each rank puts back its environment, working directory, umask,
  ``sys.path``, signal dispositions and mask; a target's fault plan, seed, deadline and
  sync names live in its own context; captured output is emptied per target;
* what cannot be put back (a thread or a child process the target left) re-forks the
  group before the next target, and the result's notes say why.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ._channel import frame, read_records
from ._faults import FaultPlan
from ._forksafety import check_fork_safety, ranks_need_single_torch
from ._mesh import Mesh
from ._outcome import FaultRecord, GroupResult, RankOutcome, Status
from ._proc import DeferredSignals, preload
from ._rank import DISPATCH_CODES, RankSpec
from ._reaper import Reaper
from ._runner import (
    _close_capture,
    _fork_all,
    _kill_and_reap,
    _kill_survivors,
    _rank_signal_mask,
    _resolve_seed,
    _signals_to_reset,
    _supervise,
    _validate,
)
from ._verdict import RankState, _read_text, judge
from ._warm_rank import RankPipes, TargetRef, serve, write_all
from ._workdir import CaptureFds, Workdir

__all__ = ["WarmGroup"]

_LIFETIME = 10 * 365 * 24 * 3600.0  # the ranks' own deadline: the parent enforces targets'
_LEN = 4


@dataclass
class _Live:
    """One generation of forked ranks and what the parent holds of it."""

    wd: Workdir
    mesh: Mesh
    reaper: Reaper
    ranks: list[RankState]
    commands: list[int]  # parent's write ends, per rank
    replies: list[int]  # parent's read ends (non-blocking), per rank
    started: float
    fresh: bool = True  # no target has run yet: the first one also waits for setup
    bufs: list[bytes] = field(default_factory=list)


class WarmGroup:
    """A group of ``world_size`` forked ranks kept warm across targets.

    ``run(target, args)`` runs ``target(ctx, *args)`` in every rank and returns a
    :class:`GroupResult` just like ``run_ranks``.  ``setup(ctx, *setup_args)`` runs in
    each rank after every fork (``setup_args`` are inherited through the fork, never
    pickled) and ``teardown(ctx, *setup_args)`` before a clean end; ``check(ctx,
    *setup_args)`` runs after each target that passed and returns reasons (strings) why
    the rank's state cannot be kept (e.g. "the test destroyed the process group"): any
    reason re-forks the group before the next target.  All are named by reference.
    ``setup_timeout`` is added to the deadline of the first target after a fork.  Use as
    a context manager, or call :meth:`close`; the parent process must stay free of torch
    ops while the group lives (see ``ForkSafetyError``).
    """

    def __init__(
        self,
        world_size: int,
        *,
        setup: Callable[..., object] | TargetRef | None = None,
        teardown: Callable[..., object] | TargetRef | None = None,
        setup_args: tuple[object, ...] = (),
        check: Callable[..., object] | TargetRef | None = None,
        timeout: float = 30.0,
        setup_timeout: float = 30.0,
        fail_fast_grace: float = 1.0,
        kill_grace: float = 2.0,
        sigpipe: str = "default",
        seed: int | None = None,
        skip_exit_codes: dict[int, str] | None = None,
        label: str = "",
    ) -> None:
        _validate(world_size, timeout, fail_fast_grace, kill_grace, sigpipe, faults=None)
        self.world_size = world_size
        self.setup = TargetRef.of(setup) if setup is not None else None
        self.teardown = TargetRef.of(teardown) if teardown is not None else None
        self.setup_args = tuple(setup_args)
        self.check = TargetRef.of(check) if check is not None else None
        self.timeout = float(timeout)
        self.setup_timeout = float(setup_timeout)
        self.fail_fast_grace = fail_fast_grace
        self.kill_grace = kill_grace
        self.sigpipe = sigpipe
        self.seed = seed
        self.skip_exit_codes = skip_exit_codes
        self.label = label
        self.forks = 0  # how many generations were forked (1 + re-forks)
        self.refork_reasons: list[str] = []
        self._live: _Live | None = None
        self._seq = 0

    def __enter__(self) -> WarmGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pids(self) -> tuple[int, ...]:
        """The live ranks' pids (empty when no generation is running)."""
        return tuple(r.pid for r in self._live.ranks) if self._live else ()

    # -- forking -------------------------------------------------------------------

    def _fork(self) -> _Live:
        check_fork_safety()
        preload()
        reset_signals, reset_wakeup = _signals_to_reset(self.sigpipe)
        signal_mask = _rank_signal_mask(self.sigpipe)
        single_torch = ranks_need_single_torch()
        n = self.world_size
        cmd = [os.pipe() for _ in range(n)]  # (rank reads, parent writes)
        rep = [os.pipe() for _ in range(n)]  # (parent reads, rank writes)
        parent_ends = [fd for r in range(n) for fd in (cmd[r][1], rep[r][0])]
        reaper = Reaper()
        ranks: list[RankState] = []
        wd: Workdir | None = None
        mesh: Mesh | None = None
        capture: list[CaptureFds] = []
        done = False
        try:
            with DeferredSignals() as deferred:
                wd = Workdir.open(None)
                mesh = Mesh.create(n)
                capture = wd.open_capture(n)
                start = time.monotonic()
                specs = [
                    RankSpec(
                        rank=r,
                        world_size=n,
                        parent_pid=os.getpid(),
                        workdir=wd.path,
                        capture=capture[r],
                        seed=_resolve_seed(self.seed, None),
                        start=start,
                        deadline=start + _LIFETIME,
                        timeout=_LIFETIME,
                        restore_handlers=tuple(
                            (s, h) for s, h in deferred.originals if s not in reset_signals
                        ),
                        reset_signals=reset_signals,
                        reset_wakeup_fd=reset_wakeup,
                        signal_mask=signal_mask,
                        single_torch=single_torch,
                        close_fds=(
                            *mesh.not_for(r),
                            *(fd for j, fds in enumerate(capture) if j != r for fd in fds),
                            *parent_ends,
                            *(fd for j in range(n) if j != r for fd in (cmd[j][0], rep[j][1])),
                        ),
                        exit_end=mesh.exits.end,
                        check_fds=False,
                        faults={},
                    )
                    for r in range(n)
                ]
                targets = tuple(_serve_entry for _ in range(n))
                args_by_rank = [
                    (
                        RankPipes(cmd[r][0], rep[r][1]),
                        (self.setup, self.teardown, self.check, self.setup_args),
                        (1, 2, capture[r].results, capture[r].stack),
                    )
                    for r in range(n)
                ]
                # One argument tuple per rank: _fork_all passes the same args to all, so the
                # rank picks its own entry by rank number.
                _fork_all(
                    specs,
                    ranks,
                    reaper,
                    mesh,
                    deadline=start + _LIFETIME,
                    targets=targets,
                    args=(tuple(args_by_rank),),
                )
                mesh.parent_after_fork()
                _close_capture(capture)
            for r in range(n):
                os.close(cmd[r][0])
                os.close(rep[r][1])
                os.set_blocking(rep[r][0], False)
            done = True
        finally:
            if not done:
                with DeferredSignals():
                    _kill_and_reap(ranks, reaper)
                    reaper.close()
                    if mesh is not None:
                        mesh.parent_close()
                    _close_capture(capture)
                    for pair in (*cmd, *rep):
                        for fd in pair:
                            with contextlib.suppress(OSError):
                                os.close(fd)
                    _kill_survivors(ranks)
                    if wd is not None:
                        wd.remove(clean=False)
        assert wd is not None and mesh is not None
        self.forks += 1
        return _Live(
            wd=wd,
            mesh=mesh,
            reaper=reaper,
            ranks=ranks,
            commands=[cmd[r][1] for r in range(n)],
            replies=[rep[r][0] for r in range(n)],
            started=start,
            bufs=[b""] * n,
        )

    # -- running a target ----------------------------------------------------------------

    def run(
        self,
        target: Callable[..., object] | TargetRef,
        args: tuple[object, ...] = (),
        *,
        timeout: float | None = None,
        faults: FaultPlan | None = None,
        seed: int | None = None,
        label: str = "",
    ) -> GroupResult:
        """Run ``target(ctx, *args)`` in every rank of the warm group (forking it first
        if no generation is running); never raises for a rank's failure."""
        ref = TargetRef.of(target)
        seconds = self.timeout if timeout is None else float(timeout)
        _validate(
            self.world_size,
            seconds,
            self.fail_fast_grace,
            self.kill_grace,
            "default",
            faults=faults,
        )
        payload_args = pickle.dumps(args)  # fails here, in the caller, if args do not pickle
        del payload_args
        live = self._live or self._fork()
        self._live = live
        self._seq += 1
        target_seed = _resolve_seed(seed, faults)
        start = time.monotonic()
        deadline = start + seconds + (self.setup_timeout if live.fresh else 0.0)
        live.fresh = False
        for r in range(self.world_size):
            command = frame(
                "run",
                {
                    "seq": self._seq,
                    "target": (ref.module, ref.qualname),
                    "args": args,
                    "seed": target_seed,
                    "timeout": seconds,
                    "faults": faults.for_rank(r) if faults is not None else {},
                },
            )
            try:
                write_all(live.commands[r], command)
            except BrokenPipeError:
                break  # the rank is gone: the wait below sees its EOF
            except BaseException:
                self._abandon(live)
                raise
        try:
            replies, ended = self._collect(live, deadline)
        except BaseException:  # Ctrl-C, a bug: no rank outlives the call that lost track
            self._abandon(live)
            raise
        label = label or str(ref)
        if ended or len(replies) < self.world_size:
            return self._end(
                live,
                replies,
                deadline=deadline,
                seconds=seconds,
                seed=target_seed,
                start=start,
                label=label,
            )
        dirty = [
            f"rank {r}: {why}"
            for r, rep in replies.items()
            for why in _strings(rep[1].get("dirty"))
        ]
        result = self._result(
            live, replies, seed=target_seed, start=start, seconds=seconds, label=label
        )
        if dirty:
            self.refork_reasons.extend(dirty)
            self._retire(live)
        return result

    def _collect(
        self, live: _Live, deadline: float
    ) -> tuple[dict[int, tuple[str, dict[str, object], float]], set[int]]:
        """Replies until every rank answered, one ended (EOF) or the deadline passed."""
        poller = select.poll()
        by_fd = {fd: r for r, fd in enumerate(live.replies)}
        for fd in live.replies:
            poller.register(fd, select.POLLIN)
        replies: dict[int, tuple[str, dict[str, object], float]] = {}
        ended: set[int] = set()
        while len(replies) + len(ended) < self.world_size and not ended:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for fd, _ in poller.poll(max(1, int(left * 1000 + 0.999))):
                r = by_fd[fd]
                try:
                    chunk = os.read(fd, 1 << 20)
                except BlockingIOError:
                    continue
                if not chunk:
                    ended.add(r)
                    poller.unregister(fd)
                    continue
                live.bufs[r] += chunk
                reply = _take_frame(live, r)
                if reply is not None:
                    replies[r] = (*reply, time.monotonic())
                    poller.unregister(fd)
        return replies, ended

    def _result(
        self,
        live: _Live,
        replies: dict[int, tuple[str, dict[str, object], float]],
        *,
        seed: int,
        start: float,
        seconds: float,
        label: str,
    ) -> GroupResult:
        """The result of a target every rank answered: OK or SKIPPED per rank."""
        outcomes = []
        for st in live.ranks:
            kind, payload, at = replies[st.rank]
            records = read_records(live.wd.file(st.rank, "res"))
            notes = [f"re-forked after this target: {why}" for why in payload["dirty"]]  # type: ignore[attr-defined]
            outcomes.append(
                RankOutcome(
                    rank=st.rank,
                    pid=st.pid,
                    status=Status.OK if kind == "ok" else Status.SKIPPED,
                    value=payload.get("value"),
                    exc_message=payload.get("message") if kind == "skipped" else None,  # type: ignore[arg-type]
                    stdout=_read_text(live.wd.file(st.rank, "out")),
                    stderr=_read_text(live.wd.file(st.rank, "err")),
                    duration=at - start,
                    faults=tuple(
                        rec.payload for rec in records if isinstance(rec.payload, FaultRecord)
                    ),
                    note="; ".join(notes),
                )
            )
        return GroupResult(
            outcomes=tuple(outcomes),
            duration=time.monotonic() - start,
            seed=seed,
            label=label,
            workdir=live.wd.path,
            timeout=seconds,
        )

    def _end(
        self,
        live: _Live,
        replies: dict[int, tuple[str, dict[str, object], float]],
        *,
        deadline: float,
        seconds: float,
        seed: int,
        start: float,
        label: str,
    ) -> GroupResult:
        """A target failed in some rank (or hung): end this generation as ``run_ranks``
        ends a group and return that result; the next target forks a new one."""
        self._live = None
        with DeferredSignals():
            for fd in live.commands:  # EOF: ranks that finished return their value
                with contextlib.suppress(OSError):
                    os.close(fd)
            done_ranks = {live.ranks[r].pid for r in replies}
            early = []
            until = time.monotonic() + max(self.kill_grace, 0.5)
            while done_ranks & live.reaper.live and time.monotonic() < until:
                for pid, status in live.reaper.wait(until):
                    early.append((pid, status))
            failure_order = _supervise(
                live.ranks,
                live.reaper,
                live.wd,
                early,
                deadline=max(deadline, time.monotonic()),
                fail_fast=True,
                fail_fast_grace=self.fail_fast_grace,
                kill_grace=self.kill_grace,
                timeout=seconds,
                skip_codes=self.skip_exit_codes,
            )
            return self._finish(
                live,
                seed=seed,
                start=start,
                label=label,
                seconds=seconds,
                failure_order=tuple(failure_order),
            )

    def _finish(
        self,
        live: _Live,
        *,
        seed: int,
        start: float,
        label: str,
        seconds: float,
        failure_order: tuple[int, ...],
    ) -> GroupResult:
        _kill_and_reap(live.ranks, live.reaper)
        live.reaper.close()
        live.mesh.parent_close()
        for fd in (*live.commands, *live.replies):
            with contextlib.suppress(OSError):
                os.close(fd)
        survivors = _kill_survivors(live.ranks)
        outcomes = tuple(judge(r, live.wd, self.skip_exit_codes) for r in live.ranks)
        leftovers = live.wd.leftovers()
        live.wd.remove(clean=not leftovers and not survivors)
        return GroupResult(
            outcomes=outcomes,
            duration=time.monotonic() - start,
            seed=seed,
            survivors=survivors,
            leftover_files=leftovers,
            label=label,
            workdir=live.wd.path,
            timeout=seconds,
            failure_order=failure_order,
        )

    def _retire(self, live: _Live) -> GroupResult:
        """End a generation cleanly: close the command pipes (each rank runs
        ``teardown`` and returns), wait up to the group timeout, stop what hangs."""
        self._live = None
        with DeferredSignals():
            for fd in live.commands:
                with contextlib.suppress(OSError):
                    os.close(fd)
            start = time.monotonic()
            failure_order = _supervise(
                live.ranks,
                live.reaper,
                live.wd,
                [],
                deadline=start + self.timeout,
                fail_fast=True,
                fail_fast_grace=self.fail_fast_grace,
                kill_grace=self.kill_grace,
                timeout=self.timeout,
                skip_codes=self.skip_exit_codes,
            )
            return self._finish(
                live,
                seed=0,
                start=start,
                label="teardown",
                seconds=self.timeout,
                failure_order=tuple(failure_order),
            )

    def _abandon(self, live: _Live) -> None:
        """Kill and reap this generation at once (the caller is unwinding), unjudged."""
        self._live = None
        with DeferredSignals():
            _kill_and_reap(live.ranks, live.reaper)
            live.reaper.close()
            live.mesh.parent_close()
            for fd in (*live.commands, *live.replies):
                with contextlib.suppress(OSError):
                    os.close(fd)
            _kill_survivors(live.ranks)
            live.wd.remove(clean=False)

    def close(self) -> GroupResult | None:
        """End the running generation (teardown in each rank); its result, or None if
        none was running.  Idempotent."""
        if self._live is None:
            return None
        return self._retire(self._live)


def _strings(value: object) -> tuple[str, ...]:
    return tuple(str(v) for v in value) if isinstance(value, tuple | list) else ()


def _take_frame(live: _Live, r: int) -> tuple[str, dict[str, object]] | None:
    buf = live.bufs[r]
    if len(buf) < _LEN:
        return None
    length = int.from_bytes(buf[:_LEN], "little")
    if len(buf) < _LEN + length:
        return None
    kind, payload = pickle.loads(buf[_LEN : _LEN + length])  # noqa: S301 - our own rank
    live.bufs[r] = buf[_LEN + length :]
    return str(kind), payload


def _serve_entry(ctx: object, per_rank: tuple[tuple[object, ...], ...]) -> object:
    """The target every warm rank starts with: its own entry of ``per_rank``, then serve."""
    from ._context import RankContext

    assert isinstance(ctx, RankContext)
    pipes, hooks, capture_fds = per_rank[ctx.rank]
    return serve(ctx, pipes, hooks, capture_fds)  # type: ignore[arg-type]


DISPATCH_CODES.add(_serve_entry.__code__)
