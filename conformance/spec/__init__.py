"""The clause registry: load ``clauses.toml`` into typed values and render ``SPEC.md`` from it.

Why one registry: tests cite clause ids, reports list verdicts per clause and ``SPEC.md`` is what
people read; if they came from three places they would drift.  So the TOML file is the only
source, this module validates it strictly (ids are never renumbered or reused, levels and areas
are known, capabilities exist in the adapter contract), and ``SPEC.md`` is generated from it
and checked for staleness by a test and by ``--check``.  This module is the model; the
renderer is ``spec/_markdown.py`` (:func:`render_markdown`) and the command line
``spec/__main__.py``, both built on the model and never imported by it.

Command line::

    python -m tpbcast.conformance.spec            # print SPEC.md to stdout
    python -m tpbcast.conformance.spec --write    # regenerate conformance/SPEC.md
    python -m tpbcast.conformance.spec --check    # exit 1 if conformance/SPEC.md is stale
    python -m tpbcast.conformance.spec --list WIRE INIT-3   # one line per selected clause
"""

from __future__ import annotations

import dataclasses
import functools
import re
import tomllib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tpbcast.harness.adapter import (
    DEFAULT_TRANSPORT,
    ENGINE_SURFACES,
    transport_names,
    transport_profiles,
)

__all__ = [
    "AREAS",
    "CAPABILITIES",
    "DEFAULT_TRANSPORT",
    "EVERY_TRANSPORT_SCOPES",
    "LEVELS",
    "SPEC_MD_PATH",
    "SPEC_TOML_PATH",
    "UPSTREAM_STATES",
    "Area",
    "Clause",
    "NotedPoint",
    "RetiredClause",
    "Spec",
    "SpecError",
    "default_spec",
    "load_spec",
    "main",
    "scopes",
    "transport_names",
    "transport_profiles",
]

SPEC_TOML_PATH: Final = Path(__file__).parent.parent / "clauses.toml"
SPEC_MD_PATH: Final = Path(__file__).parent.parent / "SPEC.md"

#: Areas in presentation order.  The TOML must declare exactly these.
AREAS: Final = (
    "WIRE",
    "INIT",
    "BCAST",
    "RESET",
    "TIME",
    "FAULT",
    "SEC",
    "FALLBACK",
    "HYG",
    "ADAPT",
    "SHM",
    "TCP",
    "FRAME",
)
#: RFC 2119 levels, strongest first.
LEVELS: Final = ("MUST", "SHOULD", "MAY")
#: Scopes that are not transports: ``core`` (any CPU TP broadcaster) and ``dispatch`` (the
#: fallback layer, any transport; gated by capability ``dispatch``).  Every other scope is a
#: transport profile of ``tpbcast.harness.adapter.TRANSPORT_PROFILES`` (SPEC.md, "Transport
#: profiles"): its clauses apply only to implementations of that transport and are
#: NOT_APPLICABLE, never FAIL, for the others.  A clause shared by several transports lists
#: them all (``scope = ["uds-v1", "uds-framed"]``).
EVERY_TRANSPORT_SCOPES: Final = ("core", "dispatch")


def scopes() -> tuple[str, ...]:
    """Every scope a clause may have, in presentation order: ``core``, each transport of the
    profile table, ``dispatch``.  Read from the table at each call (a test may add a row)."""
    return ("core", *transport_names(), "dispatch")


UPSTREAM_STATES: Final = ("conforms", "deviates", "absent")

#: Adapter capabilities and the members they promise (DESIGN.md, "Adapter contract").
CAPABILITIES: Final[Mapping[str, str]] = {
    "deadlines": "`set_deadlines(*, connect=None, init=None, io=None)` before `initialize`; "
    "optionally `default_deadlines()`: the defaults of `connect`, `init`, `io` in seconds "
    "(TIME-7)",
    "generation": "`generation` attribute/property (int)",
    "abstract_namespace": "`set_abstract_namespace(enabled: bool)` before `initialize`",
    "tensors": "`broadcast` accepts torch CPU tensors (contiguous or not)",
    "multi_buffer": "`broadcast` accepts a list of buffers, sent back to back",
    "peer_credentials": "rejects peers of another uid (SO_PEERCRED)",
    "secure_dir": "verifies/creates the socket dir 0700",
    "dispatch": "`make_dispatcher(*, engine, ...)`: fallback dispatch layer whose "
    "collective path runs on `engine`, the suite's recording gloo engine (the FALLBACK clauses "
    "are judged from what it saw); its `bootstrap(*, local_world_size, base_path, "
    "tp_rank=None, dp_rank=None)` is idempotent and refuses explicit ranks that disagree with "
    "the layout",
    "error_details": "errors carry `rank/peer/phase/...` attributes",
    "abort": "`abort(reason: str)` between broadcasts: the group's next broadcast raises on "
    "every rank (FRAME-10)",
    "base_path": "`make_base_path(dp_rank=0, *, session_id=None, base_dir=None, environ=None, "
    "key=None) -> str`: the base-path helper (SEC-13 to SEC-17)",
    "endpoint": "`set_endpoint(host: str, port: int, local_host: str | None = None)` before "
    "`initialize`: rank 0's rendezvous address and port, and the address this rank listens on "
    "(default `host`; transport `tcp`; the TCP clauses)",
}

_ID_RE: Final = re.compile(r"^(?P<area>[A-Z]+)-(?P<number>[1-9][0-9]*)$")
# Two sentences look like ". Capital" inside the text; "e.g. x" and "(a. b)" do not match.
_SENTENCE_BREAK_RE: Final = re.compile(r"[.!?]\s+[A-Z]")
_CLAUSE_KEYS: Final = frozenset(
    {
        "id",
        "area",
        "level",
        "title",
        "requirement",
        "rationale",
        "capabilities",
        "about",
        "scope",
        "upstream",
        "upstream_note",
        "level_by_transport",
    }
)
_REQUIRED_CLAUSE_KEYS: Final = ("id", "area", "level", "title", "requirement", "rationale")


class SpecError(ValueError):
    """The clause registry is invalid; ``problems`` lists every defect found, not just the first."""

    def __init__(self, problems: Sequence[str], source: str = "") -> None:
        self.problems = tuple(problems)
        self.source = source
        where = f" in {source}" if source else ""
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} problem(s){where}:\n{lines}")


@dataclass(frozen=True)
class Area:
    """A group of clauses (``WIRE``, ``INIT``, ...) with a title and a one-paragraph summary."""

    id: str
    title: str
    summary: str

    @property
    def anchor(self) -> str:
        """HTML anchor of the area's section in SPEC.md (``area-wire``)."""
        return f"area-{self.id.lower()}"


@dataclass(frozen=True)
class Clause:
    """One numbered requirement.  ``id`` is stable forever; ``anchor`` is its SPEC.md anchor."""

    id: str
    area: str
    number: int
    level: str
    title: str
    requirement: str
    rationale: str
    capabilities: tuple[str, ...] = ()
    about: tuple[str, ...] = ()
    """The engine surfaces (``ENGINE_SURFACES``: ``lifecycle``, ``receive_buffers``, ...) the
    clause is about.  An adapter that answers ``EngineNotAsked`` with one of them says the
    engine lacks the very thing the clause requires: the clause FAILs for that engine (the
    absence is the finding), where any other clause left unjudged by it is UNSUPPORTED."""
    scope: str = "core"
    """``core``, ``dispatch``, or the transport profile(s) the clause belongs to, as written in
    the registry (several transports joined by ``", "``); :attr:`transports` lists them."""
    transports: tuple[str, ...] = ()
    """The transport profiles whose implementations are judged on this clause; empty for a
    ``core`` or ``dispatch`` clause, which applies to every transport."""
    upstream: str | None = None
    upstream_note: str = ""
    level_by_transport: tuple[tuple[str, str], ...] = ()
    """(transport, level) pairs where the clause binds differently than :attr:`level`: the
    registry's ``level_by_transport = { "uds-framed" = "MUST" }`` (a guarantee every
    transport SHOULD give and one transport's design MUST).  Resolved for one
    implementation by :meth:`for_transport`."""

    @property
    def anchor(self) -> str:
        """``WIRE-1`` -> ``wire-1``: reports link to ``SPEC.md#wire-1``."""
        return self.id.lower()

    def level_on(self, transport: str) -> str:
        """The level an implementation of ``transport`` is judged at."""
        return dict(self.level_by_transport).get(transport, self.level)

    def for_transport(self, transport: str) -> Clause:
        """This clause as an implementation of ``transport`` is judged on it: its level
        resolved (the override table kept, so a report can still say why)."""
        level = self.level_on(transport)
        return self if level == self.level else dataclasses.replace(self, level=level)

    @property
    def level_label(self) -> str:
        """``"SHOULD"``, or ``"SHOULD (MUST for uds-framed)"`` with an override."""
        if not self.level_by_transport:
            return self.level
        extra = "; ".join(f"{lvl} for {t}" for t, lvl in self.level_by_transport)
        return f"{self.level} ({extra})"

    def applies_to(self, transport: str) -> bool:
        """True if an implementation of ``transport`` is judged on this clause: core and
        dispatch clauses apply to every transport, a transport clause only to its own."""
        return not self.transports or transport in self.transports

    @property
    def every_transport(self) -> bool:
        """A ``core`` or ``dispatch`` clause: judged whatever the implementation's transport."""
        return not self.transports

    @property
    def needs_test(self) -> bool:
        """MUST and SHOULD clauses must be cited by at least one test."""
        return self.level in ("MUST", "SHOULD")

    @property
    def sort_key(self) -> tuple[int, int]:
        """Presentation order: area order of :data:`AREAS`, then clause number."""
        return (AREAS.index(self.area), self.number)


@dataclass(frozen=True)
class RetiredClause:
    """An id that was dropped; it may never be given to another clause."""

    id: str
    reason: str


@dataclass(frozen=True)
class NotedPoint:
    """A review point that deliberately is not a clause, with the reason (shown in SPEC.md)."""

    source: str
    point: str
    disposition: str


@dataclass(frozen=True)
class Spec:
    """The validated registry.  Clauses are in presentation order (area, then number)."""

    name: str
    version: str
    areas: tuple[Area, ...]
    clauses: tuple[Clause, ...]
    retired: tuple[RetiredClause, ...] = ()
    noted: tuple[NotedPoint, ...] = ()

    @property
    def label(self) -> str:
        """``"<name> <version>"``, recorded in every report."""
        return f"{self.name} {self.version}"

    def __iter__(self) -> Iterator[Clause]:
        return iter(self.clauses)

    def __len__(self) -> int:
        return len(self.clauses)

    def __contains__(self, clause_id: object) -> bool:
        return isinstance(clause_id, str) and clause_id.upper() in self._by_id

    def __getitem__(self, clause_id: str) -> Clause:
        try:
            return self._by_id[clause_id.upper()]
        except KeyError:
            raise KeyError(self._unknown_message(clause_id)) from None

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(c.id for c in self.clauses)

    @functools.cached_property
    def _by_id(self) -> dict[str, Clause]:
        return {c.id: c for c in self.clauses}

    def area(self, area_id: str) -> Area:
        for area in self.areas:
            if area.id == area_id.upper():
                return area
        raise KeyError(f"unknown area {area_id!r}; areas are {', '.join(AREAS)}")

    def by_area(self, area_id: str) -> tuple[Clause, ...]:
        """Clauses of one area, in number order (``KeyError`` for an unknown area)."""
        area = self.area(area_id)
        return tuple(c for c in self.clauses if c.area == area.id)

    def by_level(self, level: str) -> tuple[Clause, ...]:
        return tuple(c for c in self.clauses if c.level == level.upper())

    def requiring_tests(self) -> tuple[Clause, ...]:
        """The clauses a suite run must cite at least once (MUST and SHOULD)."""
        return tuple(c for c in self.clauses if c.needs_test)

    def select(self, selectors: Iterable[str]) -> tuple[Clause, ...]:
        """Clauses matching any selector, h2spec style, in presentation order.

        A selector is an area (``"WIRE"``: every WIRE clause) or a clause id (``"INIT-3"``:
        exactly that clause, never INIT-30).  Case does not matter.  No selectors selects all.

        :raises KeyError: a selector matches nothing (a typo must not select zero tests).
        """
        wanted = [s.strip().upper() for s in selectors if s.strip()]
        if not wanted:
            return self.clauses
        chosen: set[str] = set()
        for sel in wanted:
            if sel in AREAS:
                chosen.update(c.id for c in self.clauses if c.area == sel)
            elif sel in self._by_id:
                chosen.add(sel)
            else:
                raise KeyError(self._unknown_message(sel))
        return tuple(c for c in self.clauses if c.id in chosen)

    def _unknown_message(self, selector: str) -> str:
        retired = {r.id: r.reason for r in self.retired}
        if selector.upper() in retired:
            return f"clause {selector} is retired ({retired[selector.upper()]})"
        return (
            f"unknown clause or area {selector!r}; areas are {', '.join(AREAS)}; "
            "use 'python -m tpbcast.conformance.spec --list' to see the clauses"
        )


# -------------------------------------------------------------------------------------------
# Loading and validation
# -------------------------------------------------------------------------------------------


def load_spec(path: Path | str | None = None) -> Spec:
    """Load and validate a clause registry (default: the packaged ``clauses.toml``).

    :raises SpecError: listing every problem found in the file.
    """
    source = Path(path) if path is not None else SPEC_TOML_PATH
    with source.open("rb") as fh:
        data = tomllib.load(fh)
    return _build(data, str(source))


@functools.cache
def default_spec() -> Spec:
    """The packaged registry, loaded once per process."""
    return load_spec()


def _text(raw: Mapping[str, Any], key: str, where: str, problems: list[str]) -> str:
    value = raw.get(key, "")
    if not isinstance(value, str) or not value.strip():
        problems.append(f"{where}: '{key}' must be a non-empty string")
        return ""
    return " ".join(value.split())


def _build(data: Mapping[str, Any], source: str) -> Spec:
    problems: list[str] = []
    meta = data.get("spec", {})
    name = _text(meta, "name", "[spec]", problems)
    version = _text(meta, "version", "[spec]", problems)
    areas = _build_areas(data.get("area", []), problems)
    retired = _build_retired(meta.get("retired", []), problems)
    unknown_meta = set(meta) - {"name", "version", "retired"}
    if unknown_meta:
        problems.append(f"[spec]: unknown keys {sorted(unknown_meta)}")
    retired_ids = {r.id for r in retired}
    clauses: list[Clause] = []
    seen: set[str] = set()
    for i, raw in enumerate(data.get("clause", [])):
        clause = _build_clause(raw, f"clause #{i + 1}", problems)
        if clause is None:
            continue
        if clause.id in seen:
            problems.append(f"{clause.id}: duplicate id")
        if clause.id in retired_ids:
            problems.append(f"{clause.id}: id is retired and may never be reused")
        seen.add(clause.id)
        clauses.append(clause)
    noted = [
        NotedPoint(
            source=_text(raw, "source", f"noted #{i + 1}", problems),
            point=_text(raw, "point", f"noted #{i + 1}", problems),
            disposition=_text(raw, "disposition", f"noted #{i + 1}", problems),
        )
        for i, raw in enumerate(data.get("noted", []))
    ]
    problems.extend(f"area {a} has no clause" for a in AREAS if all(c.area != a for c in clauses))
    unknown_top = set(data) - {"spec", "area", "clause", "noted"}
    if unknown_top:
        problems.append(f"unknown top-level keys {sorted(unknown_top)}")
    if problems:
        raise SpecError(problems, source)
    clauses.sort(key=lambda c: c.sort_key)
    return Spec(
        name=name,
        version=version,
        areas=tuple(areas),
        clauses=tuple(clauses),
        retired=tuple(retired),
        noted=tuple(noted),
    )


def _build_areas(raws: Sequence[Mapping[str, Any]], problems: list[str]) -> list[Area]:
    areas = [
        Area(
            id=_text(raw, "id", f"area #{i + 1}", problems),
            title=_text(raw, "title", f"area #{i + 1}", problems),
            summary=_text(raw, "summary", f"area #{i + 1}", problems),
        )
        for i, raw in enumerate(raws)
    ]
    declared = [a.id for a in areas]
    if sorted(declared) != sorted(AREAS):
        problems.append(f"areas must be exactly {', '.join(AREAS)} once each; got {declared}")
    areas.sort(key=lambda a: AREAS.index(a.id) if a.id in AREAS else len(AREAS))
    return areas


def _build_retired(raws: Sequence[Any], problems: list[str]) -> list[RetiredClause]:
    retired: list[RetiredClause] = []
    for i, raw in enumerate(raws):
        where = f"retired #{i + 1}"
        if not isinstance(raw, Mapping):
            problems.append(f"{where}: must be a table {{ id = ..., reason = ... }}")
            continue
        rid = _text(raw, "id", where, problems)
        if rid and not _ID_RE.match(rid):
            problems.append(f"{where}: id {rid!r} is not of the form AREA-N")
        retired.append(RetiredClause(id=rid, reason=_text(raw, "reason", where, problems)))
    return retired


def _build_clause(raw: Mapping[str, Any], where: str, problems: list[str]) -> Clause | None:
    before = len(problems)
    unknown = set(raw) - _CLAUSE_KEYS
    if unknown:
        problems.append(f"{where}: unknown keys {sorted(unknown)} (typo?)")
    problems.extend(f"{where}: missing '{k}'" for k in _REQUIRED_CLAUSE_KEYS if k not in raw)
    if len(problems) > before:
        return None
    cid = _text(raw, "id", where, problems)
    match = _ID_RE.match(cid)
    if not match:
        problems.append(f"{where}: id {cid!r} is not of the form AREA-N (N >= 1, no leading 0)")
        return None
    scope = _scope(raw.get("scope", "core"), cid, problems)
    clause = Clause(
        id=cid,
        area=_text(raw, "area", cid, problems),
        number=int(match["number"]),
        level=_text(raw, "level", cid, problems),
        title=_text(raw, "title", cid, problems),
        requirement=_text(raw, "requirement", cid, problems),
        rationale=_text(raw, "rationale", cid, problems),
        capabilities=_string_list(raw.get("capabilities", []), f"{cid}: 'capabilities'", problems),
        about=_string_list(raw.get("about", []), f"{cid}: 'about'", problems),
        scope=", ".join(scope),
        transports=tuple(s for s in scope if s not in EVERY_TRANSPORT_SCOPES),
        upstream=None if raw.get("upstream") is None else str(raw["upstream"]),
        upstream_note=" ".join(str(raw.get("upstream_note", "")).split()),
        level_by_transport=_level_overrides(raw.get("level_by_transport", {}), cid, problems),
    )
    problems.extend(_clause_problems(clause, match["area"]))
    return clause


def _scope(value: object, cid: str, problems: list[str]) -> tuple[str, ...]:
    """A clause's scope: one name, or a non-empty list of transport profiles."""
    if isinstance(value, str):
        names: tuple[str, ...] = (value,)
    else:
        names = _string_list(value, f"{cid}: 'scope'", problems)
        if not names:
            problems.append(f"{cid}: 'scope' must be a scope name or a non-empty list of them")
            return ("core",)
    if len(names) > 1 and set(names) & set(EVERY_TRANSPORT_SCOPES):
        problems.append(
            f"{cid}: scope {list(names)} mixes core/dispatch with transports; a core or "
            "dispatch clause already applies to every transport"
        )
    return names


def _override_problems(c: Clause) -> Iterator[str]:
    """``level_by_transport``: known transports inside the clause's scope, known levels,
    each different from the clause's own."""
    for transport, level in c.level_by_transport:
        if transport not in transport_names():
            yield (
                f"{c.id}: level_by_transport names {transport!r}, not a transport profile "
                f"({', '.join(transport_names())})"
            )
        elif not c.applies_to(transport):
            yield f"{c.id}: level_by_transport names {transport!r}, outside its scope"
        if level not in LEVELS:
            yield (
                f"{c.id}: level_by_transport[{transport!r}] {level!r} is not one of "
                f"{', '.join(LEVELS)}"
            )
        elif level == c.level:
            yield f"{c.id}: level_by_transport[{transport!r}] repeats the clause's own level"


def _level_overrides(value: object, cid: str, problems: list[str]) -> tuple[tuple[str, str], ...]:
    """``level_by_transport``: a table of transport -> level (checked in _clause_problems)."""
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        problems.append(f"{cid}: 'level_by_transport' must be a table of transport = level")
        return ()
    return tuple((str(k), str(v)) for k, v in value.items())


def _string_list(value: object, where: str, problems: list[str]) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        problems.append(f"{where} must be a list of strings")
        return ()
    return tuple(value)


def _clause_problems(c: Clause, id_area: str) -> Iterator[str]:
    """Semantic checks of one clause (the shape was checked while building it)."""
    if c.area != id_area:
        yield f"{c.id}: area {c.area!r} does not match the id prefix {id_area!r}"
    if c.area not in AREAS:
        yield f"{c.id}: unknown area {c.area!r}"
    if c.level not in LEVELS:
        yield f"{c.id}: level {c.level!r} is not one of {', '.join(LEVELS)}"
    if c.requirement and not c.requirement.endswith("."):
        yield f"{c.id}: the requirement must be one sentence ending in '.'"
    if _SENTENCE_BREAK_RE.search(c.requirement):
        yield f"{c.id}: the requirement must be ONE sentence"
    for cap in c.capabilities:
        if cap not in CAPABILITIES:
            yield f"{c.id}: unknown capability {cap!r}; known: {', '.join(sorted(CAPABILITIES))}"
    for surface in c.about:
        if surface not in ENGINE_SURFACES:
            yield (
                f"{c.id}: unknown engine surface {surface!r} in 'about'; known: "
                f"{', '.join(sorted(ENGINE_SURFACES))}"
            )
    known = scopes()
    for name in c.transports or (c.scope,):
        if name not in known:
            yield (
                f"{c.id}: scope {name!r} is not one of {', '.join(known)} (a transport scope "
                "is a row of tpbcast.harness.adapter.TRANSPORT_PROFILES)"
            )
    yield from _override_problems(c)
    if c.upstream is not None and c.upstream not in UPSTREAM_STATES:
        yield f"{c.id}: upstream {c.upstream!r} not one of {', '.join(UPSTREAM_STATES)}"
