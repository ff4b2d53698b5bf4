"""Verdicts as values: per check, per clause and per suite run, and how they aggregate.

Pure data and pure functions, no pytest: the plugin turns test reports into
:class:`CheckResult`, :func:`aggregate` folds them into one :class:`SuiteResult` against the
clause registry, and the report writers (``_report.py``) only read these values.  Keeping the
rules here, in one place and without pytest, makes them testable with synthetic results and
reusable by any other runner.

Aggregation per clause (also stated in SPEC.md, "Verdicts"): a clause whose scope is another
transport's is NOT_APPLICABLE whatever its checks say; else any FAIL -> FAIL; else any ERROR
-> ERROR; else any UNSUPPORTED -> UNSUPPORTED (a clause is PASS only if every check citing it
ran and passed: an incidental PASS never outweighs a decisive check that could not run); no
checks -> NOT_TESTED; only NOT_APPLICABLE checks (every test of the clause stages its fault
through another transport) -> UNSUPPORTED, "not staged on this transport"; else PASS.  A check
whose own verdict is NOT_TESTED (deselected, not run) counts as absent.

Before folding, each check is counted for its clause (:func:`counted_checks`): an adapter's
``EngineNotAsked`` naming a surface the clause is about (``Clause.about``) is a FAIL (the
engine lacks what the clause requires); and when every test of a clause deferred its
staging to another ("not staged by this test", NOT_TESTED) or staged it through another
transport, the deferrals are UNSUPPORTED: no test could stage the clause here.

An optional behaviour observed to be absent (a MAY clause: "optional; if present it must
work as described") is a PASS check whose message carries :data:`OPTIONAL_ABSENT`: the test
staged the situation and saw the implementation not offer the option, which the clause
allows, so the clause holds; nothing was left unjudged, so it is not UNSUPPORTED.  The reports
name such clauses (:attr:`ClauseResult.is_optional_absent`), so the information a MAY clause
is reported for is kept.  The rule is the same for every MAY clause, and only for them:
absence recorded against a MUST or SHOULD clause (at the level its transport is judged at)
is a suite defect, ERROR, never a PASS.

Exit status: 1 iff a MUST clause is FAIL *or ERROR*, or a check cites an unknown clause id
(against an expectations file: iff a result is unexpected, see :func:`exit_status`).
An ERROR means the suite could not judge the clause; a green exit would then claim a MUST
clause holds when nobody checked it, so a MUST ERROR fails the run too.  SHOULD and MAY
results never change the exit status; NOT_TESTED does not either (a prefix selection
deselects most clauses on purpose; "every MUST/SHOULD clause has a test" is the plugin's
collection-time check).
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

from tpbcast.harness.adapter import ENGINE_SURFACES

from .spec import DEFAULT_TRANSPORT, LEVELS, Clause, Spec

__all__ = [
    "EXIT_MUST_FAILED",
    "EXIT_OK",
    "OPTIONAL_ABSENT",
    "STAGED_ELSEWHERE",
    "CheckResult",
    "ClauseResult",
    "ImplementationInfo",
    "SuiteResult",
    "Unjudged",
    "Verdict",
    "aggregate",
    "aggregate_verdict",
    "counted_checks",
    "exit_status",
    "is_optional_absent_message",
    "needs_of_message",
    "surfaces_of_message",
]

EXIT_OK: Final = 0
EXIT_MUST_FAILED: Final = 1

OPTIONAL_ABSENT: Final = "optional behaviour absent (MAY: allowed)"
"""What the message of a check that saw a MAY clause's option absent says after its id."""
_ABSENT_RE: Final = re.compile(r"^[A-Z]+-\d+: " + re.escape(OPTIONAL_ABSENT))

# What an UNSUPPORTED check's message says the implementation did not declare: the wording
# of ``require`` and ``CapabilityMissing`` ("does not declare capability 'x'"), of
# ``EngineNotAsked`` ("UNSUPPORTED (check): ... The adapter decided this itself", its
# capability "adapter:<check>") and of ``ExecNotAsked`` ("... checked by the exec adapter",
# "exec:<check>").  A precondition of the environment ("UNSUPPORTED (precondition): no
# root") names no capability.
# Read from the message because that is what every report (and a JSON report read back)
# keeps; tests/conformance_machinery/test_unsupported_needs.py builds the messages from the
# real classes, so a change of their wording fails there, not silently here.
_UNDECLARED_RE: Final = re.compile(r"does not declare capability ((?:'[^']+'(?:, )?)+)")
_NOT_ASKED_RE: Final = re.compile(
    r"UNSUPPORTED \((?:engine:(\w+); )?([\w.:-]+)\): .*?(The adapter decided this itself|"
    r"checked by the exec adapter)",
    re.DOTALL,
)
_NOT_ASKED_PREFIX: Final = {
    "The adapter decided this itself": "adapter",
    "checked by the exec adapter": "exec",
}


STAGED_ELSEWHERE: Final = "not staged by this test"
"""How the message of a NOT_TESTED check that defers to another staging starts, after its id."""
_ELSEWHERE_RE: Final = re.compile(r"^[A-Z]+-\d+: " + re.escape(STAGED_ELSEWHERE))


def surfaces_of_message(message: str) -> tuple[str, ...]:
    """The engine surfaces an ``EngineNotAsked`` message says the engine lacks."""
    return tuple(dict.fromkeys(s for s, _, _ in _NOT_ASKED_RE.findall(message) if s))


def is_optional_absent_message(message: str) -> bool:
    """True for the message of a check that saw a MAY clause's option absent."""
    return bool(_ABSENT_RE.match(message))


def needs_of_message(message: str) -> tuple[str, ...]:
    """The capabilities (``"adapter:<check>"`` for an adapter's own decision) an UNSUPPORTED
    check's message names as not declared; empty when it names none (not stageable)."""
    found: list[str] = []
    for match in _UNDECLARED_RE.finditer(message):
        found += re.findall(r"'([^']+)'", match.group(1))
    # An engine surface ("engine:lifecycle") names what the engine lacks; without one, the
    # adapter's own check ("adapter:rank_range") is all there is to name.
    found += [
        f"engine:{surface}" if surface else f"{_NOT_ASKED_PREFIX[by]}:{check}"
        for surface, check, by in _NOT_ASKED_RE.findall(message)
    ]
    return tuple(dict.fromkeys(found))


@dataclass(frozen=True)
class Unjudged:
    """A clause judged UNSUPPORTED, with what the implementation did not declare.

    ``needs``: the capabilities (or ``"adapter:<check>"``: an engine surface the adapter
    answered for itself, ``EngineNotAsked``) whose absence left it unjudged; empty when the
    reason is not a capability (not stageable on this implementation).  ``reason``: the
    first line of the deciding check's message.
    """

    clause_id: str
    level: str
    needs: tuple[str, ...]
    reason: str

    def as_json(self) -> dict[str, object]:
        return {
            "id": self.clause_id,
            "level": self.level,
            "needs": list(self.needs),
            "reason": self.reason,
        }

    @property
    def label(self) -> str:
        """``"RESET-9 (generation)"``, or ``"INIT-11 (no capability: <reason>)"``."""
        if self.needs:
            return f"{self.clause_id} ({', '.join(self.needs)})"
        return f"{self.clause_id} (no capability: {self.reason[:120]})"


class Verdict(enum.StrEnum):
    """The verdict of a check or a clause (SPEC.md, "Verdicts")."""

    PASS = "PASS"  # noqa: S105 - a verdict, not a password
    FAIL = "FAIL"
    UNSUPPORTED = "UNSUPPORTED"
    ERROR = "ERROR"
    NOT_TESTED = "NOT_TESTED"
    NOT_APPLICABLE = "NOT_APPLICABLE"
    """The clause (or one check's staging) belongs to another transport's profile."""

    @property
    def is_failure(self) -> bool:
        """FAIL and ERROR: the clause was not shown to hold."""
        return self in (Verdict.FAIL, Verdict.ERROR)


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one check: one clause judged by one test.

    A test makes one or more checks (``_checks``); each names exactly one clause, so
    ``clause_ids`` holds one id for checks the plugin makes (several are accepted from
    other runners, which judge a whole test at once).  ``duration`` is the whole test's.
    ``failing_rank`` is the rank the check names as failing (``None``: no rank failed, or
    the failure was not a rank's).  ``details`` holds extra text fields for the reports
    (seed, replay command, per-rank summaries); it is excluded from hashing.
    """

    test_id: str
    clause_ids: tuple[str, ...]
    verdict: Verdict
    duration: float = 0.0
    failing_rank: int | None = None
    message: str = ""
    details: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        # Accept the verdict's string form ("FAIL") from untyped callers, keep the enum.
        object.__setattr__(self, "verdict", Verdict(self.verdict))
        # Upper-case and de-duplicate (a check citing an id twice counts once), keeping order.
        ids = tuple(dict.fromkeys(c.upper() for c in self.clause_ids))
        object.__setattr__(self, "clause_ids", ids)


@dataclass(frozen=True)
class ClauseResult:
    """One clause's verdict aggregated over the checks that cite it.

    ``expected`` and ``expected_reason`` come from an expectations file
    (``_expectations``): the verdict the implementation is known to get (FAIL or
    UNSUPPORTED) and why.  ``verdict`` stays what was observed; the expectation only
    decides whether it is news (:attr:`is_unexpected`).
    """

    clause: Clause
    verdict: Verdict
    checks: tuple[CheckResult, ...] = ()
    expected: Verdict | None = None
    expected_reason: str = ""
    expected_also: tuple[Verdict, ...] = ()  # a race announced as a list of verdicts

    @property
    def is_expected(self) -> bool:
        """The verdict is the one the expectations file announced."""
        return self.expected is not None and (
            self.verdict is self.expected or self.verdict in self.expected_also
        )

    @property
    def is_regression(self) -> bool:
        """FAIL or ERROR that no expectation announced (an ERROR is never expected)."""
        return self.verdict.is_failure and not self.is_expected

    @property
    def is_stale_expectation(self) -> bool:
        """An expectation the run contradicts without failing (e.g. PASS where FAIL was
        expected): like ``xfail_strict``, the file must be updated.  A clause the run did
        not judge (NOT_TESTED, e.g. deselected) contradicts nothing."""
        not_judged = (
            self.expected,
            *self.expected_also,
            Verdict.NOT_TESTED,
            Verdict.NOT_APPLICABLE,
        )
        if self.expected is None or self.verdict in not_judged:
            return False
        return not self.verdict.is_failure

    @property
    def is_unexpected(self) -> bool:
        """What fails a run judged against an expectations file."""
        return self.is_regression or self.is_stale_expectation

    @property
    def shown_verdict(self) -> str:
        """The verdict as reports print it: ``FAIL (expected: <reason>)`` for a known
        failure, ``PASS (unexpected; expected FAIL: <reason>)`` for a stale expectation."""
        if self.expected is None or self.verdict is Verdict.NOT_TESTED:
            return self.verdict.value
        if self.is_expected:
            return f"{self.verdict.value} (expected: {self.expected_reason})"
        return (
            f"{self.verdict.value} (unexpected; expected {self.expected.value}: "
            f"{self.expected_reason})"
        )

    @property
    def duration(self) -> float:
        """Total duration of the tests judging the clause (each test counted once)."""
        return sum({c.test_id: c.duration for c in self.checks}.values())

    @property
    def deciding_check(self) -> CheckResult | None:
        """The first check whose verdict equals the clause's (what the report shows)."""
        return next((c for c in self.checks if c.verdict is self.verdict), None)

    @property
    def failing_rank(self) -> int | None:
        check = self.deciding_check
        return check.failing_rank if check is not None and self.verdict.is_failure else None

    @property
    def is_optional_absent(self) -> bool:
        """A MAY clause that holds because its option is absent: PASS, and every check that
        passed saw the option absent (none saw it present and working)."""
        passed = [c for c in self.checks if c.verdict is Verdict.PASS]
        return (
            self.verdict is Verdict.PASS
            and self.clause.level == "MAY"
            and bool(passed)
            and all(is_optional_absent_message(c.message) for c in passed)
        )

    def unjudged(self, declared: frozenset[str]) -> Unjudged | None:
        """For an UNSUPPORTED clause: what the implementation (``declared``: its capabilities)
        did not declare, from the clause's own capabilities and its UNSUPPORTED checks."""
        if self.verdict is not Verdict.UNSUPPORTED:
            return None
        needs = [cap for cap in self.clause.capabilities if cap not in declared]
        for check in self.checks:
            if check.verdict is Verdict.UNSUPPORTED:
                needs += [n for n in needs_of_message(check.message) if n not in declared]
        first = (self.message.splitlines() or [""])[0]
        return Unjudged(self.clause.id, self.clause.level, tuple(dict.fromkeys(needs)), first)

    @property
    def message(self) -> str:
        """The deciding check's message for FAIL/ERROR/UNSUPPORTED (and for a MAY clause
        whose option is absent), empty otherwise."""
        if self.is_optional_absent:
            check = self.deciding_check
            return check.message if check is not None else ""
        if self.verdict in (Verdict.PASS, Verdict.NOT_TESTED):
            return ""
        if self.verdict is Verdict.NOT_APPLICABLE:
            return (
                f"scope {self.clause.scope}: not part of this implementation's transport "
                "profile (never FAIL, never part of a conformance claim)"
            )
        check = self.deciding_check
        if check is None and self.verdict is Verdict.UNSUPPORTED:
            staged = next((c for c in self.checks if c.verdict is Verdict.NOT_APPLICABLE), None)
            why = f" ({staged.message})" if staged is not None and staged.message else ""
            return f"not staged on this transport: no test of the clause could run{why}"
        return check.message if check is not None else ""

    @property
    def check_summary(self) -> str:
        """Which checks ran and what each gave (``"PASS 2, UNSUPPORTED 1 of 3 checks"``), so a
        reader sees what a verdict rests on; empty when no check cites the clause."""
        counts: dict[str, int] = {}
        for check in self.checks:
            counts[check.verdict.value] = counts.get(check.verdict.value, 0) + 1
        if not counts:
            return ""
        shown = ", ".join(f"{verdict} {n}" for verdict, n in sorted(counts.items()))
        return f"{shown} of {len(self.checks)} check(s)"

    @property
    def is_must_failure(self) -> bool:
        return self.clause.level == "MUST" and self.verdict.is_failure


@dataclass(frozen=True)
class ImplementationInfo:
    """Who was judged: the factory string, the reported name and version, its capabilities."""

    spec: str = ""
    name: str = "unknown"
    version: str = ""
    capabilities: frozenset[str] = frozenset()
    transport: str = DEFAULT_TRANSPORT

    @property
    def label(self) -> str:
        """``"name version"`` (or just the name), for headers and column titles."""
        return f"{self.name} {self.version}".strip()


@dataclass(frozen=True)
class SuiteResult:
    """One suite run against one implementation: everything the reports need."""

    implementation: ImplementationInfo
    spec_label: str
    clauses: tuple[ClauseResult, ...]
    checks: tuple[CheckResult, ...] = ()
    started: datetime = field(default_factory=lambda: datetime.now(UTC))
    duration: float = 0.0
    seed: int | None = None
    unknown_clause_ids: tuple[str, ...] = ()
    expectations: str = ""
    """Where the expectations came from (a file path), or empty: none were applied."""

    def clause(self, clause_id: str) -> ClauseResult:
        for result in self.clauses:
            if result.clause.id == clause_id.upper():
                return result
        raise KeyError(f"no result for clause {clause_id!r}")

    def counts(self, level: str | None = None) -> dict[Verdict, int]:
        """Clauses per verdict (every verdict present, zeros included), optionally one level."""
        counts = dict.fromkeys(Verdict, 0)
        for result in self.clauses:
            if level is None or result.clause.level == level:
                counts[result.verdict] += 1
        return counts

    def counts_by_level(self) -> dict[str, dict[Verdict, int]]:
        return {level: self.counts(level) for level in LEVELS}

    @property
    def must_failures(self) -> tuple[ClauseResult, ...]:
        return tuple(r for r in self.clauses if r.is_must_failure)

    @property
    def unexpected(self) -> tuple[ClauseResult, ...]:
        """Against an expectations file: regressions and stale expectations."""
        return tuple(r for r in self.clauses if r.is_unexpected)

    @property
    def expected_results(self) -> tuple[ClauseResult, ...]:
        """Against an expectations file: clauses that got their announced verdict."""
        return tuple(r for r in self.clauses if r.is_expected)

    @property
    def must_not_judged(self) -> tuple[ClauseResult, ...]:
        """MUST clauses with no verdict about the implementation (UNSUPPORTED, NOT_TESTED).

        "Conforms" can only be said of the MUST clauses that were judged; these are the
        rest, and the reports name them.
        """
        unjudged = (Verdict.UNSUPPORTED, Verdict.NOT_TESTED)
        return tuple(r for r in self.clauses if r.clause.level == "MUST" and r.verdict in unjudged)

    @property
    def not_applicable(self) -> tuple[ClauseResult, ...]:
        """Clauses of another transport's profile: outside every claim, never failures."""
        return tuple(r for r in self.clauses if r.verdict is Verdict.NOT_APPLICABLE)

    def core_unsupported(self) -> tuple[Unjudged, ...]:
        """Every clause of every transport's scope (core, dispatch) judged UNSUPPORTED, with
        the capability (or adapter surface) the implementation did not declare for it."""
        declared = self.implementation.capabilities
        out = []
        for result in self.clauses:
            if result.clause.every_transport and result.clause.scope == "core":
                unjudged = result.unjudged(declared)
                if unjudged is not None:
                    out.append(unjudged)
        return tuple(out)

    @property
    def optional_absent(self) -> tuple[ClauseResult, ...]:
        """MAY clauses that hold because the implementation does not offer the option."""
        return tuple(r for r in self.clauses if r.is_optional_absent)

    def unlocking_capabilities(self) -> dict[str, tuple[str, ...]]:
        """Capability -> the not-judged MUST clauses that need it and it does not declare.

        Sorted by how many clauses each would unlock, most first.
        """
        unlocks: dict[str, list[str]] = {}
        declared = self.implementation.capabilities
        for result in self.must_not_judged:
            for cap in result.clause.capabilities:
                if cap not in declared:
                    unlocks.setdefault(cap, []).append(result.clause.id)
        ordered = sorted(unlocks.items(), key=lambda item: (-len(item[1]), item[0]))
        return {cap: tuple(ids) for cap, ids in ordered}

    def judgement_summary(self) -> str:
        """One plain sentence: what was judged, what holds, and what was not judged."""
        musts = [
            r
            for r in self.clauses
            if r.clause.level == "MUST" and r.verdict is not Verdict.NOT_APPLICABLE
        ]
        unjudged = self.must_not_judged
        judged = len(musts) - len(unjudged)
        failed = len(self.must_failures)
        if failed:
            text = f"{failed} of the {judged} MUST clause(s) judged are not shown to hold"
        else:
            text = f"all {judged} MUST clause(s) judged hold"
        outside = len(self.not_applicable)
        if outside:
            text += (
                f" ({outside} clause(s) of another transport's profile are NOT_APPLICABLE to "
                f"transport {self.implementation.transport!r})"
            )
        if not unjudged:
            return f"{text}; every MUST clause of the run was judged."
        unlocks = self.unlocking_capabilities()
        hint = (
            "; declaring "
            + ", ".join(f"{cap!r} would judge {len(ids)}" for cap, ids in unlocks.items())
            if unlocks
            else ""
        )
        return (
            f"{text}; {len(unjudged)} of {len(musts)} MUST clause(s) were NOT judged "
            f"(unsupported or not run), so conformance is claimed for the judged ones only{hint}."
        )

    @property
    def exit_status(self) -> int:
        return exit_status(self)


def aggregate_verdict(verdicts: Iterable[Verdict], *, applies: bool = True) -> Verdict:
    """Fold check verdicts into a clause verdict (rules in the module docstring).

    :param applies: False for a clause of another transport's scope: NOT_APPLICABLE,
        whatever its checks say (a group failure that names no clause never decides it).
    """
    if not applies:
        return Verdict.NOT_APPLICABLE
    present = [Verdict(v) for v in verdicts if Verdict(v) is not Verdict.NOT_TESTED]
    if not present:
        return Verdict.NOT_TESTED
    for decisive in (Verdict.FAIL, Verdict.ERROR, Verdict.UNSUPPORTED):
        if decisive in present:
            return decisive
    if all(v is Verdict.NOT_APPLICABLE for v in present):
        return Verdict.UNSUPPORTED  # applies, but no test could stage it on this transport
    return Verdict.PASS


def aggregate(
    spec: Spec,
    checks: Sequence[CheckResult],
    *,
    implementation: ImplementationInfo | None = None,
    clauses: Iterable[Clause] | None = None,
    started: datetime | None = None,
    duration: float = 0.0,
    seed: int | None = None,
) -> SuiteResult:
    """Build the suite result: one :class:`ClauseResult` per clause of ``clauses``.

    ``clauses`` defaults to every clause of ``spec`` (pass ``spec.select(...)`` for a prefix
    run, so that deselected clauses do not show up as NOT_TESTED).  A check citing an id that
    is not in ``spec`` is recorded in ``unknown_clause_ids`` (and fails the exit status).
    """
    chosen = tuple(clauses) if clauses is not None else spec.clauses
    impl = implementation or ImplementationInfo()
    by_clause: dict[str, list[CheckResult]] = {c.id: [] for c in chosen}
    unknown: list[str] = []
    for check in checks:
        for cid in check.clause_ids:
            if cid in by_clause:
                by_clause[cid].append(check)
            elif cid not in spec and cid not in unknown:
                unknown.append(cid)
    judged = {c.id: c.for_transport(impl.transport) for c in chosen}
    for cid, clause in judged.items():
        by_clause[cid] = counted_checks(clause, by_clause[cid])
    results = tuple(
        ClauseResult(
            # The level this implementation is judged at (a per-transport override applied):
            # claims, MUST counts and reports all read it from here.
            clause=judged[c.id],
            verdict=aggregate_verdict(
                (ch.verdict for ch in by_clause[c.id]), applies=c.applies_to(impl.transport)
            ),
            checks=tuple(by_clause[c.id]),
        )
        for c in chosen
    )
    return SuiteResult(
        implementation=impl,
        spec_label=spec.label,
        clauses=results,
        checks=tuple(checks),
        started=started or datetime.now(UTC),
        duration=duration,
        seed=seed,
        unknown_clause_ids=tuple(unknown),
    )


def counted_checks(clause: Clause, checks: Iterable[CheckResult]) -> list[CheckResult]:
    """``checks`` of ``clause`` as they count for it (the clause as judged for the
    implementation's transport): an absent option (:func:`_absence_at`), an engine lacking
    what the clause is about (:func:`_engine_lacks`), a clause no test could stage
    (:func:`_staged_nowhere`).  One place, so a run and its JSON read back agree."""
    return _staged_nowhere([_engine_lacks(clause, _absence_at(clause, c)) for c in checks])


def _absence_at(clause: Clause, check: CheckResult) -> CheckResult:
    """``check`` as it counts for ``clause``: an absent option passes a MAY clause only; a
    MUST or SHOULD behaviour recorded as optional and absent is a suite defect (ERROR)."""
    if (
        clause.level == "MAY"
        or check.verdict is not Verdict.PASS
        or not is_optional_absent_message(check.message)
    ):
        return check
    return dataclasses.replace(
        check,
        verdict=Verdict.ERROR,
        message=f"suite defect: {clause.id} is a {clause.level} clause, so its behaviour is "
        f"not optional and its absence is no PASS: {check.message}",
    )


def _engine_lacks(clause: Clause, check: CheckResult) -> CheckResult:
    """``check`` as it counts for ``clause``: an adapter's ``EngineNotAsked`` naming a surface
    the clause is about (``Clause.about``) is the engine lacking what the clause requires, a
    FAIL of the engine; for any other clause it stays UNSUPPORTED (never asked)."""
    if check.verdict is not Verdict.UNSUPPORTED:
        return check
    lacking = [s for s in surfaces_of_message(check.message) if s in clause.about]
    if not lacking:
        return check
    what = " and no ".join(ENGINE_SURFACES[s] for s in lacking)
    return dataclasses.replace(
        check,
        verdict=Verdict.FAIL,
        message=f"{clause.id}: the engine has no {what}, which this clause requires: it cannot "
        f"meet it (the adapter's report: {check.message})",
    )


def _staged_nowhere(checks: list[CheckResult]) -> list[CheckResult]:
    """``checks`` of one clause, where each test deferred to another and none staged it:
    those NOT_TESTED checks become UNSUPPORTED, the clause "not stageable on this
    implementation" by any of its tests (never NOT_TESTED, which reads as "not run")."""
    deferred = [
        c for c in checks if c.verdict is Verdict.NOT_TESTED and _ELSEWHERE_RE.match(c.message)
    ]
    # NOT_APPLICABLE checks (stagings through another transport) staged nothing either.
    unstaged = (Verdict.NOT_TESTED, Verdict.NOT_APPLICABLE)
    if not deferred or any(c.verdict not in unstaged for c in checks):
        return checks
    return [
        dataclasses.replace(
            c,
            verdict=Verdict.UNSUPPORTED,
            message=f"{c.message} -- and no other test staged it: not stageable on this "
            "implementation",
        )
        if c in deferred
        else c
        for c in checks
    ]


def exit_status(suite: SuiteResult) -> int:
    """:data:`EXIT_MUST_FAILED` iff a MUST clause is FAIL or ERROR or a cited id is unknown.

    Judged against an expectations file (``suite.expectations``) the file is the baseline
    instead, at every level: non-zero iff a clause is unexpected (a FAIL or ERROR the file
    does not announce, or an announced verdict that turned into PASS) or an id is unknown.
    """
    if suite.unknown_clause_ids:
        return EXIT_MUST_FAILED
    if suite.expectations:
        return EXIT_MUST_FAILED if suite.unexpected else EXIT_OK
    if suite.must_failures:
        return EXIT_MUST_FAILED
    return EXIT_OK
