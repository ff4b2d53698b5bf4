"""Expectation files: the verdicts an implementation is known to get, so CI hears only news.

A team whose implementation has known gaps (the native example fails a few SHOULD clauses
on purpose) lists them once, each with a reason, as web-platform-tests' expectation files
do::

    # python -m tpbcast.conformance --tpbcast-impl mypkg:make --expectations THIS_FILE
    [expect.INIT-16]
    verdict = "FAIL"
    reason = "connect retries EACCES until its deadline instead of failing at once"

    [expect.SEC-1]
    verdict = "UNSUPPORTED"
    reason = "no secure_dir yet"

    [expect.FAULT-3]
    verdict = ["FAIL", "PASS"]
    reason = "the wording depends on whether the dead rank's kernel sends an RST or a FIN"

A list announces a race of the implementation itself (not of the suite: a staging that can
go either way is the suite's to make decisive): the first verdict is the one reports show
as expected, and any verdict of the list is as expected; the reason must say what decides.

Judged against such a file, a run fails only on news: a FAIL or ERROR the file does not
announce (a regression; an ERROR is never expected, the suite could not judge), or an
announced verdict that did not happen without failing (a stale expectation, as pytest's
``xfail_strict``: a clause that now passes must leave the file).  A clause the run did not
judge (deselected: NOT_TESTED) contradicts nothing.  The rules live on
:class:`~._results.ClauseResult` (``is_regression``, ``is_stale_expectation``); this module
reads the file and attaches it to a :class:`~._results.SuiteResult`.  No pytest here.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ._results import SuiteResult, Verdict
from .spec import Spec

__all__ = [
    "EXPECTABLE",
    "Expectation",
    "Expectations",
    "ExpectationsError",
    "apply_expectations",
    "load_expectations",
    "parse_expectations",
]

EXPECTABLE: Final = (Verdict.FAIL, Verdict.UNSUPPORTED)
"""Verdicts a file may announce.  PASS is the default; ERROR means "not judged", which no
file may turn green; NOT_TESTED is a property of the selection, not of the implementation."""

_TABLE: Final = "expect"
_KEYS: Final = frozenset({"verdict", "reason"})


class ExpectationsError(ValueError):
    """The expectations file cannot be used; the message names the file and every problem."""


@dataclass(frozen=True)
class Expectation:
    """One clause's announced verdict and why the implementation gets it."""

    clause_id: str
    verdict: Verdict
    reason: str
    also: tuple[Verdict, ...] = ()  # the other verdicts of a race announced as a list


@dataclass(frozen=True)
class Expectations:
    """Every expectation of one file, by clause id (as the registry spells it)."""

    source: str
    by_clause: Mapping[str, Expectation]

    def __len__(self) -> int:
        return len(self.by_clause)


def _entry(cid: str, raw: object, spec: Spec, problems: list[str]) -> Expectation | None:
    where = f"[{_TABLE}.{cid}]"
    if cid not in spec:
        problems.append(
            f"{where}: unknown clause id {cid!r}: the registry ({spec.label}) has no such "
            "clause (python -m tpbcast.conformance --list prints them)"
        )
        return None
    if not isinstance(raw, Mapping):
        problems.append(f"{where}: must be a table with 'verdict' and 'reason'")
        return None
    extra = sorted(set(raw) - _KEYS)
    if extra:
        problems.append(f"{where}: unknown key(s) {', '.join(map(repr, extra))}")
    raw_verdict = raw.get("verdict", "")
    listed = raw_verdict if isinstance(raw_verdict, list) and raw_verdict else [raw_verdict]
    verdicts = [str(v).upper() for v in listed]
    allowed = ", ".join(v.value for v in EXPECTABLE)
    # A race may also come out PASS, never ERROR (the suite could not judge: never known).
    also_ok = {e.value for e in EXPECTABLE} | {Verdict.PASS.value}
    if (
        verdicts[0] not in {e.value for e in EXPECTABLE}
        or any(v not in also_ok for v in verdicts[1:])
        or len(set(verdicts)) != len(verdicts)
    ):
        problems.append(
            f"{where}: verdict {raw_verdict!r} is not one of {allowed}, or a list of "
            "different ones starting with one of them (PASS may follow)"
        )
        return None
    reason = raw.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        problems.append(f"{where}: 'reason' must say why (a non-empty string)")
        return None
    first, *others = (Verdict(v) for v in verdicts)
    return Expectation(spec[cid].id, first, " ".join(reason.split()), tuple(others))


def parse_expectations(data: Mapping[str, Any], spec: Spec, source: str) -> Expectations:
    """Validate parsed TOML against ``spec``.

    :raises ExpectationsError: naming ``source`` and every problem (unknown clause ids, a
        verdict that cannot be expected, a missing reason, unknown keys).
    """
    problems: list[str] = []
    unknown_top = sorted(set(data) - {_TABLE})
    if unknown_top:
        problems.append(
            f"unknown top-level key(s) {', '.join(map(repr, unknown_top))}; "
            f"expectations go in [{_TABLE}.<CLAUSE-ID>] tables"
        )
    table = data.get(_TABLE, {})
    if not isinstance(table, Mapping):
        problems.append(f"'{_TABLE}' must be a table of [{_TABLE}.<CLAUSE-ID>] tables")
        table = {}
    found: dict[str, Expectation] = {}
    for cid, raw in table.items():
        entry = _entry(str(cid), raw, spec, problems)
        if entry is None:
            continue
        if entry.clause_id in found:
            problems.append(f"[{_TABLE}.{cid}]: {entry.clause_id} is listed twice")
        found[entry.clause_id] = entry
    if problems:
        raise ExpectationsError(
            f"expectations file {source}: {len(problems)} problem(s):\n"
            + "\n".join(f"  - {p}" for p in problems)
        )
    return Expectations(source, found)


def load_expectations(path: Path | str, spec: Spec) -> Expectations:
    """Read and validate an expectations file (TOML; format in the module docstring).

    :raises ExpectationsError: the file is missing, is not TOML, or does not validate.
    """
    source = str(path)
    try:
        with Path(path).open("rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ExpectationsError(
            f"expectations file {source}: cannot read it: {exc.strerror or exc}"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ExpectationsError(f"expectations file {source}: not valid TOML: {exc}") from None
    return parse_expectations(data, spec, source)


def apply_expectations(suite: SuiteResult, expectations: Expectations) -> SuiteResult:
    """``suite`` with each clause's expectation attached and ``suite.expectations`` set,
    which switches its exit status to "unexpected results only" (``_results.exit_status``)."""
    clauses = tuple(
        dataclasses.replace(r, expected=e.verdict, expected_reason=e.reason, expected_also=e.also)
        if (e := expectations.by_clause.get(r.clause.id)) is not None
        else r
        for r in suite.clauses
    )
    return dataclasses.replace(suite, clauses=clauses, expectations=expectations.source)
