"""Which clauses a run judges (``--tpbcast-clauses``, the positional prefixes) and ``--list``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tpbcast.conformance.spec import Clause, Spec, load_spec, transport_profiles

__all__ = ["list_lines", "select_clauses", "split_selectors"]


def split_selectors(raw: Iterable[str]) -> list[str]:
    """``["WIRE,INIT-3", "SEC"]`` -> ``["WIRE", "INIT-3", "SEC"]``."""
    return [part.strip() for item in raw for part in item.split(",") if part.strip()]


def select_clauses(spec: Spec, selectors: Iterable[str]) -> tuple[Clause, ...] | None:
    """The clauses picked by area/id selectors (``WIRE``, ``INIT-3``), or None for all.

    :raises ValueError: a selector matches no clause (a typo must not select nothing).
    """
    wanted = split_selectors(selectors)
    if not wanted:
        return None
    try:
        return spec.select(wanted)
    except KeyError as exc:
        raise ValueError(str(exc.args[0]) if exc.args else str(exc)) from None


def list_lines(selectors: Sequence[str] = (), registry: str | None = None) -> list[str]:
    """``--list``: one line per (selected) clause: id, level, scope, title, capabilities;
    without a selection, then the transport profiles a scope may name, one line each (a
    selection prints clause lines only, for scripts)."""
    spec = load_spec(registry)
    chosen = select_clauses(spec, selectors)
    clauses = spec.clauses if chosen is None else chosen
    width = max((len(c.id) for c in clauses), default=8)
    scope_width = max((len(c.scope) for c in clauses), default=4)
    lines = []
    for c in clauses:
        extra = f" [needs {', '.join(c.capabilities)}]" if c.capabilities else ""
        extra += "".join(f" [{lvl} for {t}]" for t, lvl in c.level_by_transport)
        lines.append(f"{c.id:<{width}}  {c.level:<6}  {c.scope:<{scope_width}}  {c.title}{extra}")
    if chosen is not None:
        return lines
    lines.append("")
    lines.append("transport profiles (scope core: every transport; dispatch: the fallback layer):")
    name_width = max((len(p.name) for p in transport_profiles()), default=4)
    lines.extend(f"  {p.name:<{name_width}}  {p.summary}" for p in transport_profiles())
    return lines
