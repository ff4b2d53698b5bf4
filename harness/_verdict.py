"""Judging one rank: from its wait status and its result records to a RankOutcome.

Kept apart from the supervisor (``_runner``) so the rules read in one place: a signal beats
a record (the rank died after writing it), a harness kill is TIMED_OUT whatever the rank
managed to write, a record-less exit is EXITED with its code, and a rank that someone else
reaped (a SIGCHLD handler, ``waitpid(-1)`` in the parent) is UNKNOWN: its records are kept,
but nobody can say any more whether it crashed after writing them.
"""

from __future__ import annotations

import os
import pickle
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypedDict

from ._channel import Record, read_all, read_records
from ._outcome import FaultRecord, RankOutcome, Status, signal_name
from ._rank import EXIT_BOOTSTRAP
from ._workdir import Workdir

__all__ = ["RankState", "failed", "judge"]

_REAPED_ELSEWHERE_NOTE = (
    "exit status unknown (reaped elsewhere: another waiter in the parent, e.g. a SIGCHLD "
    "handler or a waitpid(-1) loop, collected pid {pid} before the harness could)"
)
_RECORD_SAYS = {
    "ok": "its result record says it returned",
    "raised": "its result record says it raised",
    "unloadable": "its result record could not be unpickled",
    None: "it wrote no result record (it may have crashed)",
}
_BOOTSTRAP_NOTE = (
    f"exit code {EXIT_BOOTSTRAP}: the harness itself failed inside the rank (e.g. the "
    "target closed the harness's fds); its traceback is on the rank's stderr"
)


@dataclass
class RankState:
    """What the supervisor learns about one rank while the group runs (mutable)."""

    rank: int
    pid: int
    forked_at: float
    status: int | None = None  # raw wait status once reaped (None: not by us, see ended_at)
    ended_at: float | None = None  # set once the rank ended, whoever reaped it
    killed_by_harness: bool = False
    stopped_by: int | None = None  # fail-fast: the rank whose failure stopped this one
    note: str = ""
    records: list[Record] | None = None

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    @property
    def reaped_elsewhere(self) -> bool:
        """Ended, but its wait status went to another waiter in the parent."""
        return self.ended_at is not None and self.status is None


def failed(
    status: int | None, records: list[Record], skip_codes: Mapping[int, str] | None = None
) -> bool:
    """Did a rank that just ended fail (for fail-fast)? Exit 0 without a record does not
    count (it is reported as EXITED, but it is not a crash that strands the others), nor
    does a skip (a ``skipped`` record, or an exit code of ``skip_codes``); a rank reaped
    elsewhere (``status`` None) counts unless its record says it returned or skipped."""
    if status is not None and os.WIFSIGNALED(status):
        return True
    if any(rec.kind == "raised" for rec in records):
        return True
    if any(rec.kind in ("ok", "skipped") for rec in records):
        return False
    if status is None:
        return True
    code = os.WEXITSTATUS(status)
    return code != 0 and not (skip_codes and code in skip_codes)


_MAX_CAPTURE = 8 << 20  # bytes of a rank's stdout/stderr kept (the tail: where it failed)


def _read_text(path: str) -> str:
    try:
        size = os.stat(path).st_size
        if size == 0:
            return ""  # the common case: one syscall instead of open/read/close
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return ""
    try:
        head = ""
        if size > _MAX_CAPTURE:
            os.lseek(fd, size - _MAX_CAPTURE, os.SEEK_SET)
            head = f"[... first {size - _MAX_CAPTURE} bytes cut ...]\n"
        return head + read_all(fd).decode("utf-8", errors="backslashreplace")
    finally:
        os.close(fd)


def judge(r: RankState, wd: Workdir, skip_codes: Mapping[int, str] | None = None) -> RankOutcome:
    """The rank's final, frozen outcome (reads its capture files).

    ``skip_codes`` maps exit codes that mean "skipped" to their reason (torch's
    ``TEST_SKIPS``: a rank that ``sys.exit(73)``s is SKIPPED, not EXITED)."""
    records = r.records if r.records is not None else read_records(wd.file(r.rank, "res"))
    faults = tuple(rec.payload for rec in records if rec.kind == "fault")
    fault_records = tuple(f for f in faults if isinstance(f, FaultRecord))
    leaked: tuple[str, ...] = ()
    final = None
    for rec in records:
        if rec.kind == "fds" and isinstance(rec.payload, tuple):
            leaked = tuple(str(x) for x in rec.payload)
        elif rec.kind in ("ok", "raised", "skipped", "unloadable"):
            final = rec
    status_raw = r.status
    exit_code = sig = None
    if status_raw is not None:
        if os.WIFSIGNALED(status_raw):
            sig = os.WTERMSIG(status_raw)
        elif os.WIFEXITED(status_raw):
            exit_code = os.WEXITSTATUS(status_raw)
    note = r.note or (_BOOTSTRAP_NOTE if exit_code == EXIT_BOOTSTRAP and not final else "")
    # The status and what the result record adds, decided first and built once: a
    # dataclasses.replace() per step re-ran the frozen __init__ (it showed in the
    # parent's per-group cost, where every page touched is a fault after each fork).
    extra: _ResultFields = {}
    if r.killed_by_harness or not r.ended:
        status = Status.TIMED_OUT
    elif r.reaped_elsewhere:
        status = Status.UNKNOWN
        note = _note(
            _REAPED_ELSEWHERE_NOTE.format(pid=r.pid),
            _RECORD_SAYS[final.kind if final is not None else None],
            r.note,
        )
        # The record's value or exception, but UNKNOWN stays: the record may predate a
        # crash on the rank's way out.
        _, extra = _read_result(final, r.rank)
    elif sig is not None:
        status = Status.SIGNALED
    else:
        found, extra = _read_result(final, r.rank)
        status = Status.EXITED if found is None else found
        if found is None and skip_codes and exit_code is not None and exit_code in skip_codes:
            status = Status.SKIPPED
            extra = {"exc_message": skip_codes[exit_code]}
            note = _note(f"exit code {exit_code} means skipped", note)
    return RankOutcome(
        rank=r.rank,
        pid=r.pid,
        status=status,
        stopped_by=r.stopped_by if status is Status.TIMED_OUT else None,
        exit_code=exit_code,
        signal=sig,
        signal_name=signal_name(sig),
        stdout=_read_text(wd.file(r.rank, "out")),
        stderr=_read_text(wd.file(r.rank, "err")),
        duration=(r.ended_at or time.monotonic()) - r.forked_at,
        stack_dump=_read_text(wd.file(r.rank, "stk")) or None,
        faults=fault_records,
        leaked_fds=leaked,
        note=note,
        **extra,
    )


def _note(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _unpickled_or_none(data: object) -> BaseException | None:
    """The rank's exception object, or None if it did not pickle or does not load here
    (the record's type name, message and traceback still say what it was)."""
    if not isinstance(data, bytes):
        return None
    try:
        exc = pickle.loads(data)  # noqa: S301 - written by our own forked rank
    except Exception:
        return None
    return exc if isinstance(exc, BaseException) else None


class _ResultFields(TypedDict, total=False):
    """The RankOutcome fields a result record fills in (typed: a misspelt key fails mypy)."""

    value: object
    exc_type: str
    exc_message: str
    traceback: str
    exception: BaseException | None


def _read_result(final: Record | None, rank: int) -> tuple[Status | None, _ResultFields]:
    """What the rank's last result record says: OK or RAISED, and the RankOutcome fields
    of the value or the exception; ``(None, {})`` for no record or one of an unknown shape
    (the rank is then judged by its exit alone)."""
    if final is None:
        return None, {}
    payload = final.payload
    if final.kind == "ok" and isinstance(payload, dict):
        return Status.OK, {"value": payload.get("value")}
    if final.kind == "raised" and isinstance(payload, dict):
        return Status.RAISED, {
            "exc_type": str(payload.get("type")),
            "exc_message": str(payload.get("message")),
            "traceback": str(payload.get("traceback")),
            "exception": _unpickled_or_none(payload.get("exception")),
        }
    if final.kind == "skipped" and isinstance(payload, dict):
        return Status.SKIPPED, {
            "exc_type": str(payload.get("type")),
            "exc_message": str(payload.get("message")),
        }
    if final.kind == "unloadable":
        return Status.RAISED, {
            "exc_type": "tpbcast.harness.UnloadableResult",
            "exc_message": f"rank {rank}'s result could not be unpickled: {payload}",
        }
    return None, {}
