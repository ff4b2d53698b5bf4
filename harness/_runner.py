"""``run_ranks``: fork N ranks from this (warm) process, supervise them, judge each one.

Lifecycle of a group:

1. checks (arguments, the torch fork hazard), a private short workdir, the sync mesh;
2. ``os.fork`` x N (no multiprocessing, no spawn: a fork from a warm parent costs ~1-3 ms,
   a spawn that imports torch ~1.4 s), with asynchronous signals blocked: a rank unblocks
   them once its own handlers exist, the parent once every rank is recorded;
3. the parent drops its copies of the ranks' life pipes, then sleeps up to 20 ms in one
   ``poll`` until every rank has ended (or one failed: see ``_exitpipe``), and only
   then records the ranks, closes its copies of their fds and hands on the signals it
   held back: most groups are over by then, and the parent's pages are cheaper to write
   once no rank shares them; one group deadline; the parent sleeps in ``poll`` on
   pidfds and wakes when a rank ends; with ``fail_fast`` the first failure shrinks the
   deadline to ``fail_fast_grace`` after it ended;
4. at the deadline: SIGUSR1 (faulthandler stack dump), SIGTERM, ``kill_grace``, SIGKILL of
   each rank's process group, reap. Those ranks are TIMED_OUT and carry their stacks;
5. survivors (any process left in a rank's process group), leftover files, cleanup.

Whatever happens in the parent (KeyboardInterrupt, a bug), the ``finally`` clause kills
and reaps every rank: a group never outlives its ``run_ranks`` call.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # CPython's C module behind signal
import contextlib
import functools
import gc
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping

from ._channel import RecordWriter, read_records
from ._faults import FaultPlan
from ._forksafety import check_fork_safety, ranks_need_single_torch
from ._leaks import Leak, LeakWatch, collect_leaks, note_before_kill
from ._mesh import Mesh
from ._observe import list_group_members
from ._outcome import GroupResult
from ._proc import (
    DeferredSignals,
    block_asynchronous_signals,
    fork_child,
    group_alive,
    killpg_quiet,
    preload,
    restore_signal_mask,
)
from ._rank import EXIT_BOOTSTRAP, RankSpec, make_context, rank_main
from ._reaper import Reaper, WaitStatus
from ._verdict import RankState, failed, judge
from ._workdir import CaptureFds, Workdir

__all__ = ["SEED_ENV", "run_ranks"]

SEED_ENV = "TPBCAST_SEED"
_DUMP_WAIT_MAX = 1.0  # seconds to wait for faulthandler dumps of hung ranks
_REAP_AFTER_KILL = 10.0  # a SIGKILLed process normally goes in microseconds
_SURVIVOR_GRACE = 0.5  # grandchildren killed by PDEATHSIG need a moment to go
_SHORT_GROUP = 0.02  # seconds after the last fork: see _exitpipe


def _resolve_seed(seed: int | None, faults: FaultPlan | None) -> int:
    if seed is not None:
        return int(seed)
    if faults is not None and faults.seed is not None:
        return int(faults.seed)
    env = os.environ.get(SEED_ENV, "").strip()
    if env:
        try:
            return int(env, 0)
        except ValueError:
            raise ValueError(f"{SEED_ENV}={env!r} is not an integer seed") from None
    return int.from_bytes(os.urandom(4), "little")


def _validate(
    world_size: int,
    timeout: float,
    fail_fast_grace: float,
    kill_grace: float,
    sigpipe: str,
    *,
    faults: FaultPlan | None,
) -> None:
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"run_ranks: world_size must be an int >= 1, got {world_size!r}")
    for name, value in (
        ("timeout", timeout),
        ("fail_fast_grace", fail_fast_grace),
        ("kill_grace", kill_grace),
    ):
        if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
            raise ValueError(f"run_ranks: {name} must be a finite number >= 0, got {value!r}")
    if timeout <= 0:
        raise ValueError(f"run_ranks: timeout must be > 0 seconds, got {timeout!r}")
    if sigpipe not in ("default", "inherit"):
        raise ValueError(f"run_ranks: sigpipe must be 'default' or 'inherit', got {sigpipe!r}")
    if faults is not None:
        faults.validate(world_size)


_SIG_DFL = int(signal.SIG_DFL)
_SIGPIPE = int(signal.SIGPIPE)
_SIGTERM = int(signal.SIGTERM)
_HARNESS_SIGNALS = frozenset((int(signal.SIGUSR1), _SIGTERM))
_RESETTABLE = tuple(
    int(sig)
    for sig in (signal.SIGCHLD, signal.SIGALRM, signal.SIGUSR2, signal.SIGHUP, signal.SIGTERM)
)


def _signals_to_reset(sigpipe: str) -> tuple[tuple[int, ...], bool]:
    """Which dispositions a rank must reset (decided once here, not in every rank).

    SIGPIPE goes back to SIG_DFL unless ``sigpipe="inherit"``: Python ignores it, a C++
    engine does not, and a broadcaster that writes without MSG_NOSIGNAL must die visibly.
    Handlers that the parent's plugins installed (pytest-timeout's SIGALRM, a SIGCHLD
    reaper, ...) must not run in a rank. Coverage's SIGTERM handler is kept: it saves the
    rank's data when the harness terminates a hung rank.
    """
    reset = []
    # _signal, not signal: the public wrapper turns each answer into a Handlers enum
    # member, a detour through enum machinery (pages to fault again after every fork).
    if sigpipe != "inherit" and _signal.getsignal(_SIGPIPE) != _SIG_DFL:
        reset.append(_SIGPIPE)
    for sig in _RESETTABLE:
        handler = _signal.getsignal(sig)
        if handler is None or handler == _SIG_DFL:
            continue
        if sig == _SIGTERM and _is_coverage_handler(handler):
            continue
        reset.append(sig)
    wakeup = False
    try:
        old = signal.set_wakeup_fd(-1)
        if old != -1:
            signal.set_wakeup_fd(old)
            wakeup = True
    except ValueError:
        pass  # not the main thread: no wakeup fd can be set from here anyway
    return tuple(reset), wakeup


def _rank_signal_mask(sigpipe: str) -> tuple[int, ...]:
    """The signal mask each rank restores once its handlers exist: the caller's, minus
    the signals the harness relies on in a rank, which a caller (a library, a leaky test,
    a thread that blocks everything) may have blocked: SIGUSR1 (the stack dump of a hung
    rank) and SIGTERM (its stop, and coverage's save) always, SIGPIPE unless
    ``sigpipe="inherit"`` (or "dies visibly" would become a quiet EPIPE)."""
    mask = _signal.pthread_sigmask(_signal.SIG_BLOCK, ())  # ints, no Signals enum detour
    mask -= _HARNESS_SIGNALS
    if sigpipe != "inherit":
        mask.discard(_SIGPIPE)
    return tuple(mask)


def _is_coverage_handler(handler: object) -> bool:
    return "coverage" in str(
        getattr(handler, "__module__", "")
        or getattr(getattr(handler, "__self__", None), "__module__", "")
    )


def _fork(child: Callable[[], None]) -> int:
    """Fork one rank that runs ``child`` (``rank_main``, which restores the signal mask once
    its handlers exist and never comes back here); returns its pid.  Called with every
    asynchronous signal blocked (``_fork_all``).  A seam for tests."""
    return fork_child(child, exit_code=EXIT_BOOTSTRAP)


def _own_group(pid: int) -> None:
    """Put a rank in its own process group from the parent's side too (the rank does it
    first thing; whoever runs first wins, and the second call changes nothing), so a
    ``killpg`` of the rank's pid reaches it even before it ran.  OSError: the rank is gone,
    or left its group on its own (setsid)."""
    try:  # noqa: SIM105 - contextlib.suppress costs copy-on-write faults here
        os.setpgid(pid, pid)
    except OSError:
        pass


Target = Callable[..., object]
"""What a rank runs: ``target(ctx, *args) -> object`` (the value is pickled back)."""


def _per_rank_targets(
    target: Target | Mapping[int, Target], world_size: int | None
) -> tuple[int, tuple[Target, ...]]:
    """One target per rank: the same callable everywhere, or a mapping rank -> target.

    A mapping lets a test mix its own implementation with byte-level rogues
    (``{0: mine, 1: rogue_peer("announce", rank=7), 2: mine}``); its keys must be exactly
    ``0..world_size-1`` (``world_size`` defaults to its length), so a forgotten rank is an
    error here instead of a rank that silently runs nothing.
    """
    if not isinstance(target, Mapping):
        if not callable(target):
            raise TypeError(
                f"run_ranks: target must be a callable or a mapping rank -> callable, got "
                f"{type(target).__name__}"
            )
        if world_size is None:
            raise ValueError("run_ranks: world_size is required when target is one callable")
        return world_size, (target,) * world_size if isinstance(world_size, int) else ()
    size = len(target) if world_size is None else world_size
    ranks = set(target)
    wanted = set(range(size)) if isinstance(size, int) else set()
    if ranks != wanted:
        missing = sorted(wanted - ranks)
        extra = sorted(ranks - wanted, key=repr)
        raise ValueError(
            f"run_ranks: the target mapping must give one target for each rank 0..{size - 1} "
            f"of world_size {size}; missing rank(s) {missing}, unexpected key(s) {extra}"
        )
    for rank in sorted(ranks):
        if not callable(target[rank]):
            raise TypeError(
                f"run_ranks: the target of rank {rank} is not callable: {target[rank]!r}"
            )
    return size, tuple(target[rank] for rank in range(size))


def run_ranks(
    target: Target | Mapping[int, Target],
    world_size: int | None = None,
    *,
    timeout: float = 30.0,
    args: tuple[object, ...] = (),
    faults: FaultPlan | None = None,
    fail_fast: bool = True,
    fail_fast_grace: float = 1.0,
    kill_grace: float = 2.0,
    sigpipe: str = "default",
    check_fds: bool = False,
    workdir: str | None = None,
    seed: int | None = None,
    label: str = "",
    skip_exit_codes: Mapping[int, str] | None = None,
) -> GroupResult:
    """Run ``target(ctx, *args)`` in ``world_size`` forked ranks and judge each one.

    ``target`` may also be a mapping rank -> target (keys exactly ``0..world_size-1``;
    ``world_size`` then defaults to its length), so each rank can run its own code.
    Never raises for a rank's failure: inspect the result or call
    ``result.raise_for_failure()``.  A rank that raises ``unittest.SkipTest`` (or
    ``pytest.skip``), or exits with a code of ``skip_exit_codes`` (code -> reason, e.g.
    torch's ``TEST_SKIPS``), is SKIPPED: not a failure, also not for fail-fast.
    Raises ``ValueError`` for bad arguments and ``ForkSafetyError`` when forking now
    would hang the ranks (torch's OpenMP pool).
    Must be called from a thread that outlives the group (PR_SET_PDEATHSIG is per thread).
    """
    world_size, targets = _per_rank_targets(target, world_size)
    _validate(world_size, timeout, fail_fast_grace, kill_grace, sigpipe, faults=faults)
    check_fork_safety()
    preload()
    group_seed = _resolve_seed(seed, faults)
    reset_signals, reset_wakeup = _signals_to_reset(sigpipe)
    signal_mask = _rank_signal_mask(sigpipe)
    single_torch = ranks_need_single_torch()
    wd: Workdir | None = None
    mesh: Mesh | None = None
    ranks: list[RankState] = []
    reaper = Reaper()
    start = time.monotonic()
    completed = False
    capture: list[CaptureFds] = []
    try:
        # From the first resource until every rank is recorded and the short-group wait is
        # over, a Ctrl-C (or pytest-timeout's SIGALRM) must not raise: it waits until then
        # (see DeferredSignals; at most 20 ms after the last fork).
        with DeferredSignals() as deferred:
            wd = Workdir.open(workdir)
            mesh = Mesh.create(world_size)
            capture = wd.open_capture(world_size)
            watch = LeakWatch.start(wd.capture)
            for stream in (sys.stdout, sys.stderr):  # or the ranks would print it again
                with contextlib.suppress(OSError, ValueError, AttributeError):
                    stream.flush()
            start = time.monotonic()
            deadline = start + timeout
            parent = os.getpid()
            specs = [
                RankSpec(
                    rank=r,
                    world_size=world_size,
                    parent_pid=parent,
                    workdir=wd.path,
                    capture=capture[r],
                    seed=group_seed,
                    start=start,
                    deadline=deadline,
                    timeout=timeout,
                    restore_handlers=tuple(
                        (sig, handler)
                        for sig, handler in deferred.originals
                        if sig not in reset_signals
                    ),
                    reset_signals=reset_signals,
                    reset_wakeup_fd=reset_wakeup,
                    signal_mask=signal_mask,
                    single_torch=single_torch,
                    close_fds=(
                        *mesh.not_for(r),
                        *(fd for j, fds in enumerate(capture) if j != r for fd in fds),
                    ),
                    exit_end=mesh.exits.end,
                    check_fds=check_fds,
                    faults=faults.for_rank(r) if faults is not None else {},
                    leak_watch=watch,
                )
                for r in range(world_size)
            ]
            _fork_all(specs, ranks, reaper, mesh, deadline=deadline, targets=targets, args=args)
            ended_early = reaper.wait(time.monotonic())  # the ones gone already, no wait
            mesh.parent_after_fork()
            _close_capture(capture)
        failure_order = _supervise(
            ranks,
            reaper,
            wd,
            ended_early,
            deadline=deadline,
            fail_fast=fail_fast,
            fail_fast_grace=fail_fast_grace,
            kill_grace=kill_grace,
            timeout=timeout,
            skip_codes=skip_exit_codes,
            watch=watch,
        )
        completed = True
    finally:
        with DeferredSignals():  # a second Ctrl-C must not cut the cleanup short
            _kill_and_reap(ranks, reaper)
            reaper.close()
            if mesh is not None:
                mesh.parent_close()
            _close_capture(capture)
            if not completed:  # interrupted (KeyboardInterrupt, a bug): leave nothing behind
                _kill_survivors(ranks)
                if wd is not None:
                    wd.remove(clean=False)
    assert wd is not None  # completed: the section above opened it
    survivors = _kill_survivors(ranks)
    outcomes = tuple(judge(r, wd, skip_exit_codes) for r in ranks)
    leftovers, leaks = _left_behind(wd, watch, ranks, label, clean=not survivors)
    return GroupResult(
        outcomes=outcomes,
        duration=time.monotonic() - start,
        seed=group_seed,
        survivors=survivors,
        leftover_files=leftovers,
        leaks=leaks,
        label=label,
        workdir=wd.path,
        timeout=timeout,
        failure_order=tuple(failure_order),
    )


def _left_behind(
    wd: Workdir, watch: LeakWatch, ranks: list[RankState], label: str, *, clean: bool
) -> tuple[tuple[str, ...], tuple[Leak, ...]]:
    """What the group left in its workdir and outside it (``_leaks``: noted for removal
    after the test), then the workdir goes (or back to the pool if nothing was left; a
    caller's workdir stays the caller's)."""
    leftovers = wd.leftovers()
    pids = (r.pid for r in ranks)
    leaks = collect_leaks(watch, pids, wd.path, leftovers, label, workdir_owned=wd.owned)
    wd.remove(clean=clean and not leftovers)
    return leftovers, leaks


def _close_capture(capture: list[CaptureFds]) -> None:
    """The parent's copies of the ranks' capture fds (idempotent: empties the list).

    Runs while the ranks are alive, where each page written is a copy-on-write fault:
    hence try/except, not a ``contextlib.suppress`` object per fd."""
    for fds in capture:
        for fd in fds:
            try:  # noqa: SIM105
                os.close(fd)
            except OSError:
                pass
    capture.clear()


def _fork_all(
    specs: list[RankSpec],
    ranks: list[RankState],
    reaper: Reaper,
    mesh: Mesh,
    *,
    deadline: float,
    targets: tuple[Target, ...],
    args: tuple[object, ...],
) -> None:
    """Fork every rank, give the group up to ``_SHORT_GROUP`` to end, then append each
    rank to ``ranks`` and ``reaper`` (also when a fork fails midway: the ones already
    started are killed and reaped by the caller).

    The wait comes before the bookkeeping: most groups are over within it, and each page
    the parent writes while a rank still shares it is a copy-on-write fault (see
    _exitpipe).  The parent's copies of the life pipes go first, so that a rank's
    death reaches its peers at once.

    gc.freeze: a garbage collection in a rank would otherwise walk every object it
    inherited and copy-on-write fault the whole heap (tens of ms with torch loaded).
    Frozen objects are invisible to the ranks' collector; the parent thaws them right
    after forking (skipped if someone else froze objects for their own reasons).
    """
    writers = [RecordWriter(spec.capture.results) for spec in specs]
    contexts = [make_context(spec, mesh, w) for spec, w in zip(specs, writers, strict=True)]
    children = [
        functools.partial(rank_main, spec, contexts[spec.rank], writers[spec.rank], t, args)
        for spec, t in zip(specs, targets, strict=True)
    ]
    forked: list[tuple[int, int, float]] = []  # (rank, pid, forked_at)
    freeze = gc.isenabled() and gc.get_freeze_count() == 0
    # Every asynchronous signal stays blocked in this thread from the first fork until the
    # last rank is recorded, so a Python handler that raises (for a signal DeferredSignals
    # does not hold back) runs only once the caller can kill and reap every rank. Limit: a
    # process-directed signal that another thread takes (xdist's execnet thread) still
    # runs its Python handler here at once; DeferredSignals covers SIGINT, SIGALRM and
    # SIGTERM whatever thread takes them.
    mask = block_asynchronous_signals()
    try:
        if freeze:
            gc.freeze()
        try:
            # Nothing but the forks in this loop: every page the parent writes while a rank
            # lives is a copy-on-write fault, and a page written between two forks is
            # copied again after the next one.  The bookkeeping waits for the last fork.
            for spec, child in zip(specs, children, strict=True):
                forked_at = time.monotonic()
                forked.append((spec.rank, _fork(child), forked_at))
            mesh.parent_wait_short(int(min(_SHORT_GROUP, deadline - time.monotonic()) * 1000))
        finally:
            if freeze:
                gc.unfreeze()
            for rank, pid, forked_at in forked:
                _own_group(pid)  # before reaper.add: every pid the reaper knows has its group
                ranks.append(RankState(rank, pid, forked_at))
                reaper.add(pid)
    finally:
        restore_signal_mask(mask)


def _supervise(
    ranks: list[RankState],
    reaper: Reaper,
    wd: Workdir,
    ended_early: list[tuple[int, WaitStatus]],
    *,
    deadline: float,
    fail_fast: bool,
    fail_fast_grace: float,
    kill_grace: float,
    timeout: float,
    skip_codes: Mapping[int, str] | None = None,
    watch: LeakWatch | None = None,
) -> list[int]:
    """Wait for the ranks up to the deadline (judging the ones already reaped after the
    short-group wait first); fail-fast shrinks the deadline at the first failure.  Returns
    the ranks in the order they failed; stops the ones still running at the deadline."""
    by_pid = {r.pid: r for r in ranks}
    failure_order: list[int] = []
    reason = ""
    culprit: int | None = None  # the rank whose failure set the fail-fast deadline
    ended = ended_early
    while True:
        for pid, status in ended:
            rank = by_pid[pid]
            rank.status, rank.ended_at = status, reaper.reaped_at[pid]
            rank.records = read_records(wd.file(rank.rank, "res"))
            if failed(status, rank.records, skip_codes):
                failure_order.append(rank.rank)
                if fail_fast:  # the grace counts from when the rank was reaped
                    cut = reaper.reaped_at[pid] + fail_fast_grace
                    if cut < deadline:
                        deadline = cut
                        culprit = rank.rank
                        reason = (
                            f"fail-fast: rank {rank.rank} failed, the others got "
                            f"{fail_fast_grace:g}s more"
                        )
        if not reaper.live or time.monotonic() >= deadline:
            break
        ended = reaper.wait(deadline)
    if reaper.live:
        reason = reason or f"group deadline of {timeout:g}s"
        hung = [by_pid[p] for p in reaper.live]
        for r in hung:  # "stopped: rank N failed" reads apart from a hang of its own
            r.stopped_by = culprit
        _stop_hung(hung, reaper, wd, reason, kill_grace, watch=watch)
        for r in ranks:
            if r.killed_by_harness:
                failure_order.append(r.rank)
    return failure_order


def _stop_hung(
    hung: list[RankState],
    reaper: Reaper,
    wd: Workdir,
    reason: str,
    kill_grace: float,
    *,
    watch: LeakWatch | None = None,
) -> None:
    """Stack dump, SIGTERM, grace, SIGKILL of the process group; reap.  What a hung rank
    holds is noted first (``note_before_kill``): killed, it could not prove its segments."""
    by_pid = {r.pid: r for r in hung}

    def collect(until: float) -> None:
        while reaper.live and time.monotonic() < until:
            for pid, status in reaper.wait(until):
                rank = by_pid.get(pid)
                if rank is not None:
                    rank.status, rank.ended_at = status, reaper.reaped_at[pid]

    for r in hung:
        for sig in (signal.SIGUSR1, signal.SIGCONT):  # a SIGSTOPped rank must run to dump
            with contextlib.suppress(ProcessLookupError):
                os.kill(r.pid, sig)
    _wait_for_dumps([r for r in hung if r.pid in reaper.live], wd, kill_grace)
    for r in hung:
        if watch is not None and r.pid in reaper.live:
            note_before_kill(r.pid, watch)
    for r in hung:
        if r.pid in reaper.live:
            r.killed_by_harness = True
            r.note = f"stopped by the harness: {reason}"
            killpg_quiet(r.pid, signal.SIGTERM)
            killpg_quiet(r.pid, signal.SIGCONT)
    collect(time.monotonic() + kill_grace)
    for r in hung:
        if r.pid in reaper.live:
            r.note += f"; ignored SIGTERM for {kill_grace:g}s, SIGKILLed"
            killpg_quiet(r.pid, signal.SIGKILL)
    collect(time.monotonic() + _REAP_AFTER_KILL)


def _wait_for_dumps(live: list[RankState], wd: Workdir, kill_grace: float) -> None:
    """Poll (bounded) until every live rank's stack file has stopped growing."""
    until = time.monotonic() + min(_DUMP_WAIT_MAX, max(0.2, kill_grace / 2))
    sizes: dict[int, int] = {}
    while live and time.monotonic() < until:
        time.sleep(0.005)  # polling a file with a deadline; the dump needs a time slice
        now = {r.rank: _size(wd.file(r.rank, "stk")) for r in live}
        if all(now[k] > 0 and sizes.get(k) == now[k] for k in now):
            return
        sizes = now


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _kill_and_reap(ranks: list[RankState], reaper: Reaper) -> None:
    """Last line of defence (exceptions in the parent): nothing outlives the call."""
    if not reaper.live:
        return
    by_pid = {r.pid: r for r in ranks}
    for pid in reaper.live:
        killpg_quiet(pid, signal.SIGKILL)
        by_pid[pid].killed_by_harness = True
        by_pid[pid].note = by_pid[pid].note or "killed by the harness (run_ranks was interrupted)"
    until = time.monotonic() + _REAP_AFTER_KILL
    while reaper.live and time.monotonic() < until:
        for pid, status in reaper.wait(until):
            by_pid[pid].status, by_pid[pid].ended_at = status, reaper.reaped_at[pid]


def _kill_survivors(ranks: list[RankState]) -> tuple[int, ...]:
    """SIGKILL what outlived its rank and return the pids: processes still in a rank's
    process group after the rank was reaped (a bug, reported), plus ranks that could not
    be reaped at all."""
    unreaped = [r.pid for r in ranks if not r.ended]
    groups = {r.pid for r in ranks if group_alive(r.pid)}
    if not groups:
        return tuple(unreaped)
    until = time.monotonic() + _SURVIVOR_GRACE
    members = list_group_members(groups)
    while members and time.monotonic() < until:
        time.sleep(0.005)  # PDEATHSIG victims need a time slice to go (bounded poll)
        members = list_group_members(groups)
    for pid in members:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return tuple(sorted(set(members) | set(unreaped)))
