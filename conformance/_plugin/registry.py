"""The registry check at collection: every test cites known clauses (and known transports
in ``staged_via``), every MUST/SHOULD clause in scope has a test; the clause selection.

A violation replaces the whole run by one failing item (:class:`RegistryCheck`) listing
every problem: an item, not a ``UsageError``, since a hook exception inside an xdist
worker crashes the controller instead of reporting.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from tpbcast.conformance.spec import Spec, transport_names

from .codec import ReportProperties
from .state import CLAUSES_KEY, REGISTRY_ITEM, SELECTED_KEY, SPEC_KEY

__all__ = ["RegistryCheck", "pytest_collection_modifyitems", "staged_via"]


class _RegistryError(Exception):
    """The suite and the clause registry disagree; the run judges nothing."""


class RegistryCheck(pytest.Item):
    """Stands in for the whole run when tests and the clause registry disagree."""

    def __init__(self, *, problems: Sequence[str], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.problems = tuple(problems)

    def runtest(self) -> None:
        raise _RegistryError(self.text())

    def text(self) -> str:
        """Every problem, one per line, and what to do about them."""
        return "\n".join(
            [
                f"the conformance tests and the clause registry disagree "
                f"({len(self.problems)} problem(s)); no verdict was produced:",
                *(f"  - {p}" for p in self.problems),
                "Every test must cite known clause ids with @pytest.mark.clause(...), and "
                "every MUST/SHOULD clause needs at least one test.",
            ]
        )

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, _RegistryError):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[str, int | None, str]:
        return (str(self.config.rootpath), None, REGISTRY_ITEM)


def _cited(item: pytest.Item, spec: Spec) -> tuple[tuple[str, ...], list[str]]:
    """(known clause ids, problems) from every ``clause`` marker on ``item``."""
    ids: list[str] = []
    problems: list[str] = []
    for mark in item.iter_markers("clause"):
        if not mark.args:
            problems.append(f"{item.nodeid}: @pytest.mark.clause() names no clause id")
        for arg in mark.args:
            if not isinstance(arg, str):
                problems.append(f"{item.nodeid}: clause id {arg!r} is not a string")
            elif arg not in spec:
                problems.append(f"{item.nodeid}: cites unknown clause id {arg!r}")
            else:
                ids.append(spec[arg].id)
    if not ids and not problems:
        problems.append(f"{item.nodeid}: cites no clause (add @pytest.mark.clause(...))")
    known = transport_names()
    staged = item.get_closest_marker("staged_via")
    if staged is not None and not staged.args:
        problems.append(
            f"{item.nodeid}: staged_via() names no transport (known: {', '.join(known)})"
        )
    for via in staged_via(item) or ():
        if via not in known:
            # A typo would skip the test on every implementation, silently.
            problems.append(
                f"{item.nodeid}: staged_via({via!r}) names no transport (the transport "
                f"profiles: {', '.join(known)})"
            )
    return tuple(dict.fromkeys(ids)), problems


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Check tests against the registry; apply the clause selection."""
    spec = config.stash[SPEC_KEY]
    selected = config.stash[SELECTED_KEY]
    problems: list[str] = []
    cited: set[str] = set()
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        ids, item_problems = _cited(item, spec)
        problems.extend(item_problems)
        item.stash[CLAUSES_KEY] = ids
        if selected is not None and not set(ids) & set(selected):
            dropped.append(item)
            continue
        cited.update(ids)
        kept.append(item)
        item.user_properties.extend(ReportProperties(clauses=ids).encode())
    scope = spec.clauses if selected is None else [spec[cid] for cid in selected]
    problems.extend(
        f"{c.level} clause {c.id} ({c.title}) has no test"
        for c in scope
        if c.needs_test and c.id not in cited
    )
    if problems:
        check = RegistryCheck.from_parent(session, name=REGISTRY_ITEM, problems=problems)
        dropped, kept = list(items), [check]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = kept


def staged_via(item: pytest.Item) -> tuple[str, ...] | None:
    """The transports a test stages its fault through, or None: judged on every one."""
    mark = item.get_closest_marker("staged_via")
    return None if mark is None or not mark.args else tuple(str(arg) for arg in mark.args)
