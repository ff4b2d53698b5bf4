"""Running a hypothesis property as conformance checks: profiles, seed, database, verdicts.

A fuzz test draws many cases; each case runs a fresh group of ranks and yields checks,
one clause each (``Judged``).  The first case with a failed check makes hypothesis shrink
it to a minimal one; what it then reports becomes the FAIL of each clause that minimal
case violated, with the seed and the ``@reproduce_failure`` blob that replay it.  Staging is
judged per clause: a clause no case violated gets one PASS saying over how many staged cases
it held, but only if at least one staged case judged it (else UNSUPPORTED, "not staged") and
the rogue staged enough of the cases (else ERROR, inconclusive); a case the rogue could not
stage never counts toward a PASS (a check that failed in it still FAILs its clause: what the
implementation did wrong stays wrong).

Profiles (``TPBCAST_FUZZ_PROFILE``): ``short`` (the default: a few dozen cases per test,
seconds, what CI and a plain ``python -m tpbcast.conformance`` run) and ``long`` (at least
5,000 cases per test; ``nox -s fuzz``).  ``TPBCAST_FUZZ_EXAMPLES=N`` overrides the count.

Replaying a failure (conformance/tests/README.md, "Fuzz tests"): the seed is the
session's ``--tpbcast-seed`` mixed with the test's name, unless ``--hypothesis-seed`` or
``TPBCAST_FUZZ_SEED`` fixes it; failing cases are also saved in the example database
(``TPBCAST_FUZZ_DB``, default ``.hypothesis/tpbcast-fuzz`` in the current directory) and
replayed first by the next run; ``TPBCAST_FUZZ_REPRODUCE`` takes the printed
``@reproduce_failure(...)`` line and replays exactly that case.
"""

from __future__ import annotations

import json
import os
import re
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from tpbcast.conformance._checks import record_unjudged
from tpbcast.conformance._results import Verdict

from . import _support as s

if TYPE_CHECKING:
    from hypothesis import settings

PROFILES: Final = {"short": 25, "long": 5000}
"""Cases per fuzz test in each profile."""
PROFILE_ENV: Final = "TPBCAST_FUZZ_PROFILE"
EXAMPLES_ENV: Final = "TPBCAST_FUZZ_EXAMPLES"
SEED_ENV: Final = "TPBCAST_FUZZ_SEED"
DB_ENV: Final = "TPBCAST_FUZZ_DB"
SUMMARY_ENV: Final = "TPBCAST_FUZZ_SUMMARY"
"""A file each fuzz test appends one JSON line to: cases, time, seed, failed clauses (the
long profile's record; ``nox -s fuzz`` writes reports/fuzz/summary.jsonl)."""
REPRODUCE_ENV: Final = "TPBCAST_FUZZ_REPRODUCE"
"""The ``@reproduce_failure('<version>', b'<blob>')`` line a failure printed: replays that
one case first (select its test with ``-k``)."""
_REPRODUCE_RE: Final = re.compile(
    r"""reproduce_failure\(\s*['"]([^'"]+)['"]\s*,\s*b['"]([^'"]+)['"]"""
)
DB_DEFAULT: Final = os.path.join(".hypothesis", "tpbcast-fuzz")
# More unstaged cases than this share (the suite's own rogue could not deliver its
# bytes although the implementation looked fine) makes the test inconclusive (ERROR).
UNSTAGED_LIMIT: Final = 0.25


@dataclass(frozen=True)
class Judged:
    """One check of one case: clause, whether it held, the requirement, what was seen."""

    cid: str
    holds: bool
    sentence: str
    got: object = ""
    rank: int | None = None


class CaseFailedError(AssertionError):
    """A case violated at least one clause; hypothesis shrinks on it."""

    def __init__(self, failed: list[Judged], case: object) -> None:
        self.failed = failed
        self.case = case
        first = failed[0]
        super().__init__(s.clause(first.cid, first.sentence, first.got, rank=first.rank))


_ERROR_CLASSES: dict[str, type[CaseFailedError]] = {}


def _error_class(cid: str) -> type[CaseFailedError]:
    """One subclass per clause: hypothesis tells bugs apart by exception type and place,
    so a case failing INIT-7 is shrunk and reported apart from one failing WIRE-4."""
    if cid not in _ERROR_CLASSES:
        name = "CaseFailed_" + cid.replace("-", "_")
        _ERROR_CLASSES[cid] = type(name, (CaseFailedError,), {})
    return _ERROR_CLASSES[cid]


@dataclass
class Tally:
    """What the cases showed so far: checks held per clause, cases run, unstaged cases."""

    cases: int = 0
    unstaged: int = 0
    held: dict[str, int] = field(default_factory=dict)
    slowest: list[tuple[float, str]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def timed(self, case: object, took: float) -> None:
        """Keep the three slowest cases (shown in the summary: where the time goes)."""
        self.slowest = sorted([*self.slowest, (took, repr(case))], reverse=True)[:3]

    def judge(self, case: object, checks: Iterable[Judged], *, staged: bool) -> None:
        """Count one case; raise :class:`CaseFailedError` if a check of it failed."""
        self.cases += 1
        if not staged:
            self.unstaged += 1
        failed = []
        for check in checks:
            if check.holds:
                if staged:  # an unstaged case never counts toward a PASS
                    self.held[check.cid] = self.held.get(check.cid, 0) + 1
            else:
                failed.append(check)
        if failed:
            raise _error_class(failed[0].cid)(failed, case)


def profile() -> tuple[str, int]:
    """The selected profile and its number of cases per test."""
    name = os.environ.get(PROFILE_ENV, "short") or "short"
    if name not in PROFILES:
        known = ", ".join(sorted(PROFILES))
        raise ValueError(f"{PROFILE_ENV}={name!r}: unknown fuzz profile (known: {known})")
    raw = os.environ.get(EXAMPLES_ENV)
    return name, int(raw) if raw else PROFILES[name]


def seed_for(test_name: str, session_seed: int) -> tuple[int, str]:
    """The hypothesis seed of one fuzz test, and where it came from."""
    raw = os.environ.get(SEED_ENV)
    if raw:
        return int(raw), SEED_ENV
    from hypothesis import core

    forced = core.global_force_seed
    if forced is not None:
        return int(forced), "--hypothesis-seed"
    return session_seed * 1_000_003 + zlib.crc32(test_name.encode()), "--tpbcast-seed"


def _settings(examples: int) -> settings:
    from hypothesis import HealthCheck, Phase, Verbosity, settings
    from hypothesis.database import DirectoryBasedExampleDatabase

    return settings(
        max_examples=examples,
        deadline=None,  # a case is a rank group: its time is judged by the checks
        database=DirectoryBasedExampleDatabase(os.environ.get(DB_ENV) or DB_DEFAULT),
        print_blob=True,
        derandomize=False,
        verbosity=Verbosity.quiet,
        phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=True,
    )


def _reproducing(text: str) -> Callable[[Any], Any]:
    from hypothesis import reproduce_failure

    match = _REPRODUCE_RE.search(text)
    if match is None:
        raise ValueError(
            f"{REPRODUCE_ENV}={text!r}: expected the printed "
            "@reproduce_failure('<version>', b'<blob>') line"
        )
    return reproduce_failure(match.group(1), match.group(2).encode())


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def _append_summary(**fields: object) -> None:
    path = os.environ.get(SUMMARY_ENV)
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a") as fh:
        fh.write(json.dumps(fields) + "\n")


def _violations(exc: BaseException) -> list[CaseFailedError]:
    if isinstance(exc, CaseFailedError):
        return [exc]
    if isinstance(exc, BaseExceptionGroup):
        return [v for sub in exc.exceptions for v in _violations(sub)]
    return []


def run(
    test_name: str,
    *,
    session_seed: int,
    strategy: Any,
    case_fn: Callable[[Any, Tally], None],
    clauses: Iterable[str],
    what: str,
    examples: Iterable[Callable[[Any], Any]] = (),
) -> Tally:
    """Run ``case_fn(case, tally)`` over ``strategy`` and record one verdict per clause.

    ``case_fn`` runs the case's group and calls ``tally.judge``.  ``examples`` are
    hypothesis ``example(case)`` decorators: cases run first in every profile, so each
    clause is judged at least once even in the shortest run.  Afterwards each clause of
    ``clauses`` is checked once: FAIL with the minimal case that violated it (its seed and
    reproduce blob in the message), else PASS over the cases that judged it.
    """
    from hypothesis import given, seed

    name, count = profile()
    value, source = seed_for(test_name, session_seed)
    tally = Tally()

    @seed(value)
    @_settings(count)
    @given(strategy)
    def prop(case: Any) -> None:
        start = time.monotonic()
        try:
            case_fn(case, tally)
        finally:
            tally.timed(case, time.monotonic() - start)

    for add in examples:
        prop = add(prop)
    wanted = os.environ.get(REPRODUCE_ENV)
    if wanted:
        prop = _reproducing(wanted)(prop)
    # hypothesis keys its database by the test function's source: one per fuzz test.
    prop.hypothesis.inner_test._hypothesis_internal_add_digest = test_name.encode()
    failed: set[str] = set()
    try:
        prop()
    except BaseException as exc:
        found = _violations(exc)
        if not found:
            raise
        notes = "\n".join(str(n) for n in getattr(exc, "__notes__", ()))
        replay = (
            f"replay: {SEED_ENV}={value} (from {source}), profile {name}; the case is also "
            f"saved in {os.environ.get(DB_ENV) or DB_DEFAULT}"
        )
        for violation in found:
            extra = "\n".join(str(n) for n in getattr(violation, "__notes__", ()))
            for check in violation.failed:
                failed.add(check.cid)
                got = (
                    f"{check.got}\n  minimal case: {violation.case!r}\n  {replay}\n{extra or notes}"
                )
                s.check(check.cid, False, check.sentence, got, rank=check.rank)
    elapsed = time.monotonic() - tally.started
    slow = "; ".join(f"{took:.2f}s {case}" for took, case in tally.slowest)
    summary = (
        f"{tally.cases} case(s) ({tally.unstaged} not staged) in {elapsed:.1f}s, seed {value} "
        f"({source}), profile {name}; "
        f"slowest: {slow}"
    )
    _append_summary(
        test=test_name,
        profile=name,
        cases=tally.cases,
        unstaged=tally.unstaged,
        seconds=round(elapsed, 1),
        seed=value,
        seed_from=source,
        failed=sorted(failed),
        held=tally.held,
        loadavg=_loadavg(),
    )
    _judge_staging(clauses, failed, tally, what, summary)
    return tally


def _judge_staging(
    clauses: Iterable[str], failed: set[str], tally: Tally, what: str, summary: str
) -> None:
    """One verdict per clause that no case failed, staging applied per clause: PASS only if
    at least one staged case judged the clause (``tally.held``) and the rogue staged enough
    cases; a clause no case judged is UNSUPPORTED (not staged), never an incidental PASS."""
    too_few = tally.unstaged > UNSTAGED_LIMIT * max(1, tally.cases)
    for cid in clauses:
        if cid in failed:
            continue
        judged = tally.held.get(cid, 0)
        if judged == 0:
            record_unjudged(
                cid,
                Verdict.UNSUPPORTED,
                f"not staged: none of {tally.cases} case(s) judged it ({summary})",
            )
        elif too_few:
            record_unjudged(
                cid,
                Verdict.ERROR,
                f"the suite's rogue could not stage {tally.unstaged} of {tally.cases} "
                f"case(s); {judged} judged it (inconclusive: {summary})",
            )
        else:
            s.check(cid, True, f"{what}: {cid} held in all {judged} case(s) judging it ({summary})")
