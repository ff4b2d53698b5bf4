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
and raises ``AssertionError`` with the clause message instead: a hard check, still
attributed to its clause by the message's ``"ID: "`` prefix.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Final

from ._results import Verdict

__all__ = [
    "CLAUSE_MESSAGE_RE",
    "Check",
    "CheckLog",
    "active_log",
    "begin",
    "clause_of_message",
    "end",
    "record",
]

# A clause message starts with its id: "INIT-10: <requirement> -- [rank N: ]got ...".
CLAUSE_MESSAGE_RE: Final = re.compile(r"^([A-Z]+-\d+): ")
_RANK_RE: Final = re.compile(r"^[A-Z]+-\d+: .*? -- rank (\d+): got ", re.DOTALL)


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


def clause_of_message(text: str) -> tuple[str, int | None] | None:
    """``(clause id, rank)`` named by a clause message, or None if it names none."""
    match = CLAUSE_MESSAGE_RE.match(text)
    if match is None:
        return None
    rank = _RANK_RE.match(text)
    return match.group(1), int(rank.group(1)) if rank else None


def record(clause_id: str, passed: bool, message: str, *, rank: int | None = None) -> bool:
    """Record one check of ``clause_id`` in the running test's log; return ``passed``.

    Outside a conformance test's own process a failed check raises ``AssertionError``
    with ``message`` (see the module docstring), so it is never lost.
    """
    log = active_log()
    if log is None:
        if not passed:
            raise AssertionError(message)
        return True
    verdict = Verdict.PASS if passed else Verdict.FAIL
    log.checks.append(Check(clause_id, verdict, message, rank))
    return passed
