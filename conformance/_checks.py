"""The checks one conformance test makes, each judging exactly one clause.

A test may judge several clauses (INIT-10's probe rule and FAULT-5's wording of the same
error).  If the test's single outcome decided all of them, a SHOULD wording check would
fail a MUST clause, and the first failed assert would hide every later check.  So checks
are *soft*: :func:`record` appends a :class:`Check` to the log of the running test and
returns; the test goes on.  The plugin (``plugin.py``) opens a log before each test and
folds it into per-clause verdicts after teardown (``_verdicts.clause_checks``).

The log belongs to the process that runs the test.  A forked rank inherits a copy that
nobody would ever read, so outside that process (or outside a conformance run, e.g. when
another runner imports a test module) :func:`record` refuses to record a failure softly
and raises :class:`CheckFailed` instead: a hard check that carries its clause id and rank
as fields, also across the fork (the harness hands the rank's exception back as an object).
A test that cannot stage what it judges raises :class:`PreconditionError` for its clause.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Final

from ._results import OPTIONAL_ABSENT, Verdict

__all__ = [
    "CLAUSE_MESSAGE_RE",
    "Check",
    "CheckFailed",
    "CheckLog",
    "PreconditionError",
    "active_log",
    "begin",
    "clause_of_message",
    "end",
    "record",
    "record_absent",
    "record_unjudged",
]

# A clause message starts with its id: "INIT-10: <requirement> -- [rank N: ]got ...".
CLAUSE_MESSAGE_RE: Final = re.compile(r"^([A-Z]+-\d+): ")


class CheckFailed(AssertionError):  # noqa: N818 - a verdict (FAIL), read as "a check failed"
    """A failed check of ``clause_id`` that no log could record (a hard check).

    An ``AssertionError``, so pytest and any other runner show it as a failed test; the
    verdict rules read ``clause_id`` and ``rank`` from the fields, never from the text.
    """

    def __init__(self, clause_id: str, message: str, rank: int | None = None) -> None:
        super().__init__(message)
        self.clause_id = clause_id
        self.rank = rank

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.clause_id, str(self), self.rank))


class PreconditionError(RuntimeError):
    """A test could not stage what it judges for ``clause_id`` (its fault did not happen).

    Deliberately not an ``AssertionError``: the verdict rules map it to ERROR for that
    clause only (inconclusive), never to FAIL (the implementation was not shown wrong) nor
    PASS; a MUST clause with an ERROR still fails the run.
    """

    def __init__(self, clause_id: str, what: str) -> None:
        super().__init__(f"{clause_id}: precondition not met, nothing judged: {what}")
        self.clause_id = clause_id
        self.what = what

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.clause_id, self.what))


@dataclass(frozen=True)
class Check:
    """One judged check: the clause it judges, its verdict, what was observed."""

    clause_id: str
    verdict: Verdict
    message: str
    rank: int | None = None


@dataclass
class CheckLog:
    """The checks of one running test, in the order they were made."""

    owner_pid: int = field(default_factory=os.getpid)
    checks: list[Check] = field(default_factory=list)

    def clause_ids(self) -> tuple[str, ...]:
        """The clauses judged so far, first check first."""
        return tuple(dict.fromkeys(c.clause_id for c in self.checks))


_active: CheckLog | None = None


def begin() -> CheckLog:
    """Open a fresh log for the test about to run (the plugin calls this)."""
    global _active  # noqa: PLW0603 - one running test per process, by pytest's design
    _active = CheckLog()
    return _active


def end() -> CheckLog | None:
    """Close the running test's log and return it (None if none was open)."""
    global _active
    log, _active = _active, None
    return log


def active_log() -> CheckLog | None:
    """The log of the test running in *this* process, if any (never a forked copy)."""
    if _active is None or _active.owner_pid != os.getpid():
        return None
    return _active


def clause_of_message(text: str) -> str | None:
    """The clause id a plain assertion message starts with (``"ID: ..."``), or None.

    For hand-written ``assert ..., "INIT-3: ..."`` in a test: the suite's own checks
    raise :class:`CheckFailed`, which carries its clause as a field.
    """
    match = CLAUSE_MESSAGE_RE.match(text)
    return match.group(1) if match else None


def record(clause_id: str, passed: bool, message: str, *, rank: int | None = None) -> bool:
    """Record one check of ``clause_id`` in the running test's log; return ``passed``.

    Outside a conformance test's own process a failed check raises :class:`CheckFailed`
    (see the module docstring), so it is never lost.
    """
    log = active_log()
    if log is None:
        if not passed:
            raise CheckFailed(clause_id, message, rank)
        return True
    verdict = Verdict.PASS if passed else Verdict.FAIL
    log.checks.append(Check(clause_id, verdict, message, rank))
    return passed


def record_unjudged(clause_id: str, verdict: Verdict, message: str) -> None:
    """Record that a test could NOT judge ``clause_id`` (UNSUPPORTED: never staged; ERROR:
    too few cases staged to tell; NOT_TESTED: this test's staging depends on another
    clause the implementation does not meet, and another test stages the clause without
    it), without stopping the test.

    A soft counterpart of :class:`PreconditionError` for a test that judges several clauses
    over many cases (the fuzz tests): each clause gets its own staging verdict, so a clause
    no case staged is never PASS because the test as a whole ran.  A NOT_TESTED check
    counts as absent in the clause's verdict (it neither passes the clause nor keeps the
    other test's verdict from deciding it) but stays listed with its reason.  Outside a
    conformance test's process it raises :class:`PreconditionError` (nobody would read the
    log).
    """
    if verdict not in (Verdict.UNSUPPORTED, Verdict.ERROR, Verdict.NOT_TESTED):
        raise ValueError(
            f"record_unjudged takes UNSUPPORTED, ERROR or NOT_TESTED, not {verdict.value}"
        )
    log = active_log()
    if log is None:
        raise PreconditionError(clause_id, message)
    log.checks.append(Check(clause_id, verdict, f"{clause_id}: {message}"))


def record_absent(clause_id: str, what: str) -> None:
    """Record that the test saw the optional behaviour of MAY clause ``clause_id`` absent.

    A PASS check (the clause allows the absence: "optional; if present it must work as
    described") whose message marks it, so the reports can say the option is absent
    (``_results``: the same rule for every MAY clause; against a MUST or SHOULD clause the
    record is a suite defect and counts as ERROR).  Outside a conformance test's process it
    does nothing: an absence is no failure to raise.
    """
    log = active_log()
    if log is None:
        return
    log.checks.append(Check(clause_id, Verdict.PASS, f"{clause_id}: {OPTIONAL_ABSENT}: {what}"))
