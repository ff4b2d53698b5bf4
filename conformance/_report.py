"""Report writers: ``conformance.json``, ``conformance.md`` and a static ``index.html``.

Pure functions over :class:`~._results.SuiteResult` values, no pytest (JUnit XML is pytest's
own job).  The JSON document itself (schema, writing, reading back) lives in
``_report_json.py``; this module renders the human-facing pages and writes all three.

The HTML page is self-contained (inline CSS, no JavaScript, no external assets) so it
can be archived as a CI artefact and opened anywhere; a copy of ``SPEC.md`` is written next to
it so every clause id links to its text (``SPEC.md#wire-1``), and the requirement is also
inline in a ``<details>`` element for readers who never leave the page.

Extensible by construction: the matrix is a list of :class:`Column` specs, each rendering one
cell of a :class:`ReportRow` for HTML and for markdown.  A row carries one result per suite
run, so passing several :class:`SuiteResult` values puts implementations side by side (the
Autobahn / wpt.fyi matrix); new columns (a performance budget, a hygiene axis) are new
:class:`Column` values, not edits of the renderer.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ._report_json import JSON_SCHEMA, as_runs, json_document, suite_from_json
from ._results import (
    CheckResult,
    ClauseResult,
    SuiteResult,
    Verdict,
    aggregate_verdict,
    exit_status,
)
from .spec import AREAS, LEVELS, Clause, Spec, default_spec, transport_profiles
from .spec._markdown import render_markdown

__all__ = [
    "JSON_SCHEMA",
    "Column",
    "ReportFiles",
    "ReportRow",
    "default_columns",
    "json_document",
    "render_html",
    "render_report_markdown",
    "suite_from_json",
    "write_reports",
]

JSON_NAME: Final = "conformance.json"
MARKDOWN_NAME: Final = "conformance.md"
HTML_NAME: Final = "index.html"
SPEC_NAME: Final = "SPEC.md"

# Short inline messages; the full text stays one click away (HTML) or in the JSON.
_INLINE_MESSAGE: Final = 160
# Markdown has no "click to expand": a FAIL's cell must reach past the requirement to what
# was observed ("ID: requirement -- rank n: got ..."), so it keeps more of the message.
_MARKDOWN_MESSAGE: Final = 600


# -------------------------------------------------------------------------------------------
# Rows and columns
# -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportRow:
    """One clause across the suite runs being reported (``None``: not in that run)."""

    clause: Clause
    results: tuple[ClauseResult | None, ...]

    def verdict(self, run: int) -> Verdict:
        result = self.results[run]
        return result.verdict if result is not None else Verdict.NOT_TESTED

    @property
    def worst(self) -> Verdict:
        """The row's verdict over all runs (same folding as for checks)."""
        return aggregate_verdict(self.verdict(i) for i in range(len(self.results)))

    @property
    def is_must_failure(self) -> bool:
        return any(r is not None and r.is_must_failure for r in self.results)

    @property
    def is_failure(self) -> bool:
        return any(r is not None and r.verdict.is_failure for r in self.results)

    @property
    def order(self) -> tuple[int, int, int, int]:
        """MUST failures first, then other failures, then the rest; by clause number."""
        rank = 0 if self.is_must_failure else 1 if self.is_failure else 2
        return (rank, LEVELS.index(self.clause.level), *self.clause.sort_key)


@dataclass(frozen=True)
class Column:
    """One matrix column: a header and two cell renderers (HTML must return escaped HTML)."""

    key: str
    header: str
    html: Callable[[ReportRow], str]
    markdown: Callable[[ReportRow], str]
    css_class: str = ""


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _md_cell(text: str) -> str:
    """One markdown table cell: single line, pipes and angle brackets escaped."""
    flat = " ".join(text.split())
    return flat.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _duration(result: ClauseResult | None) -> str:
    if result is None or not result.checks:
        return "-"
    return f"{result.duration:.2f} s"


def _rank(result: ClauseResult | None) -> str:
    rank = result.failing_rank if result is not None else None
    return "" if rank is None else str(rank)


def _clause_html(row: ReportRow) -> str:
    c = row.clause
    checks = [
        (i, ch)
        for i, result in enumerate(row.results)
        if result is not None
        for ch in result.checks
    ]
    multi = len(row.results) > 1
    items = "".join(
        f"<li><code>{_esc(ch.test_id)}</code> {_badge(ch.verdict)}"
        f"{f' <small>run {i + 1}</small>' if multi else ''}"
        f" <small>{_esc(_check_text(ch))}</small></li>"
        for i, ch in checks
    )
    check_list = f'<ul class="checks">{items}</ul>' if items else "<p><em>no checks</em></p>"
    caps = ", ".join(c.capabilities)
    caps_html = f"<p><b>Scope:</b> {_esc(c.scope)}" + (
        f"; <b>needs:</b> {_esc(caps)}</p>" if caps else "</p>"
    )
    return (
        f'<a class="cid" href="{SPEC_NAME}#{c.anchor}">{_esc(c.id)}</a>'
        f"<details><summary>{_esc(c.title)}</summary>"
        f'<p class="req">{_esc(c.requirement)}</p>'
        f'<p class="why"><b>Why:</b> {_esc(c.rationale)}</p>{caps_html}{check_list}</details>'
    )


def _check_text(check: CheckResult) -> str:
    """What one check judged (its requirement, or what it observed), clipped for a list."""
    text = " ".join(check.message.split())
    return text if len(text) <= 240 else text[:237] + "..."


def _clause_md(row: ReportRow) -> str:
    c = row.clause
    return f"[{c.id}]({SPEC_NAME}#{c.anchor}) {_md_cell(c.title)}"


def _level_html(row: ReportRow) -> str:
    return _level_html_text(row.clause.level)


def _badge(verdict: Verdict, title: str = "") -> str:
    tip = f' title="{_esc(title)}"' if title else ""
    label = verdict.value.replace("_", " ")
    return f'<span class="badge v-{verdict.value.lower()}"{tip}>{label}</span>'


def _shown_verdict(result: ClauseResult | None) -> str:
    """``FAIL``, or ``FAIL (expected: reason)`` when an expectations file announced it."""
    return result.shown_verdict if result is not None else Verdict.NOT_TESTED.value


def _expectation_html(result: ClauseResult | None) -> str:
    """The note under a verdict badge saying whether an expectations file announced it."""
    if result is None or result.expected is None or result.verdict is Verdict.NOT_TESTED:
        return ""
    if result.is_expected:
        return f'<small class="expect">expected: {_esc(result.expected_reason)}</small>'
    return (
        f'<small class="expect unexpected">unexpected; expected {result.expected.value}: '
        f"{_esc(result.expected_reason)}</small>"
    )


def _message_html(text: str) -> str:
    if not text:
        return ""
    first = text.strip().splitlines()[0] if text.strip() else ""
    if len(text) <= _INLINE_MESSAGE and "\n" not in text.strip():
        return f'<span class="msg">{_esc(text)}</span>'
    short = first if len(first) <= _INLINE_MESSAGE else first[: _INLINE_MESSAGE - 1] + "…"
    return f'<details class="msg"><summary>{_esc(short)}</summary><pre>{_esc(text)}</pre></details>'


def _message_md(text: str) -> str:
    flat = " ".join(text.split())
    if len(flat) > _MARKDOWN_MESSAGE:
        flat = flat[: _MARKDOWN_MESSAGE - 1] + "…"
    return _md_cell(flat)


def _run_columns(run: int, label: str, *, compact: bool) -> list[Column]:
    """The per-run columns; ``compact`` (several runs) keeps only verdict + duration."""

    def result(row: ReportRow) -> ClauseResult | None:
        return row.results[run]

    def verdict_html(row: ReportRow) -> str:
        r = result(row)
        badge = _badge(row.verdict(run), r.message if (r is not None and compact) else "")
        return badge + _expectation_html(r)

    prefix = f"{label}: " if compact else ""
    columns = [
        Column(
            f"verdict.{run}",
            f"{prefix}Verdict",
            verdict_html,
            lambda row: _md_cell(_shown_verdict(result(row))),
            "verdict",
        ),
        Column(
            f"duration.{run}",
            f"{prefix}Duration",
            lambda row: _esc(_duration(result(row))),
            lambda row: _duration(result(row)),
            "num",
        ),
    ]
    if compact:
        return columns
    columns += [
        Column(
            f"rank.{run}",
            "Failing rank",
            lambda row: _esc(_rank(result(row))),
            lambda row: _rank(result(row)),
            "num",
        ),
        Column(
            f"message.{run}",
            "Message",
            lambda row: _message_html(getattr(result(row), "message", "")),
            lambda row: _message_md(getattr(result(row), "message", "")),
            "message",
        ),
    ]
    return columns


CLAUSE_COLUMN: Final = Column("clause", "Clause", _clause_html, _clause_md, "clause")
LEVEL_COLUMN: Final = Column("level", "Level", _level_html, lambda row: row.clause.level, "level")
SCOPE_COLUMN: Final = Column(
    "scope", "Scope", lambda row: _esc(row.clause.scope), lambda row: row.clause.scope, "level"
)


def default_columns(suites: Sequence[SuiteResult]) -> list[Column]:
    """Clause, level and scope, then per run: verdict, duration, failing rank, message.

    With several runs each run gets compact columns (verdict with the message as a tooltip,
    duration) headed by its implementation label.
    """
    compact = len(suites) > 1
    columns = [CLAUSE_COLUMN, LEVEL_COLUMN, SCOPE_COLUMN]
    for i, suite in enumerate(suites):
        columns += _run_columns(i, suite.implementation.label, compact=compact)
    return columns


def _rows(suites: Sequence[SuiteResult]) -> list[ReportRow]:
    """One row per clause present in any run, in registry order (area, number)."""
    clauses: dict[str, Clause] = {}
    for suite in suites:
        for result in suite.clauses:
            clauses.setdefault(result.clause.id, result.clause)
    lookup = [{r.clause.id: r for r in suite.clauses} for suite in suites]
    ordered = sorted(clauses.values(), key=lambda c: c.sort_key)
    return [ReportRow(c, tuple(run.get(c.id) for run in lookup)) for c in ordered]


# -------------------------------------------------------------------------------------------
# Markdown
# -------------------------------------------------------------------------------------------


def _seed(suite: SuiteResult) -> str:
    return "not recorded" if suite.seed is None else str(suite.seed)


def _headline(suite: SuiteResult) -> str:
    fails = suite.must_failures
    if suite.unknown_clause_ids:
        return f"FAIL: tests cite unknown clause ids {', '.join(suite.unknown_clause_ids)}"
    if suite.expectations:
        news, known = len(suite.unexpected), len(suite.expected_results)
        if news:
            return (
                f"FAIL: {news} unexpected result(s) against the expectations ({known} as expected)"
            )
        return f"PASS: no unexpected results against the expectations ({known} as expected)"
    if fails:
        return f"FAIL: {len(fails)} MUST clause(s) not shown to hold"
    unjudged = len(suite.must_not_judged)
    if unjudged:
        return f"PASS for the judged MUST clauses only ({unjudged} MUST clause(s) not judged)"
    return "PASS: every MUST clause was judged and holds"


def _core_unsupported_text(suite: SuiteResult) -> str:
    """``"2: RESET-9 (generation); BCAST-11 (adapter:peer_buffer)"``: each core clause left
    UNSUPPORTED and the capability (or adapter surface) the implementation did not declare."""
    unjudged = suite.core_unsupported()
    return f"{len(unjudged)}" + (f": {'; '.join(u.label for u in unjudged)}" if unjudged else "")


def _absent_text(suite: SuiteResult) -> str:
    return ", ".join(r.clause.id for r in suite.optional_absent) or "none"


def _expectations_md(suite: SuiteResult) -> list[str]:
    if not suite.expectations:
        return []
    unexpected = ", ".join(r.clause.id for r in suite.unexpected) or "none"
    return [
        f"- Expectations: `{suite.expectations}`; {len(suite.expected_results)} as expected; "
        f"unexpected: {unexpected}"
    ]


def _md_table(columns: Sequence[Column], rows: Sequence[ReportRow]) -> list[str]:
    out = ["| " + " | ".join(c.header for c in columns) + " |"]
    out.append("|" + "|".join("---:" if c.css_class == "num" else "---" for c in columns) + "|")
    out.extend("| " + " | ".join(c.markdown(r) for c in columns) + " |" for r in rows)
    return out


def render_report_markdown(
    suites: SuiteResult | Sequence[SuiteResult],
    columns: Sequence[Column] | None = None,
    *,
    spec: Spec | None = None,
) -> str:
    """The markdown report: header, summary per level, MUST failures, a table per area."""
    runs = as_runs(suites)
    areas = {a.id: a for a in (spec or default_spec()).areas}
    cols = list(columns) if columns is not None else default_columns(runs)
    rows = _rows(runs)
    out = ["# tpbcast conformance report", ""]
    for suite in runs:
        impl = suite.implementation
        out += [
            f"## {_md_cell(impl.label)}",
            "",
            f"- Result: **{_headline(suite)}** (exit status {exit_status(suite)})",
            f"- Judged: {suite.judgement_summary()}",
            f"- Core UNSUPPORTED: {_core_unsupported_text(suite)}",
            f"- MAY options absent (allowed): {_absent_text(suite)}",
            f"- Implementation: `{impl.spec or impl.name}`, version {impl.version or 'unknown'}",
            f"- Capabilities: {', '.join(sorted(impl.capabilities)) or 'none declared'}",
            f"- Transport: {_transport_label(impl.transport)} (clauses of another transport's "
            "scope are NOT_APPLICABLE)",
            *_expectations_md(suite),
            f"- Spec: {suite.spec_label}; started {suite.started.isoformat(timespec='seconds')}; "
            f"duration {suite.duration:.1f} s; seed {_seed(suite)}",
            "",
            "| level | " + " | ".join(v.value for v in Verdict) + " |",
            "|---|" + "---:|" * len(Verdict),
        ]
        for level, counts in suite.counts_by_level().items():
            out.append(f"| {level} | " + " | ".join(str(counts[v]) for v in Verdict) + " |")
        out.append("")
    failures = sorted((r for r in rows if r.is_failure), key=lambda r: r.order)
    if failures:
        out += ["## Failures (MUST first)", "", *_md_table(cols, failures), ""]
    for area in _areas_in(rows):
        area_rows = sorted((r for r in rows if r.clause.area == area), key=lambda r: r.order)
        info = areas.get(area)
        heading = f"{area}: {info.title}" if info else area
        out += [f"## {heading}", "", *_md_table(cols, area_rows), ""]
    return "\n".join(out).rstrip("\n") + "\n"


def _areas_in(rows: Sequence[ReportRow]) -> list[str]:
    present = {r.clause.area for r in rows}
    return [a for a in AREAS if a in present]


# -------------------------------------------------------------------------------------------
# HTML
# -------------------------------------------------------------------------------------------

_CSS: Final = """
:root { --fg:#1f2328; --muted:#59636e; --line:#d1d9e0; --bg:#ffffff; --head:#f6f8fa; }
* { box-sizing: border-box; }
body { margin: 0; padding: 24px 32px 48px; color: var(--fg); background: var(--bg);
  font: 14px/1.45 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 32px 0 6px; padding-bottom: 4px;
  border-bottom: 1px solid var(--line); }
h2 small { font-weight: normal; color: var(--muted); font-size: 13px; }
p.area-summary { color: var(--muted); margin: 0 0 10px; max-width: 980px; }
a { color: #0969da; text-decoration: none; } a:hover { text-decoration: underline; }
.headline { display: inline-block; font-weight: 600; font-size: 15px; padding: 6px 12px;
  border-radius: 6px; margin: 8px 0 14px; }
.headline.ok { background: #dafbe1; color: #116329; border: 1px solid #4ac26b; }
.headline.bad { background: #ffebe9; color: #a40e26; border: 1px solid #ff8182; }
.runs { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }
.run { border: 1px solid var(--line); border-radius: 8px; padding: 12px 16px;
  flex: 1 1 380px; max-width: 640px; }
.run h3 { margin: 0 0 6px; font-size: 16px; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px;
  margin: 0 0 10px; }
dl.meta dt { color: var(--muted); } dl.meta dd { margin: 0; overflow-wrap: anywhere; }
table { border-collapse: collapse; width: 100%; }
th, td { border: 1px solid var(--line); padding: 5px 8px; vertical-align: top;
  text-align: left; }
th { background: var(--head); font-weight: 600; white-space: nowrap; }
table.counts { width: auto; } table.counts td, table.counts th { text-align: right;
  min-width: 64px; }
table.counts td:first-child, table.counts th:first-child { text-align: left; }
td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
td.verdict, td.level { white-space: nowrap; }
td.clause { width: 34%; } td.message { width: 40%; }
tr.must-fail td { background: #fff5f5; }
a.cid { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-weight: 600; }
details summary { cursor: pointer; } td.clause details { margin-top: 2px; }
td.clause summary { color: var(--fg); }
p.req { margin: 6px 0; padding: 6px 8px; background: var(--head);
  border-left: 3px solid #0969da; }
p.why { margin: 4px 0; color: var(--muted); font-size: 13px; }
ul.checks { margin: 4px 0 0; padding-left: 18px; font-size: 12px; }
ul.checks code { word-break: break-all; }
pre { white-space: pre-wrap; word-break: break-word; margin: 4px 0 0; font-size: 12px;
  background: var(--head); padding: 6px 8px; border-radius: 4px; max-height: 360px;
  overflow: auto; }
.msg { font-size: 13px; }
.badge { display: inline-block; min-width: 92px; text-align: center; padding: 1px 8px;
  border-radius: 10px;
  font-size: 12px; font-weight: 600; letter-spacing: .02em; border: 1px solid transparent; }
.v-pass { background: #dafbe1; color: #116329; border-color: #4ac26b; }
.v-fail { background: #ffebe9; color: #a40e26; border-color: #ff8182; }
.v-error { background: #fbefff; color: #6e40c9; border-color: #c297ff; }
.v-unsupported { background: #eaeef2; color: #424a53; border-color: #afb8c1; }
.v-not_tested { background: #fff; color: #6e7781; border: 1px dashed #afb8c1; }
.v-not_applicable { background: #f6f8fa; color: #8c959f; border: 1px dotted #d1d9e0; }
ul.checks .badge { min-width: 0; font-size: 11px; }
small.expect { display: block; max-width: 220px; white-space: normal; color: var(--muted);
  font-size: 11px; margin-top: 2px; }
small.expect.unexpected { color: #a40e26; font-weight: 600; }
table.counts .badge { min-width: 0; }
.lvl { display: inline-block; font-size: 11px; font-weight: 700; padding: 0 6px;
  border-radius: 4px; }
.lvl-must { background: #1f2328; color: #fff; } .lvl-should { background: #59636e;
  color: #fff; }
.lvl-may { background: #d1d9e0; color: #1f2328; }
nav.areas { margin: 18px 0 0; display: flex; flex-wrap: wrap; gap: 6px; }
nav.areas a { border: 1px solid var(--line); border-radius: 14px; padding: 2px 10px;
  font-size: 13px; }
nav.areas a.has-fail { border-color: #ff8182; background: #ffebe9; color: #a40e26; }
footer { margin-top: 40px; color: var(--muted); font-size: 12px; }
"""


def _transport_label(name: str) -> str:
    """``shm: a shared-memory transport: ...``: the name with its row of the profile table
    (a report read back from JSON may name a profile this checkout does not have)."""
    summary = next((p.summary for p in transport_profiles() if p.name == name), "")
    return f"{name}: {summary}" if summary else name


def _run_card(suite: SuiteResult) -> str:
    impl = suite.implementation
    ok = exit_status(suite) == 0
    meta = [
        ("Implementation", impl.spec or impl.name),
        ("Version", impl.version or "unknown"),
        ("Capabilities", ", ".join(sorted(impl.capabilities)) or "none declared"),
        ("Transport", _transport_label(impl.transport)),
        ("Core UNSUPPORTED", _core_unsupported_text(suite)),
        ("MAY options absent", _absent_text(suite)),
        ("Spec", suite.spec_label),
        ("Started", suite.started.isoformat(timespec="seconds")),
        ("Duration", f"{suite.duration:.1f} s"),
        ("Seed", _seed(suite)),
        ("Exit status", str(exit_status(suite))),
    ]
    if suite.expectations:
        unexpected = ", ".join(r.clause.id for r in suite.unexpected) or "none"
        meta.append(("Expectations", suite.expectations))
        meta.append(("Unexpected", unexpected))
    dl = "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(v)}</dd>" for k, v in meta)
    head = "".join(f"<th>{_badge(v)}</th>" for v in Verdict)
    body = "".join(
        f"<tr><td>{_level_html_text(level)}</td>"
        + "".join(f"<td>{counts[v]}</td>" for v in Verdict)
        + "</tr>"
        for level, counts in suite.counts_by_level().items()
    )
    totals = suite.counts()
    body += "<tr><th>all</th>" + "".join(f"<th>{totals[v]}</th>" for v in Verdict) + "</tr>"
    return (
        f'<div class="run"><h3>{_esc(impl.label)}</h3>'
        f'<div class="headline {"ok" if ok else "bad"}">{_esc(_headline(suite))}</div>'
        f'<p class="judged">{_esc(suite.judgement_summary())}</p>'
        f'<dl class="meta">{dl}</dl>'
        f'<table class="counts"><tr><th>level</th>{head}</tr>{body}</table></div>'
    )


def _level_html_text(level: str) -> str:
    return f'<span class="lvl lvl-{level.lower()}">{level}</span>'


def _html_table(columns: Sequence[Column], rows: Sequence[ReportRow]) -> str:
    head = "".join(f"<th>{_esc(c.header)}</th>" for c in columns)
    body = []
    for row in rows:
        cls = ' class="must-fail"' if row.is_must_failure else ""
        cells = "".join(
            f'<td class="{c.css_class}">{c.html(row)}</td>'
            if c.css_class
            else f"<td>{c.html(row)}</td>"
            for c in columns
        )
        body.append(f'<tr id="row-{row.clause.anchor}"{cls}>{cells}</tr>')
    rows_html = "".join(body)
    return f'<table class="matrix"><thead><tr>{head}</tr></thead><tbody>{rows_html}</tbody></table>'


def render_html(
    suites: SuiteResult | Sequence[SuiteResult],
    columns: Sequence[Column] | None = None,
    *,
    spec: Spec | None = None,
) -> str:
    """The static HTML page (inline CSS, no JavaScript)."""
    runs = as_runs(suites)
    cols = list(columns) if columns is not None else default_columns(runs)
    rows = _rows(runs)
    title = "tpbcast conformance: " + " vs ".join(s.implementation.label for s in runs)
    areas = {a.id: a for a in (spec or default_spec()).areas}
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body>",
        "<header><h1>tpbcast conformance report</h1>",
        f'<div class="runs">{"".join(_run_card(s) for s in runs)}</div>',
    ]
    nav = []
    for area in _areas_in(rows):
        bad = any(r.is_must_failure for r in rows if r.clause.area == area)
        cls = ' class="has-fail"' if bad else ""
        n = sum(1 for r in rows if r.clause.area == area)
        nav.append(f'<a href="#area-{area.lower()}"{cls}>{area} ({n})</a>')
    failures = sorted((r for r in rows if r.is_failure), key=lambda r: r.order)
    if failures:
        nav.insert(0, f'<a href="#failures" class="has-fail">Failures ({len(failures)})</a>')
    parts.append(f'<nav class="areas">{"".join(nav)}</nav></header><main>')
    if failures:
        parts.append(
            '<section id="failures"><h2>Failures <small>MUST first, then SHOULD and MAY</small>'
            f"</h2>{_html_table(cols, failures)}</section>"
        )
    for area_id in _areas_in(rows):
        info = areas.get(area_id)
        area_rows = sorted((r for r in rows if r.clause.area == area_id), key=lambda r: r.order)
        heading = f"{area_id}: {info.title}" if info else area_id
        summary = f'<p class="area-summary">{_esc(info.summary)}</p>' if info else ""
        parts.append(
            f'<section id="area-{area_id.lower()}"><h2>{_esc(heading)} '
            f"<small>{len(area_rows)} clauses</small></h2>{summary}"
            f"{_html_table(cols, area_rows)}</section>"
        )
    parts.append(
        f'</main><footer>Generated by tpbcast.conformance. Clause texts: <a href="{SPEC_NAME}">'
        f'{SPEC_NAME}</a>; machine-readable results: <a href="{JSON_NAME}">{JSON_NAME}</a>.'
        "</footer></body></html>"
    )
    return "\n".join(parts) + "\n"


# -------------------------------------------------------------------------------------------
# Files
# -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportFiles:
    """Where :func:`write_reports` put each file."""

    json: Path
    markdown: Path
    html: Path
    spec: Path


def write_reports(
    suites: SuiteResult | Sequence[SuiteResult],
    directory: Path | str,
    *,
    spec: Spec | None = None,
    columns: Sequence[Column] | None = None,
) -> ReportFiles:
    """Write ``conformance.json``, ``conformance.md``, ``index.html`` and ``SPEC.md``.

    The SPEC.md copy makes the report directory self-contained: its clause links
    (``SPEC.md#wire-1``) resolve wherever the directory is archived.
    """
    spec = spec or default_spec()
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    files = ReportFiles(
        json=out / JSON_NAME,
        markdown=out / MARKDOWN_NAME,
        html=out / HTML_NAME,
        spec=out / SPEC_NAME,
    )
    files.json.write_text(
        json.dumps(json_document(suites), indent=2, sort_keys=False) + "\n", encoding="utf-8"
    )
    files.markdown.write_text(render_report_markdown(suites, columns, spec=spec), encoding="utf-8")
    files.html.write_text(render_html(suites, columns, spec=spec), encoding="utf-8")
    files.spec.write_text(render_markdown(spec), encoding="utf-8")
    return files
