"""Process faults fired at named points inside a rank, and the plan that schedules them.

A target calls ``ctx.point("after_handshake")``; if the plan has a fault for this rank at
that point (on that hit), the context first writes a :class:`FaultRecord` to the result
channel and only then lets the action act. So even a SIGKILL leaves proof that it was
delivered, and a test can assert "the fault fired" before judging the reaction.

Plans are deterministic; :meth:`FaultPlan.random` derives one from a seed, and the seed is
printed in every report with the command that replays it.
"""

from __future__ import annotations

import abc
import contextlib
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from . import _companions
from ._leaks import note_before_kill
from ._observe import stat_fields
from ._outcome import signal_name
from ._proc import PR_SET_PDEATHSIG_KILL, save_coverage, set_pdeathsig

__all__ = [
    "Delay",
    "Exit",
    "FaultAction",
    "FaultPlan",
    "FaultRecorder",
    "Kill",
    "Pause",
    "PlannedFault",
    "Raise",
    "Segfault",
    "SignalStorm",
]


class FaultRecorder(Protocol):
    """What an action needs of the rank it fires in: a way to record what it did.

    ``RankContext`` is one; naming only this keeps the faults independent of the context
    that fires them (the context imports this module, not the other way round).
    """

    def record(self, kind: str, **details: object) -> None:
        """Add a fault record for the rank (``point=`` may be given)."""


class FaultAction(abc.ABC):
    """Something a rank does to itself at a fault point. Subclasses are frozen dataclasses."""

    @abc.abstractmethod
    def describe(self) -> str:
        """Short text for reports and fault records, e.g. ``Kill(SIGKILL)``."""

    @abc.abstractmethod
    def fire(self, ctx: FaultRecorder, point: str) -> None:
        """Act. Called after the fault record was written."""


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


@dataclass(frozen=True)
class Kill(FaultAction):
    """Send ``signal`` to this rank (default SIGKILL). A handled signal returns normally."""

    signal: int = signal.SIGKILL

    def describe(self) -> str:
        return f"Kill({signal_name(self.signal)})"

    def fire(self, ctx: FaultRecorder, point: str) -> None:
        _flush_std()
        note_before_kill(os.getpid())  # a killed rank never notes what it held itself
        os.kill(os.getpid(), self.signal)


@dataclass(frozen=True)
class Exit(FaultAction):
    """``os._exit(code)`` now: no finally blocks, no atexit, no result record."""

    code: int = 1

    def describe(self) -> str:
        return f"Exit({self.code})"

    def fire(self, ctx: FaultRecorder, point: str) -> None:
        _flush_std()
        save_coverage()
        os._exit(self.code)


@dataclass(frozen=True)
class Segfault(FaultAction):
    """A real SIGSEGV: read address 0 through ctypes (faulthandler prints the stack)."""

    def describe(self) -> str:
        return "Segfault()"

    def fire(self, ctx: FaultRecorder, point: str) -> None:
        import ctypes

        _flush_std()
        ctypes.string_at(0)
        os.kill(os.getpid(), signal.SIGSEGV)  # pragma: no cover - unreachable on Linux


@dataclass(frozen=True)
class Pause(FaultAction):
    """Stop this rank with SIGSTOP for ``seconds``; a helper process sends SIGCONT.

    A stopped process cannot wake itself, so the rank forks a tiny helper first. The helper
    starts its clock only once it sees the rank stopped (``/proc/<pid>/stat`` state ``T``):
    on a loaded machine the rank may reach its ``SIGSTOP`` after ``seconds`` have passed,
    and a SIGCONT sent before the SIGSTOP would leave the rank stopped until the group
    deadline. The helper dies with the rank (PDEATHSIG) and is reaped by the rank after it
    resumes.
    """

    seconds: float = 0.5

    def describe(self) -> str:
        return f"Pause({self.seconds:g}s)"

    def fire(self, ctx: FaultRecorder, point: str) -> None:
        _flush_std()
        me = os.getpid()
        helper = os.fork()
        if helper == 0:  # pragma: no cover - helper process, ends in os._exit
            code = 1
            try:
                set_pdeathsig(PR_SET_PDEATHSIG_KILL)
                if os.getppid() == me and _wait_until_stopped(me, _PAUSE_HELPER_BUDGET):
                    time.sleep(self.seconds)  # the fault's duration, not synchronisation
                    code = 0
                os.kill(me, signal.SIGCONT)  # also when the wait failed: never strand it
            except BaseException:  # noqa: S110 - the helper must end in os._exit
                pass
            finally:
                os._exit(code)
        os.kill(me, signal.SIGSTOP)
        _reap_helper(helper, time.monotonic() + _PAUSE_HELPER_BUDGET)


# How long the SIGCONT helper may take to see its rank stopped, or to end after resuming
# it: far beyond any scheduling delay, still bounded.
_PAUSE_HELPER_BUDGET = 30.0


def _wait_until_stopped(pid: int, budget: float) -> bool:
    """Poll (bounded) until ``pid`` is in state ``T`` (stopped by a signal)."""
    deadline = time.monotonic() + budget
    while time.monotonic() < deadline:
        fields = stat_fields(pid)
        if fields is None:
            return False
        if fields[0] == b"T":
            return True
        time.sleep(0.001)  # polling another process's state with a deadline
    return False


def _reap_helper(helper: int, deadline: float) -> None:
    """Reap the SIGCONT helper (it ends right after resuming us); kill it at the deadline."""
    while time.monotonic() < deadline:
        pid, _ = os.waitpid(helper, os.WNOHANG)
        if pid:
            return
        time.sleep(0.001)  # polling a child with a deadline
    with contextlib.suppress(ProcessLookupError):
        os.kill(helper, signal.SIGKILL)
    os.waitpid(helper, 0)


@dataclass(frozen=True)
class Delay(FaultAction):
    """Sleep ``seconds`` at the point (a slow rank, not a stopped one)."""

    seconds: float = 0.1

    def describe(self) -> str:
        return f"Delay({self.seconds:g}s)"

    def fire(self, ctx: FaultRecorder, point: str) -> None:
        time.sleep(self.seconds)


@dataclass(frozen=True)
class SignalStorm(FaultAction):
    """Send ``count`` signals, ``interval`` seconds apart, to this rank's main thread and
    to its companion processes that declared the signal.

    Installs a no-op handler with ``siginterrupt(sig, True)`` (no SA_RESTART) so blocking
    syscalls in C code see EINTR; Python code retries them itself (PEP 475). An ``exec:``
    implementation's syscalls run in its driver process, so each signal also goes to every
    companion registered in this rank (:mod:`._companions`) that declared it takes the
    signal (SPEC.md, "exec: protocol", ``storm_signals``); one that did not is not
    signalled, since the signal would most likely kill it. Returns at once: the storm
    runs in a daemon thread while the target continues; when it ends it records
    ``signal-storm-done`` with the number sent to the rank and handled so far,
    ``companions_sent`` (``{pid: signals sent}``) and, when any, ``companions_not_signalled``
    (``{pid: why}``).
    """

    signal: int = signal.SIGUSR2
    count: int = 100
    interval: float = 0.001

    def describe(self) -> str:
        return (
            f"SignalStorm({signal_name(self.signal)}, count={self.count}, "
            f"interval={self.interval:g}s)"
        )

    def fire(self, ctx: FaultRecorder, point: str) -> None:
        handled = [0]

        def handler(signum: int, frame: object) -> None:
            handled[0] += 1

        signal.signal(self.signal, handler)
        signal.siginterrupt(self.signal, True)
        # A storm the rank never receives is no fault: the signal may be blocked here
        # (inherited from the caller of run_ranks), so let it in.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [self.signal])
        target = threading.main_thread().ident
        assert target is not None
        name = signal_name(self.signal)

        def storm() -> None:
            sent = 0
            to_companions: dict[int, int] = {}
            not_signalled: dict[int, str] = {}
            for _ in range(self.count):
                try:
                    signal.pthread_kill(target, self.signal)
                except OSError:
                    break
                sent += 1
                delivery = _companions.send(self.signal)
                for pid in delivery.sent:
                    to_companions[pid] = to_companions.get(pid, 0) + 1
                for pid in delivery.not_declared:
                    not_signalled[pid] = f"{name} not declared"
                for pid, error in delivery.failed:
                    not_signalled[pid] = f"gone ({error})"
                time.sleep(self.interval)  # pacing of the storm, not synchronisation
            details: dict[str, object] = {"companions_sent": to_companions}
            if not_signalled:
                details["companions_not_signalled"] = not_signalled
            ctx.record(
                "signal-storm-done",
                point=point,
                signal=name,
                sent=sent,
                handled_so_far=handled[0],
                **details,
            )

        threading.Thread(target=storm, name="tpbcast-signal-storm", daemon=True).start()


@dataclass(frozen=True)
class Raise(FaultAction):
    """Raise ``exc`` (an exception instance or class) from the point."""

    exc: BaseException | type[BaseException] = field(
        default_factory=lambda: RuntimeError("injected fault")
    )

    def describe(self) -> str:
        exc = self.exc
        if isinstance(exc, BaseException):
            return f"Raise({type(exc).__name__}({str(exc)!r}))"
        return f"Raise({exc.__name__})"

    def fire(self, ctx: FaultRecorder, point: str) -> None:
        raise self.exc


@dataclass(frozen=True)
class PlannedFault:
    """Fire ``action`` on ``rank`` the ``hit``-th time it reaches ``point`` (1-based)."""

    rank: int
    point: str
    action: FaultAction
    hit: int = 1

    def describe(self) -> str:
        nth = "" if self.hit == 1 else f" (hit {self.hit})"
        return f"rank {self.rank} at {self.point!r}{nth}: {self.action.describe()}"


def _default_random_actions() -> tuple[FaultAction, ...]:
    return (
        Kill(signal.SIGKILL),
        Kill(signal.SIGTERM),
        Exit(3),
        Segfault(),
        Raise(RuntimeError("injected fault")),
        Pause(0.2),
        SignalStorm(count=20),
    )


class FaultPlan:
    """A chainable schedule of faults: ``FaultPlan().at(1, "after_handshake", Kill())``.

    The plan is read in each rank after fork (it is inherited, never pickled), so actions
    may hold any object.
    """

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed
        self._faults: list[PlannedFault] = []

    def at(self, rank: int, point: str, action: FaultAction, *, hit: int = 1) -> FaultPlan:
        """Schedule ``action`` for ``rank`` at ``point`` (its ``hit``-th arrival there)."""
        if not isinstance(action, FaultAction):
            raise TypeError(
                f"FaultPlan.at(rank={rank}, point={point!r}): expected a FaultAction such as "
                f"Kill() or Exit(1), got {action!r} (type={type(action).__name__})"
            )
        if rank < 0:
            raise ValueError(f"FaultPlan.at: rank must be >= 0, got {rank}")
        if hit < 1:
            raise ValueError(f"FaultPlan.at: hit counts from 1, got {hit}")
        if not point or "\n" in point:
            raise ValueError(f"FaultPlan.at: point must be a non-empty line, got {point!r}")
        self._faults.append(PlannedFault(rank, point, action, hit))
        return self

    def for_rank(self, rank: int) -> dict[str, tuple[PlannedFault, ...]]:
        """This rank's faults keyed by point, in plan order."""
        mine: dict[str, list[PlannedFault]] = {}
        for fault in self._faults:
            if fault.rank == rank:
                mine.setdefault(fault.point, []).append(fault)
        return {point: tuple(faults) for point, faults in mine.items()}

    def validate(self, world_size: int) -> None:
        """Refuse faults for ranks that will not exist (a silent no-op would lie)."""
        for fault in self._faults:
            if fault.rank >= world_size:
                raise ValueError(
                    f"FaultPlan has a fault for rank {fault.rank} but world_size is "
                    f"{world_size}: {fault.describe()}"
                )

    def __iter__(self) -> Iterator[PlannedFault]:
        return iter(self._faults)

    def __len__(self) -> int:
        return len(self._faults)

    def __repr__(self) -> str:
        return f"FaultPlan(seed={self.seed}, faults={len(self._faults)})"

    def describe(self) -> str:
        """One line per planned fault, with the seed when the plan was randomised."""
        head = f"FaultPlan seed={self.seed}" if self.seed is not None else "FaultPlan"
        return "\n".join([head, *(f"  {f.describe()}" for f in self._faults)])

    @classmethod
    def random(
        cls,
        seed: int,
        world_size: int,
        *,
        points: Sequence[str],
        actions: Sequence[FaultAction] | None = None,
        count: int = 1,
        ranks: Sequence[int] | None = None,
        max_hit: int = 1,
    ) -> FaultPlan:
        """A reproducible schedule: ``count`` faults drawn with ``random.Random(seed)``.

        Same arguments, same plan, in every process and on every machine. Pass the seed
        printed by a failing report (``TPBCAST_SEED``) to replay it.
        """
        if not points:
            raise ValueError("FaultPlan.random: points must name at least one fault point")
        pool = tuple(actions) if actions is not None else _default_random_actions()
        if not pool:
            raise ValueError("FaultPlan.random: actions must not be empty")
        candidates = tuple(ranks) if ranks is not None else tuple(range(world_size))
        if not candidates:
            raise ValueError("FaultPlan.random: no rank to fault")
        rng = random.Random(seed)  # noqa: S311 - reproducible schedules, not secrets
        plan = cls(seed=seed)
        for _ in range(count):
            plan.at(
                rng.choice(candidates),
                rng.choice(tuple(points)),
                rng.choice(pool),
                hit=rng.randint(1, max(1, max_hit)),
            )
        return plan
