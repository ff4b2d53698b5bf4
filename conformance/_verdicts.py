"""How one test's outcome becomes a conformance verdict: the rules, in one place.

A conformance suite is only as useful as the line it draws between "the implementation
is wrong" and "we could not tell".  The rules (also in SPEC.md's verdict section, via the
plugin's docs) are:

* **PASS**: every phase of the test passed (per clause: see below).
* **UNSUPPORTED**: the test was skipped by :func:`require` (or the harness raised
  ``CapabilityMissing``): the implementation does not declare a capability the clause
  needs, or the environment cannot stage the precondition (WPT's PRECONDITION_FAILED).
  Any other skip is reported UNSUPPORTED too, with its reason, so nothing is silently
  dropped.
* **FAIL**: the implementation was judged and found wrong: an ``AssertionError`` (or
  ``pytest.fail``) in the test body or teardown, or a rank group that failed
  (``RankGroupFailure``) because a rank raised, exited non-zero or died by a signal.
  Rank targets are thin calls into the implementation plus checks, so whatever a rank
  does is the implementation's doing.
* **ERROR**: no verdict could be reached: any failure while setting the test up (a
  fixture: the implementation does not load, no workdir), a non-assertion exception in
  the test body or teardown (a suite or harness defect, a broken environment), or a
  group whose first
  failure is a rank the harness had to stop (``TIMED_OUT``): a hang under an
  oversubscribed CPU is inconclusive, so clauses that promise a deadline measure it
  themselves and assert (FAIL) instead of relying on the harness timeout.  A test that
  could not stage its fault raises ``PreconditionError`` (in the body or in a rank):
  ERROR too, since nothing about the implementation was judged.

When several phases fail, the earliest decides (setup, then call, then teardown): a
teardown error after a call FAIL keeps the FAIL.

**Per clause, not per test.**  Every check names exactly one clause (``_checks``): a soft
check (``_support.check``) is recorded and the test goes on; a failure that ends the test
is attributed to the clause it carries (``CheckFailed.clause_id``, also raised inside a
rank, whose exception the harness hands back as an object; ``PreconditionError.clause_id``)
or, for a hand-written ``assert``, the clause its message starts with (``"INIT-10: ..."``).
:func:`clause_checks` folds one test's record into checks per cited clause:

* a clause's own checks stand as recorded, so a SHOULD wording check can only fail its
  SHOULD clause, never the MUST clause the same test judges;
* a failure that names no clause (a setup error, a skip, a rank that died or raised the
  implementation's own exception, a suite defect) applies to every cited clause that has
  no FAIL of its own: the test did not finish, so none of them can be claimed to hold;
* a cited clause with no check of its own gets one implicit PASS if the test passed (its
  success is the check), or ERROR "not judged" if the test stopped at another clause's
  failed check first.  So a SHOULD check must be soft (never stop the test): a hard
  SHOULD failure would leave a later MUST clause unjudged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

import pytest

from tpbcast.harness import CapabilityMissing, RankGroupFailure, RankOutcome, Status
from tpbcast.harness.env import EnvironmentFaultUnavailable

from ._checks import Check, CheckFailed, PreconditionError, clause_of_message
from ._results import Verdict

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

__all__ = [
    "Judgement",
    "NotApplicable",
    "NotStaged",
    "Unsupported",
    "clause_checks",
    "judge",
    "judge_exception",
    "require",
]

# Longest message carried into the reports; the full text stays in pytest's output.
MESSAGE_LIMIT: Final = 4000

# pytest's assertion rewriting appends "\nassert <expression>" to the message: the
# clause message already says what was observed, so the reports keep the message only
# (pytest's own output still shows the full explanation).
_REWRITE_TAIL: Final = "\nassert "


class _HasCapabilities(Protocol):
    name: str

    def supports(self, capability: str) -> bool: ...


class Unsupported(pytest.skip.Exception):  # type: ignore[name-defined,misc]
    """A clause needs what the implementation (or the environment) does not offer.

    A pytest skip, so pytest reports it as skipped; the plugin maps it to UNSUPPORTED,
    which is neither PASS nor FAIL.
    """


class NotApplicable(pytest.skip.Exception):  # type: ignore[name-defined,misc]
    """Every clause the test cites belongs to another transport's profile: the test is not
    run, and each of its clauses is NOT_APPLICABLE (never FAIL, never PASS)."""


class NotStaged(pytest.skip.Exception):  # type: ignore[name-defined,misc]
    """The test stages its fault through another transport (a uds-v1 rogue peer or root, a
    socket trick): it cannot run against this implementation, and each of its checks is
    NOT_APPLICABLE.  Never PASS: a core clause that only such tests cite is UNSUPPORTED
    ("not staged on this transport")."""


def require(impl: _HasCapabilities, *capabilities: str) -> None:
    """Skip the current test as UNSUPPORTED unless ``impl`` declares every capability.

    :param impl: a ``tpbcast.harness.Implementation`` (anything with ``name`` and
        ``supports(capability)``).
    :raises Unsupported: naming the implementation and the missing capabilities.
    """
    missing = [cap for cap in capabilities if not impl.supports(cap)]
    if missing:
        names = ", ".join(repr(cap) for cap in missing)
        raise Unsupported(
            f"UNSUPPORTED: implementation {impl.name!r} does not declare capability {names}"
        )


@dataclass(frozen=True)
class Judgement:
    """The verdict of one test phase (or a whole test) and why."""

    verdict: Verdict
    message: str = ""
    failing_rank: int | None = None
    clause_id: str | None = None
    """The one clause this outcome judges, if its message names one (else: every clause)."""


def _clip(text: str) -> str:
    if len(text) <= MESSAGE_LIMIT:
        return text
    return text[: MESSAGE_LIMIT - 20] + "\n[... message cut ...]"


def _is_capability_missing(exc: BaseException) -> bool:
    return isinstance(exc, CapabilityMissing | Unsupported | EnvironmentFaultUnavailable)


def _judge_group_failure(exc: RankGroupFailure) -> Judgement:
    """A group failed: FAIL unless the first failure is a harness timeout or a rank that
    could not stage its fault; the failing rank is the outcome's own field."""
    first = exc.result.first_failure
    headline = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if first is None:
        # No failing rank but not ok: survivors (orphans) or leaked fds: hygiene, FAIL.
        return Judgement(Verdict.FAIL, _clip(str(exc)), None)
    raised = first.exception
    if raised is not None and _is_capability_missing(raised):
        # Raised inside a rank (e.g. the exec: adapter refused a call before its driver
        # was asked): no verdict on the implementation, as in the test body.
        return Judgement(Verdict.UNSUPPORTED, _clip(f"rank {first.rank}: {raised}"), first.rank)
    if isinstance(raised, PreconditionError):
        message = f"rank {first.rank} could not stage the test (no verdict): {raised}"
        return Judgement(Verdict.ERROR, _clip(message), first.rank, raised.clause_id)
    if first.status is Status.TIMED_OUT:
        return Judgement(
            Verdict.ERROR,
            _clip(f"{headline} (the harness deadline fired: inconclusive)\n{exc}"),
            first.rank,
        )
    detail = first.exc_message or ""
    cid = _clause_of_failed_check(first)
    if cid is not None:
        # A clause check that failed inside the rank: judged like one in the test body.
        text = detail.split(_REWRITE_TAIL, 1)[0]
        return Judgement(Verdict.FAIL, _clip(f"{text}\n\n{exc}"), first.rank, cid)
    message = headline if not detail or detail in headline else f"{headline}\n{detail}"
    return Judgement(Verdict.FAIL, _clip(f"{message}\n\n{exc}"), first.rank)


def _clause_of_failed_check(outcome: RankOutcome) -> str | None:
    """The clause a rank's failed check judged: the field of a :class:`CheckFailed`, or the
    ``"ID: "`` prefix of a plain ``assert`` in a rank (None for any other exception)."""
    raised = outcome.exception
    if isinstance(raised, CheckFailed):
        return raised.clause_id
    if isinstance(raised, AssertionError):
        return clause_of_message(str(raised).split(_REWRITE_TAIL, 1)[0])
    return None


def _judge_assertion(exc: BaseException, text: str) -> Judgement:
    """A failed check: FAIL with the clause message, its clause and (from a
    :class:`CheckFailed`) the rank it names."""
    if isinstance(exc, CheckFailed):
        return Judgement(Verdict.FAIL, _clip(str(exc)), exc.rank, exc.clause_id)
    text = text.split(_REWRITE_TAIL, 1)[0]
    return Judgement(Verdict.FAIL, _clip(text), None, clause_of_message(text))


def judge_exception(when: str, exc: BaseException, text: str) -> Judgement:  # noqa: PLR0911
    """The verdict for a phase that raised ``exc`` (``text`` is pytest's short repr).

    :param when: ``"setup"``, ``"call"`` or ``"teardown"``.
    """
    if isinstance(exc, NotApplicable | NotStaged):
        return Judgement(Verdict.NOT_APPLICABLE, _clip(str(getattr(exc, "msg", None) or exc)))
    if _is_capability_missing(exc):
        return Judgement(Verdict.UNSUPPORTED, _clip(str(getattr(exc, "msg", None) or exc)))
    if isinstance(exc, pytest.skip.Exception):
        reason = str(getattr(exc, "msg", None) or exc)
        return Judgement(Verdict.UNSUPPORTED, _clip(f"skipped: {reason}"))
    if when == "setup":
        # A fixture could not stage the test (the implementation does not load, a
        # workdir cannot be made): nothing about the clause was judged.
        return Judgement(Verdict.ERROR, _clip(f"setup failed (no verdict reached): {text}"))
    if isinstance(exc, RankGroupFailure):
        return _judge_group_failure(exc)
    if isinstance(exc, PreconditionError):
        return Judgement(
            Verdict.ERROR,
            _clip(f"could not stage the test (no verdict): {exc}"),
            None,
            exc.clause_id,
        )
    if isinstance(exc, AssertionError | pytest.fail.Exception):
        # The checks' messages start with the clause ("WIRE-3: ... -- got ..."); the
        # exception type adds nothing for a reader of the report.
        for prefix in ("AssertionError: ", "Failed: "):
            text = text.removeprefix(prefix)
        return _judge_assertion(exc, text)
    return Judgement(
        Verdict.ERROR, _clip(f"{type(exc).__name__} during {when} (no verdict reached): {text}")
    )


_SEVERITY: Final = {
    Verdict.PASS: 0,
    Verdict.UNSUPPORTED: 1,
    Verdict.NOT_APPLICABLE: 1,
    Verdict.ERROR: 2,
    Verdict.FAIL: 2,
}


def judge(phases: Iterable[Judgement | None]) -> Judgement:
    """Combine phase judgements (in setup, call, teardown order) into the test's verdict.

    The earliest non-PASS phase decides; ``None`` (phase passed or did not run) is ignored.
    """
    for phase in phases:
        if phase is not None and _SEVERITY.get(phase.verdict, 2) > 0:
            return phase
    return Judgement(Verdict.PASS)


_IMPLICIT_NOTE: Final = "the test passed (it records no separate check for this clause)"


def clause_checks(
    cited: Sequence[str],
    recorded: Iterable[Check],
    phases: Iterable[Judgement | None],
    *,
    not_applicable: Mapping[str, str] | None = None,
) -> list[Check]:
    """One test's checks, per clause: the rules in the module docstring.

    :param cited: the clause ids the test's ``clause`` marker names, in order.
    :param recorded: the soft checks the test made (``_checks.CheckLog.checks``).
    :param phases: the judgement of each phase that raised (setup, call, teardown order).
    :param not_applicable: cited clauses of another transport's profile -> why; each gets
        exactly one NOT_APPLICABLE check, whatever the test did (a group failure naming no
        clause never decides a clause the implementation cannot be reached for).
    """
    outside = dict(not_applicable or {})
    judged = [cid for cid in cited if cid not in outside]
    own = [check for check in recorded if check.clause_id not in outside]
    checks = [c for c in _applicable_checks(judged, own, phases) if c.clause_id not in outside]
    checks.extend(Check(cid, Verdict.NOT_APPLICABLE, _clip(why)) for cid, why in outside.items())
    return checks


def _applicable_checks(
    cited: Sequence[str], recorded: Iterable[Check], phases: Iterable[Judgement | None]
) -> list[Check]:
    """:func:`clause_checks` for the cited clauses of the implementation's own profile."""
    checks = list(recorded)
    unattributed: Judgement | None = None
    stopped_at: Judgement | None = None
    for phase in phases:
        if phase is None or phase.verdict is Verdict.PASS:
            continue
        stopped_at = stopped_at or phase
        if phase.clause_id is not None:
            checks.append(Check(phase.clause_id, phase.verdict, phase.message, phase.failing_rank))
        elif unattributed is None:
            unattributed = phase
    out = [
        check
        if check.clause_id in cited
        else Check(
            check.clause_id,
            Verdict.ERROR,
            f"suite defect: a check of {check.clause_id} in a test that does not cite it "
            f"(add it to the clause marker): {check.message}",
            check.rank,
        )
        for check in checks
    ]
    for cid in cited:
        own = [c for c in out if c.clause_id == cid]
        if unattributed is not None and not any(c.verdict is Verdict.FAIL for c in own):
            out.append(
                Check(cid, unattributed.verdict, unattributed.message, unattributed.failing_rank)
            )
        elif not own and stopped_at is not None:
            # Not reached: the test stopped at another clause's failed check first.
            first = (stopped_at.message.splitlines() or [""])[0]
            note = f"not judged: the test stopped before checking {cid} ({first})"
            out.append(Check(cid, Verdict.ERROR, _clip(note)))
        elif not own:
            out.append(Check(cid, Verdict.PASS, _IMPLICIT_NOTE))
    return out
