"""What happened to each rank of a group, and how to say it to a human.

Every rank ends in exactly one :class:`Status`; the runner never guesses. The report is the
product: a test that fails because rank 3 was SIGKILLed while rank 0 waited must say so in
the first line, with the stack of every rank that was still running, so nobody has to rerun
it under a debugger to learn what happened.
"""

from __future__ import annotations

import enum
import os
import re
import signal as _signal
from dataclasses import dataclass, field

from ._leaks import Leak

__all__ = [
    "FaultRecord",
    "GroupResult",
    "RankGroupFailure",
    "RankOutcome",
    "Status",
    "signal_name",
]

# How many trailing lines of captured output the report shows per stream.
_TAIL_LINES = 40
# The longest exception message a one-line summary quotes (the rest is in the traceback).
_SUMMARY_CHARS = 200
#: Set to 1 for stack dumps with every frame: the report otherwise cuts the frames below
#: the rank's entry point (the harness, and the test runner the rank was forked from).
FULL_STACKS_ENV = "TPBCAST_FULL_STACKS"
# The frame of the harness that calls the target: everything below it is not the test's.
_ENTRY_FRAME = re.compile(r'^\s*File ".*[/\\]harness[/\\]_rank\.py", line \d+ in _run$')


class Status(enum.Enum):
    """How a rank ended.

    ``OK`` and ``RAISED`` come from the rank's own result record; ``EXITED`` and
    ``SIGNALED`` mean the process ended without one (``os._exit``, a crash, a signal);
    ``TIMED_OUT`` means the harness had to kill it (group deadline or fail-fast grace);
    ``UNKNOWN`` means it ended but another waiter in the parent (a SIGCHLD handler, a
    ``waitpid(-1)``) reaped it first, so its exit status is lost (its result record, if
    any, is still reported: ``value`` or ``exc_*``).  ``SKIPPED``: the rank raised
    ``unittest.SkipTest`` / ``pytest.skip`` or exited with one of the run's skip exit
    codes; the reason is in ``exc_message``.  A skip is not a failure.
    """

    OK = "ok"
    RAISED = "raised"
    EXITED = "exited"
    SIGNALED = "signaled"
    TIMED_OUT = "timed out"
    UNKNOWN = "unknown"
    SKIPPED = "skipped"


def signal_name(signum: int | None) -> str | None:
    """``9`` -> ``"SIGKILL"``; unknown numbers keep their number so nothing is hidden."""
    if signum is None:
        return None
    try:
        return _signal.Signals(signum).name
    except ValueError:
        pass
    # Real-time signals have no enum member between SIGRTMIN and SIGRTMAX; name them
    # the way kill -l and strsignal do, so "signal 36" never hides "SIGRTMIN+2".
    low, high = int(_signal.SIGRTMIN), int(_signal.SIGRTMAX)
    if low < signum < high:
        if signum - low <= (high - low) // 2:
            return f"SIGRTMIN+{signum - low}"
        return f"SIGRTMAX-{high - signum}"
    return f"signal {signum}"


@dataclass(frozen=True)
class FaultRecord:
    """One fault that fired (or that a target declared with ``ctx.record``).

    Written to the rank's result channel *before* the fault acts, so it survives the
    rank's death: a test proves the fault happened, then judges the reaction.
    ``time`` is seconds since the group started (all ranks share one monotonic clock).
    """

    rank: int
    point: str
    action: str
    detail: str
    time: float

    def describe(self) -> str:
        """One line: ``t=+0.012s rank 1 at 'after_handshake': Kill(SIGKILL)``."""
        where = f" at {self.point!r}" if self.point else ""
        detail = f" ({self.detail})" if self.detail else ""
        return f"t=+{self.time:.3f}s rank {self.rank}{where}: {self.action}{detail}"


@dataclass(frozen=True)
class RankOutcome:
    """The fate of one rank. ``value`` is the unpickled return value of the target."""

    rank: int
    pid: int
    status: Status
    value: object = None
    exc_type: str | None = None
    exc_message: str | None = None
    traceback: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    signal_name: str | None = None
    stdout: str = ""
    stderr: str = ""
    duration: float = 0.0
    stack_dump: str | None = None
    faults: tuple[FaultRecord, ...] = ()
    leaked_fds: tuple[str, ...] = ()
    note: str = ""
    stopped_by: int | None = None
    """TIMED_OUT by fail-fast: the rank whose failure stopped this one (None: a hang)."""
    exception: BaseException | None = field(default=None, repr=False, compare=False)
    """The exception the rank raised, as an object (``exc_type``/``exc_message`` name and
    show it): for ``isinstance`` and its fields.  None unless RAISED, or when it did not
    pickle across the fork."""

    @property
    def ok(self) -> bool:
        """Returned normally (or skipped) and leaked no fds (only checked with
        ``check_fds=True``).  A skip is not a failure: see :attr:`GroupResult.skipped`."""
        return self.status in (Status.OK, Status.SKIPPED) and not self.leaked_fds

    @property
    def verdict(self) -> str:
        """The status as a report shows it: its name, or ``STOPPED`` for a rank that
        fail-fast stopped (it did not hang on its own; ``status`` stays TIMED_OUT)."""
        return "STOPPED" if self.stopped_by is not None else self.status.name

    def summary(self) -> str:
        """One line naming the rank and its fate, e.g. ``rank 1 SIGNALED by SIGKILL``.

        Always one line: a multi-line exception message is cut to its first line (and
        at most 200 characters); the whole message is in the traceback."""
        head = f"rank {self.rank}"
        if self.status is Status.OK and self.leaked_fds:
            return f"{head} OK but leaked {len(self.leaked_fds)} fd(s)"
        if self.stopped_by is not None:
            how = f", killed by {self.signal_name}" if self.signal_name else ""
            return f"{head} stopped: rank {self.stopped_by} failed (fail-fast{how})"
        fate = {
            Status.OK: "OK",
            Status.SKIPPED: f"SKIPPED: {one_line(self.exc_message or 'no reason given')}",
            Status.RAISED: f"RAISED {self.exc_type}: {one_line(self.exc_message or '')}",
            Status.EXITED: f"EXITED with code {self.exit_code} (no result: os._exit or crash)",
            Status.SIGNALED: f"SIGNALED by {self.signal_name}",
            Status.UNKNOWN: f"UNKNOWN: {self.note or 'exit status unknown (reaped elsewhere)'}",
        }.get(self.status)
        if fate is not None:
            return f"{head} {fate}"
        how = f", killed by {self.signal_name}" if self.signal_name else ""
        return f"{head} TIMED OUT{how}" + (f" ({self.note})" if self.note else "")

    def fate(self) -> str:
        """:meth:`summary` for a report that also shows the traceback: a RAISED rank's
        line then leaves the message to the traceback's last line, so each message
        appears once in a report."""
        return fate_line(self)

    def stack(self, *, full: bool | None = None) -> str | None:
        """The stack dump as a report shows it: cut at the rank's entry point unless
        ``full`` (default: ``TPBCAST_FULL_STACKS=1``); None if there is none."""
        return trim_stack(self.stack_dump, full=full) if self.stack_dump else None

    def report(self) -> str:
        """This rank's section of :meth:`GroupResult.report`: fate, exit code or signal,
        traceback, faults fired, leaked fds, stack dump and the tails of its output."""
        return "\n".join(_rank_section(self))


def one_line(text: str, limit: int = _SUMMARY_CHARS) -> str:
    """The first non-empty line of ``text``, at most ``limit`` characters, saying how much
    was cut: ``first line [+3 lines]``.  A headline stays one line whatever the message."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    first = lines[0].strip()
    cut = ""
    if len(first) > limit:
        first, cut = first[: limit - 3] + "...", "cut"
    if len(lines) > 1:
        cut = f"+{len(lines) - 1} line{'s' if len(lines) > 2 else ''}"
    return f"{first} [{cut}]" if cut else first


def trim_stack(dump: str, *, full: bool | None = None) -> str:
    """A faulthandler dump without the frames below the rank's entry point.

    A rank is forked from its caller, so a dump also lists every frame that led to the
    fork: the harness, then pytest, pluggy and runpy (38 of 47 frames in one measured
    dump).  Each thread's frames stop at the harness frame that calls the target,
    with one line saying how many were cut.  ``full=True`` (or ``TPBCAST_FULL_STACKS=1``)
    keeps everything; ``RankOutcome.stack_dump`` always has the whole dump.
    """
    if full is None:
        full = os.environ.get(FULL_STACKS_ENV, "") not in ("", "0")
    if full:
        return dump
    out: list[str] = []
    cutting = 0
    for line in dump.splitlines():
        if cutting and line.startswith("  File "):
            cutting += 1
            continue
        if cutting:
            out.append(_cut_note(cutting))
            cutting = 0
        if _ENTRY_FRAME.match(line):
            cutting = 1
            continue
        out.append(line)
    if cutting:
        out.append(_cut_note(cutting))
    return "\n".join(out)


def _cut_note(frames: int) -> str:
    return (
        f"  [{frames} frame(s) of the harness and of the rank's caller cut; "
        f"all of them: {FULL_STACKS_ENV}=1 or RankOutcome.stack_dump]"
    )


def _tail(text: str, lines: int = _TAIL_LINES) -> str:
    parts = text.splitlines()
    if len(parts) <= lines:
        return text.rstrip("\n")
    return f"[... {len(parts) - lines} earlier lines cut ...]\n" + "\n".join(parts[-lines:])


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


@dataclass(frozen=True)
class GroupResult:
    """All outcomes of one ``run_ranks`` call (``outcomes[r]`` is rank ``r``).

    ``survivors`` are pids of ours still alive after reaping (always a bug, and the runner
    SIGKILLs them); ``leftover_files`` are paths (relative to the workdir) that the ranks
    created and did not remove, excluding the harness's own capture files.
    """

    outcomes: tuple[RankOutcome, ...]
    duration: float
    seed: int
    survivors: tuple[int, ...] = ()
    leftover_files: tuple[str, ...] = ()
    leaks: tuple[Leak, ...] = ()
    """What the group left behind, proven its own (``_leaks``): outside its workdir
    (removed after the test, or at exit) and in it (removed with it); reported here and
    by the conformance plugin."""
    label: str = ""
    workdir: str = ""
    timeout: float = 0.0
    failure_order: tuple[int, ...] = field(default=(), repr=False)

    @property
    def world_size(self) -> int:
        return len(self.outcomes)

    @property
    def ok(self) -> bool:
        """Every rank returned normally (no leaked fds) and no process survived."""
        return all(o.ok for o in self.outcomes) and not self.survivors

    @property
    def skipped(self) -> RankOutcome | None:
        """The first rank that skipped, when no rank failed: the group is then a skipped
        test, not a passed one (``raise_for_failure`` raises ``unittest.SkipTest``)."""
        if not self.ok:
            return None
        return next((o for o in self.outcomes if o.status is Status.SKIPPED), None)

    @property
    def first_failure(self) -> RankOutcome | None:
        """The rank that failed first in time; ranks the harness killed come last.

        A group usually fails in a cascade (rank 2 dies, rank 0 then times out waiting
        for it); the root cause is the earliest failure that the harness did not cause.
        """
        failed = self.failures_first()
        return failed[0] if failed and not failed[0].ok else None

    def replay_hint(self) -> str:
        """The one line that reruns this exact schedule."""
        return f"replay: TPBCAST_SEED={self.seed} (pytest: --tpbcast-seed={self.seed})"

    def headline(self) -> str:
        """First line of the report; names the first failing rank (pytest short summary)."""
        label = f"[{self.label}] " if self.label else ""
        first = self.first_failure
        if first is not None:
            more = sum(1 for o in self.outcomes if not o.ok) - 1
            tail = f" (+{more} more failed rank(s))" if more else ""
            return f"{label}{first.summary()} of world_size {self.world_size}{tail}"
        if self.survivors:
            pids = ", ".join(map(str, self.survivors))
            return f"{label}{len(self.survivors)} process(es) survived the group: pid {pids}"
        skipped = self.skipped
        if skipped is not None:
            return f"{label}{skipped.summary()} of world_size {self.world_size}"
        return f"{label}all {self.world_size} ranks OK in {self.duration:.3f}s"

    def failures_first(self) -> tuple[RankOutcome, ...]:
        """Failed ranks in the order they failed (:attr:`first_failure` first, ranks the
        harness killed last), then the OK ranks by rank number.

        The order of every per-rank report: the root cause leads, so a reader of a
        four-rank cascade does not scroll past three healthy ranks to find it.
        """
        order = {rank: i for i, rank in enumerate(self.failure_order)}
        failed = sorted(
            (o for o in self.outcomes if not o.ok),
            key=lambda o: (o.status is Status.TIMED_OUT, order.get(o.rank, len(order)), o.rank),
        )
        return (*failed, *(o for o in self.outcomes if o.ok))

    def report(self) -> str:
        """Readable text: headline, group facts, then the failed ranks' sections, the first
        failing rank first, and one line per OK rank (their full sections stay available
        as ``outcomes[r].report()``)."""
        lines = [
            self.headline(),
            f"group: world_size={self.world_size} duration={self.duration:.3f}s "
            f"timeout={self.timeout:g}s seed={self.seed} workdir={self.workdir or '-'}",
            self.replay_hint(),
        ]
        if self.survivors:
            lines.append(
                f"SURVIVORS (bug, SIGKILLed by the harness): {', '.join(map(str, self.survivors))}"
            )
        if self.leftover_files:
            lines.append(f"leftover files in workdir: {', '.join(self.leftover_files)}")
        outside = [leak for leak in self.leaks if not leak.in_workdir]
        if outside:
            lines.append("left outside the workdir (removed by the suite after the test):")
            lines.extend(f"  {leak.describe()}" for leak in outside)
        ordered = self.failures_first()
        for outcome in ordered:
            if outcome.ok:
                continue
            lines.append("")
            lines.extend(_rank_section(outcome))
        healthy = [o for o in ordered if o.ok]
        if healthy:
            lines.append("")
            lines.extend(_ok_line(o) for o in healthy)
        return "\n".join(lines)

    def raise_for_failure(self) -> None:
        """Raise :class:`RankGroupFailure` with the full report unless the group is ok;
        raise ``unittest.SkipTest`` with the reason if a rank skipped and none failed.

        The one way to fail a test on a group: pytest and unittest both report the
        failure with this report, and the skip as a skip."""
        if not self.ok:
            raise RankGroupFailure(self)
        skipped = self.skipped
        if skipped is not None:
            import unittest  # stdlib; only needed for a skip

            raise unittest.SkipTest(skip_message(skipped))

    def values(self) -> list[object]:
        """Every rank's return value (index = rank), once the whole group is ok.

        The one-liner a test wants after ``run_ranks``: a failed group raises
        :class:`RankGroupFailure` with the full report instead of handing back values
        of which some are ``None`` because their rank died.
        """
        self.raise_for_failure()
        return [o.value for o in self.outcomes]


def skip_message(o: RankOutcome) -> str:
    """The reason a skipped test reports: ``rank 1: <reason>``."""
    return f"rank {o.rank}: {o.exc_message or 'skipped'}"


def _ok_line(o: RankOutcome) -> str:
    """An OK rank in one line: it is context, not the story (a ten-line section per healthy
    rank buried the failing one).  Faults that fired and the size of its output are named, so
    nothing that might matter is hidden; the text itself is in ``o.report()``."""
    extras = []
    if o.value is not None:
        extras.append(f"value {_short_repr(o.value, 60)}")
    if o.faults:
        extras.append(f"{len(o.faults)} fault(s) fired: " + "; ".join(f.action for f in o.faults))
    for name, text in (("stdout", o.stdout), ("stderr", o.stderr)):
        if text.strip():
            extras.append(f"{name} {len(text.splitlines())} line(s)")
    tail = f" ({', '.join(extras)})" if extras else ""
    if o.status is Status.SKIPPED:
        return f"----- rank {o.rank} (pid {o.pid}): {o.summary()} in {o.duration:.3f}s{tail}"
    return f"----- rank {o.rank} (pid {o.pid}): OK in {o.duration:.3f}s{tail}"


def _rank_section(o: RankOutcome) -> list[str]:
    lines = [
        f"----- rank {o.rank} (pid {o.pid}): {o.verdict} in {o.duration:.3f}s -----",
        f"  {fate_line(o)}",
    ]
    if o.exit_code is not None:
        lines.append(f"  exit code: {o.exit_code}")
    if o.signal is not None:
        lines.append(f"  signal: {o.signal_name} ({o.signal})")
    if o.note:
        lines.append(f"  note: {o.note}")
    if o.status is Status.OK and o.value is not None:
        lines.append(f"  value: {_short_repr(o.value)}")
    if o.traceback:
        lines.append("  traceback:")
        lines.append(_indent(o.traceback.rstrip("\n")))
    if o.faults:
        lines.append("  faults fired:")
        lines.extend(f"    {f.describe()}" for f in o.faults)
    if o.leaked_fds:
        lines.append("  leaked fds (open at target end, not at start):")
        lines.extend(f"    {fd}" for fd in o.leaked_fds)
    if o.stack_dump:
        lines.append("  stack dump when the harness stopped it (faulthandler):")
        lines.append(_indent(trim_stack(o.stack_dump.rstrip("\n"))))
    for name, text in (("stdout", o.stdout), ("stderr", o.stderr)):
        if text.strip():
            lines.append(f"  {name} (tail):")
            lines.append(_indent(_tail(text)))
    return lines


def fate_line(o: RankOutcome) -> str:
    """The summary of a rank whose section shows its traceback, without the exception's
    message (the traceback's last line has it: each message appears once in a report)."""
    if o.status is Status.RAISED and o.traceback:
        return f"rank {o.rank} RAISED {o.exc_type} (message: last line of the traceback)"
    return o.summary()


def _short_repr(value: object, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class RankGroupFailure(AssertionError):  # noqa: N818 - the name is the DESIGN.md contract
    """A group did not succeed. ``str()`` is the full report; its first line names the
    first failing rank. Carries the :class:`GroupResult` as ``.result`` and pickles (so it
    crosses xdist and process boundaries intact)."""

    def __init__(self, result: GroupResult, message: str | None = None) -> None:
        self.result = result
        super().__init__(message if message is not None else result.report())

    def __reduce__(self) -> tuple[type[RankGroupFailure], tuple[GroupResult, str]]:
        return (type(self), (self.result, str(self)))
