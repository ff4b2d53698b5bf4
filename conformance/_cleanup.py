"""What the suite cleaned up after the implementation: per test, then per run.

The harness notes what each group left behind and proves it the group's own
(``tpbcast.harness._leaks``); this plugin, after each test, removes what that test's
groups left outside their workdirs and puts every entry (name, size, creator pid, the
clause it breaks) in the test's report: a section shown with the test and a
``tpbcast_cleanup`` user property the controller collects.  The controller sums it up
per implementation for the terminal summary and writes ``cleanup.json`` next to the
conformance reports (``tools/ecosystem.py`` shows it per implementation).

Which clause an entry breaks: a clause the test itself cites for that kind of leftover
if it cites one, else the transport's general one (a file or segment: SHM-1 on ``shm``,
HYG-2 otherwise; a process: SHM-12 on ``shm``, HYG-1 otherwise).  It is a pointer for
the reader: the verdicts are the tests' own checks, never this bookkeeping.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest

from tpbcast.conformance.spec import default_spec
from tpbcast.fixtures import loaded_implementation
from tpbcast.harness.runtime import Leak, remove_leaks, size_text, take_leaks

__all__ = ["P_CLEANUP", "CleanupPlugin", "RunCleanup", "summary_line"]

P_CLEANUP: Final = "tpbcast_cleanup"
CLEANUP_FILE: Final = "cleanup.json"
# In order of preference when the test cites none: the transport's own clause first.
_FILE_CLAUSES: Final = ("SHM-1", "SHM-2", "SHM-3", "HYG-2", "HYG-4")
_PROCESS_CLAUSES: Final = ("SHM-12", "HYG-1")  # the same order


def clause_for(kind: str, cited: Iterable[str], transport: str) -> str:
    """The clause a leftover of ``kind`` breaks, for a test citing ``cited``: the one the
    test cites, else the transport's own leftover clause (the SHM ones on a transport they
    are scoped to) before the core one."""
    candidates = _PROCESS_CLAUSES if kind == "process" else _FILE_CLAUSES
    for cid in cited:
        if cid in candidates:
            return cid
    spec = default_spec()
    for cid in candidates:
        if cid in spec and spec[cid].applies_to(transport):
            return cid
    return candidates[-1]


def _entry(leak: Leak, clause: str, problem: str) -> dict[str, Any]:
    return {
        "kind": leak.kind,
        "path": leak.path,
        "pid": leak.key[0] if leak.kind == "process" else None,
        "size": leak.size,
        "creator_pid": leak.creator or None,
        "proof": leak.proof,
        "group": leak.group,
        "clause": clause,
        "where": "workdir" if leak.in_workdir else "outside",
        "removed": not problem,
        "problem": problem or None,
    }


_KINDS: Final = (
    ("segment", "segments"),
    ("semaphore", "semaphores"),
    ("socket", "IPC files"),
    ("file", "other files"),
    ("dir", "directories"),
    ("process", "processes"),
)


@dataclass
class RunCleanup:
    """Totals for one implementation (a conformance run judges one): per place
    ("outside": /dev/shm, /tmp, the process table; "workdir": the groups' own workdirs)."""

    counts_by_where: dict[str, dict[str, int]] = field(
        default_factory=lambda: {"outside": {}, "workdir": {}}
    )
    tests: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def add(self, nodeid: str, entries: list[dict[str, Any]]) -> None:
        self.tests.setdefault(nodeid, []).extend(entries)
        for e in entries:
            counts = self.counts_by_where.setdefault(str(e["where"]), {})
            counts[e["kind"]] = counts.get(e["kind"], 0) + 1
            counts["bytes"] = counts.get("bytes", 0) + int(e["size"] or 0)
            if not e["removed"]:
                counts["not_removed"] = counts.get("not_removed", 0) + 1

    def as_doc(self, implementation: str) -> dict[str, Any]:
        return {
            "schema": "tpbcast-cleanup/1",
            "implementation": implementation,
            "outside": self.counts_by_where.get("outside", {}),
            "workdir": self.counts_by_where.get("workdir", {}),
            "summary": summary_line(implementation, self.counts_by_where),
            "tests": self.tests,
        }


def _counts_text(counts: Mapping[str, int]) -> str:
    parts = []
    for kind, word in _KINDS:
        n = counts.get(kind, 0)
        if not n:
            continue
        parts.append(f"{n} {word}")
        if kind == "segment":
            parts[-1] += f", {size_text(counts.get('bytes', 0))}"
    if counts.get("not_removed"):
        parts.append(f"{counts['not_removed']} could NOT be removed")
    return ", ".join(parts)


def summary_line(implementation: str, counts_by_where: Mapping[str, Mapping[str, int]]) -> str:
    """``vllm MessageQueue: 9 segments, 216.0 MiB, 2 processes; in the groups' workdirs:
    384 IPC files`` (what the suite removed after it)."""
    outside = _counts_text(counts_by_where.get("outside", {}))
    inside = _counts_text(counts_by_where.get("workdir", {}))
    text = outside or "nothing outside the groups' workdirs"
    if inside:
        text += f"; in the groups' workdirs: {inside}"
    return f"{implementation}: {text}"


class CleanupPlugin:
    """Registered in every process of a run: workers remove and report, the controller
    (or the only process) also sums up and writes ``cleanup.json``."""

    def __init__(
        self, config: pytest.Config, *, controller: bool, report_dir: Callable[[], Path]
    ) -> None:
        self.config = config
        self.controller = controller
        self.report_dir = report_dir
        self.implementation = ""
        self.totals = RunCleanup()
        self.write_error = ""

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if call.when != "teardown":
            return report
        leaks = take_leaks()
        if not leaks:
            return report
        problems = dict((id(leak), text) for leak, text in remove_leaks(leaks))
        impl = loaded_implementation(item.config)
        transport = impl.transport if impl is not None else ""
        cited = [str(a) for m in item.iter_markers("clause") for a in m.args]
        entries = [
            _entry(leak, clause_for(leak.kind, cited, transport), problems.get(id(leak), ""))
            for leak in leaks
        ]
        report.user_properties.append((P_CLEANUP, json.dumps(entries)))
        report.sections.append(("tpbcast cleanup", _section(entries)))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self.controller:
            return
        for key, value in report.user_properties:
            if key == "tpbcast_impl_name" and not self.implementation:
                self.implementation = str(value)
            elif key == P_CLEANUP:
                self.totals.add(report.nodeid, json.loads(str(value)))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """``cleanup.json`` next to the conformance reports (controller only)."""
        if not self.controller or self.config.option.collectonly:
            return
        doc = self.totals.as_doc(self.implementation or "the implementation")
        try:
            directory = self.report_dir()
            directory.mkdir(parents=True, exist_ok=True)
            (directory / CLEANUP_FILE).write_text(json.dumps(doc, indent=2) + "\n", "utf-8")
        except OSError as exc:
            self.write_error = f"could not write {CLEANUP_FILE}: {exc.strerror} ({exc.filename})"

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.controller or not (self.totals.tests or self.implementation):
            return
        tr = terminalreporter
        tr.section("tpbcast cleanup")
        tr.write_line(
            "removed after the implementation: "
            + summary_line(self.implementation or "the implementation", self.totals.counts_by_where)
        )
        if self.write_error:
            tr.write_line(self.write_error, red=True)
        for nodeid, entries in sorted(self.totals.tests.items()):
            outside = [e for e in entries if e["where"] == "outside"]
            if outside:
                tr.write_line(f"  {nodeid}: " + "; ".join(_short(e) for e in outside[:4]))


def _short(e: Mapping[str, Any]) -> str:
    what = f"pid {e['pid']}" if e["kind"] == "process" else e["path"]
    return f"{e['kind']} {what} ({e['clause']})"


def _section(entries: list[dict[str, Any]]) -> str:
    lines = []
    for e in entries:
        size = f", {size_text(int(e['size']))}" if e["size"] else ""
        creator = f", creator pid {e['creator_pid']}" if e["creator_pid"] else ""
        what = f"pid {e['pid']} ({e['path']})" if e["kind"] == "process" else e["path"]
        state = "removed" if e["removed"] else f"NOT removed: {e['problem']}"
        where = " (in the group's workdir)" if e["where"] == "workdir" else ""
        lines.append(
            f"{e['kind']} {what}{size}{creator}{where}: breaks {e['clause']}; {state} "
            f"[proof: {e['proof']}]"
        )
    return "\n".join(lines)
