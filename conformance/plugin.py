"""pytest plugin of the conformance run: clause markers, registry checks, verdicts, reports.

Loaded only by the conformance run (``-p tpbcast.conformance.plugin``; ``python -m
tpbcast.conformance`` does it for you), never by the project's own self-tests.

What it does, in hook order:

1. Registers the ``clause(*ids)`` marker and loads the clause registry.
2. At collection (``tryfirst``, so before ``-k``/``-m``): every test must cite at least
   one known clause id, and every MUST/SHOULD clause of the suite's scope (of the
   ``--tpbcast-clauses`` selection, if any) must be cited by a test.  A violation
   replaces the whole run by one failing item listing every problem (an item, not a
   ``UsageError``: a hook exception inside an xdist worker crashes the controller
   instead of reporting), and the run exits with status 4 (usage error).  With a
   selection, tests citing no selected clause are deselected.
3. Opens a check log for each test (``_checks``: the soft checks it records, one clause
   each), maps the test's outcome and its checks to verdicts per clause (the rules are
   in :mod:`._verdicts`) and carries them, as JSON, in the report's ``user_properties``
   (so they cross xdist and land in JUnit XML as properties), beside the test's overall
   verdict.
4. In the controlling process, aggregates per clause (``_results.aggregate``), writes
   the JSON, markdown and HTML reports into ``--tpbcast-report-dir`` and sets the exit
   status from ``_results.exit_status``: non-zero iff a MUST clause fails (FAIL or
   ERROR).  pytest's own "some test failed" status is replaced, so a failing SHOULD
   test does not fail CI; interrupted runs and usage errors keep their status.  With
   ``--tpbcast-expectations FILE`` (``_expectations``) the file is the baseline instead:
   non-zero iff a result is unexpected (a FAIL/ERROR it does not list, or a listed
   verdict that turned into PASS); an unusable file is a usage error naming it.
5. Gives the run one private directory shared by all its xdist workers
   (``tpbcast_run_shared_dir``), so an expensive observation (FALLBACK's torch process
   groups) is made once per run, not once per worker; removed at the end.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pytest

from tpbcast.fixtures import loaded_implementation, settings_of

from . import _checks
from ._expectations import Expectations, ExpectationsError, apply_expectations, load_expectations
from ._results import (
    CheckResult,
    ClauseResult,
    ImplementationInfo,
    SuiteResult,
    Verdict,
    aggregate,
)
from ._verdicts import (
    Judgement,
    NotApplicable,
    NotStaged,
    Unsupported,
    clause_checks,
    judge,
    judge_exception,
    require,
)
from .spec import DEFAULT_TRANSPORT, Spec, load_spec, transport_names, transport_profiles

if TYPE_CHECKING:
    from collections.abc import Generator, Iterable, Sequence

    from tpbcast.harness import Implementation

    from .spec import Clause

__all__ = [
    "REGISTRY_ITEM",
    "REPORT_DIR_DEFAULT",
    "RegistryCheck",
    "Unsupported",
    "list_lines",
    "require",
    "select_clauses",
]

REPORT_DIR_DEFAULT: Final = "reports/conformance"
SHARED_DIR_ENV: Final = "TPBCAST_CONFORMANCE_SHARED_DIR"
"""A private directory of one run, shared by its xdist workers (they inherit the env)."""
REGISTRY_ITEM: Final = "tpbcast-clause-registry"
_RESULTS_PLUGIN: Final = "tpbcast-conformance-results"

# user_properties keys (also visible in junit.xml as <property name=...>).
P_CLAUSE: Final = "clause"
P_VERDICT: Final = "tpbcast_verdict"
P_MESSAGE: Final = "tpbcast_message"
P_RANK: Final = "tpbcast_failing_rank"
P_DURATION: Final = "tpbcast_duration"
P_IMPL: Final = "tpbcast_impl_name"
P_IMPL_VERSION: Final = "tpbcast_impl_version"
P_IMPL_CAPS: Final = "tpbcast_impl_capabilities"
P_IMPL_SPEC: Final = "tpbcast_impl_spec"
P_IMPL_TRANSPORT: Final = "tpbcast_impl_transport"
P_SEED: Final = "tpbcast_seed"
P_CHECKS: Final = "tpbcast_checks"

_SPEC_KEY: Final = pytest.StashKey[Spec]()
_SELECTED_KEY: Final = pytest.StashKey[tuple[str, ...] | None]()
_CLAUSES_KEY: Final = pytest.StashKey[tuple[str, ...]]()
_PHASES_KEY: Final = pytest.StashKey[list[Judgement | None]]()
_DURATION_KEY: Final = pytest.StashKey[float]()
_SHARED_KEY: Final = pytest.StashKey[str]()
_LOG_KEY: Final = pytest.StashKey[_checks.CheckLog]()
_OUTSIDE_KEY: Final = pytest.StashKey[dict[str, str]]()


# --------------------------------------------------------------------------- selection


def _split(raw: Iterable[str]) -> list[str]:
    return [part.strip() for item in raw for part in item.split(",") if part.strip()]


def select_clauses(spec: Spec, selectors: Iterable[str]) -> tuple[Clause, ...] | None:
    """The clauses picked by area/id selectors (``WIRE``, ``INIT-3``), or None for all.

    :raises ValueError: a selector matches no clause (a typo must not select nothing).
    """
    wanted = _split(selectors)
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
        lines.append(f"{c.id:<{width}}  {c.level:<6}  {c.scope:<{scope_width}}  {c.title}{extra}")
    if chosen is not None:
        return lines
    lines.append("")
    lines.append("transport profiles (scope core: every transport; dispatch: the fallback layer):")
    name_width = max((len(p.name) for p in transport_profiles()), default=4)
    lines.extend(f"  {p.name:<{name_width}}  {p.summary}" for p in transport_profiles())
    return lines


# --------------------------------------------------------------------------- options


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--tpbcast-clauses``, ``--tpbcast-report-dir``, ``--tpbcast-registry``."""
    group = parser.getgroup("tpbcast-conformance", "tpbcast conformance suite")
    group.addoption(
        "--tpbcast-clauses",
        action="append",
        default=[],
        metavar="SELECTORS",
        help="run only tests citing a clause of these comma-separated areas or ids "
        "(WIRE,INIT-3); the MUST/SHOULD coverage check then applies to them only",
    )
    group.addoption(
        "--tpbcast-report-dir",
        default=None,
        metavar="DIR",
        help=f"where the JSON/markdown/HTML reports go (default: {REPORT_DIR_DEFAULT})",
    )
    group.addoption(
        "--tpbcast-registry",
        default=None,
        metavar="TOML",
        help="judge against this clause registry instead of the installed clauses.toml "
        "(the suite's own self-tests use it)",
    )
    group.addoption(
        "--tpbcast-expectations",
        default=None,
        metavar="TOML",
        help="clauses known to FAIL or be UNSUPPORTED, each with a reason "
        "([expect.<ID>] verdict/reason); the run then fails only on an unexpected FAIL/ERROR "
        "or an expectation that no longer holds (e.g. PASS), at every level",
    )


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker, load the registry, check the selection, start collecting."""
    config.addinivalue_line(
        "markers",
        "clause(*ids): the conformance clause ids (e.g. 'WIRE-1') this test judges; "
        "each check inside it judges one of them (tests/_support.check)",
    )
    config.addinivalue_line(
        "markers",
        "staged_via(*transports): the test stages its fault through one of these transports "
        "(a uds-v1 rogue peer or root, a socket trick); against an implementation of any "
        "other transport it is not run and its checks are NOT_APPLICABLE (a core clause "
        "only such tests cite is UNSUPPORTED: not staged)",
    )
    _preload_optional("numpy")
    spec = load_spec(config.getoption("tpbcast_registry"))
    config.stash[_SPEC_KEY] = spec
    try:
        chosen = select_clauses(spec, config.getoption("tpbcast_clauses"))
    except ValueError as exc:
        raise pytest.UsageError(f"--tpbcast-clauses: {exc}") from None
    config.stash[_SELECTED_KEY] = None if chosen is None else tuple(c.id for c in chosen)
    if not _is_worker(config):
        expectations = _load_expectations(config, spec)
        collector = _ResultCollector(config, spec, chosen, expectations=expectations)
        config.pluginmanager.register(collector, _RESULTS_PLUGIN)
        # Workers are spawned after configure and inherit this: expensive observations
        # (FALLBACK's torch process groups) are made once per run, not once per worker.
        shared = tempfile.mkdtemp(prefix="tpbcast-run-")
        os.environ[SHARED_DIR_ENV] = shared
        config.stash[_SHARED_KEY] = shared


def pytest_sessionstart(session: pytest.Session) -> None:
    """Load the implementation under test before any test runs (controller only).

    An implementation that cannot be loaded (a bad factory, an unknown transport, a missing
    member) would otherwise fail the setup of every test with the same message: a report
    of 134 ERRORs that say one thing.  Stop the run instead, with that one error and the
    usage exit status.  Workers load it again on first use (``tpbcast_impl``).
    """
    config = session.config
    if _is_worker(config) or config.option.collectonly:
        return
    settings = settings_of(config)
    try:
        impl = config.hook.pytest_tpbcast_implementation(config=config, spec=settings.impl)
    except Exception as exc:  # any import, factory or contract error: one message
        raise pytest.UsageError(
            f"cannot load tpbcast implementation {settings.impl!r} (from "
            f"{settings.impl_from}): {type(exc).__name__}: {exc}"
        ) from None
    if impl is None:
        raise pytest.UsageError(f"no plugin returned an implementation for {settings.impl!r}")


def _load_expectations(config: pytest.Config, spec: Spec) -> Expectations | None:
    """The ``--tpbcast-expectations`` file, validated against the registry (controller only:
    workers report checks, the controller judges them against the file)."""
    raw = config.getoption("tpbcast_expectations")
    if not raw:
        return None
    path = Path(raw)
    if not path.is_absolute():
        path = config.invocation_params.dir / path
    try:
        return load_expectations(path, spec)
    except ExpectationsError as exc:
        raise pytest.UsageError(f"--tpbcast-expectations: {exc}") from None


def _preload_optional(name: str) -> None:
    """Import ``name`` now if it is installed, so ranks inherit it instead of importing it.

    The buffer-kind tests hand numpy arrays to the implementation inside forked ranks;
    without this every rank pays the import again (and the fixtures warn about it).
    numpy stays optional: a suite run without it judges everything else.  torch is left
    out on purpose: a parent holding torch makes every fork of the suite's groups slower.
    """
    with contextlib.suppress(ImportError):
        importlib.import_module(name)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the run's shared directory (controller only)."""
    shared = config.stash.get(_SHARED_KEY, None)
    if shared is not None:
        shutil.rmtree(shared, ignore_errors=True)
        if os.environ.get(SHARED_DIR_ENV) == shared:
            del os.environ[SHARED_DIR_ENV]


@pytest.fixture(scope="session")
def tpbcast_run_shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory shared by every worker of this conformance run (see ``SHARED_DIR_ENV``)."""
    shared = os.environ.get(SHARED_DIR_ENV)
    if shared and Path(shared).is_dir():
        return Path(shared)
    return tmp_path_factory.mktemp("tpbcast-shared")


# --------------------------------------------------------------------------- collection


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
    for via in _staged_via(item) or ():
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
    spec = config.stash[_SPEC_KEY]
    selected = config.stash[_SELECTED_KEY]
    problems: list[str] = []
    cited: set[str] = set()
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        ids, item_problems = _cited(item, spec)
        problems.extend(item_problems)
        item.stash[_CLAUSES_KEY] = ids
        if selected is not None and not set(ids) & set(selected):
            dropped.append(item)
            continue
        cited.update(ids)
        kept.append(item)
        item.user_properties.extend((P_CLAUSE, cid) for cid in ids)
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


# --------------------------------------------------------------------------- verdicts


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Open the test's check log before anything of it runs."""
    if _CLAUSES_KEY in item.stash:
        item.stash[_LOG_KEY] = _checks.begin()


def _staged_via(item: pytest.Item) -> tuple[str, ...] | None:
    """The transports a test stages its fault through, or None: judged on every one."""
    mark = item.get_closest_marker("staged_via")
    return None if mark is None or not mark.args else tuple(str(arg) for arg in mark.args)


@pytest.fixture(autouse=True)
def _tpbcast_transport_profile(request: pytest.FixtureRequest) -> None:
    """Judge a test only on the clauses of the implementation's transport profile.

    Cited clauses of another transport's scope are NOT_APPLICABLE (recorded for
    :func:`clause_checks`); a test citing only such clauses, or staged through another
    transport (``staged_via``), is not run at all.
    """
    item = request.node
    cited: tuple[str, ...] = item.stash.get(_CLAUSES_KEY, ())
    spec = item.config.stash[_SPEC_KEY]
    via = _staged_via(item)
    if not cited or (via is None and all(spec[cid].every_transport for cid in cited)):
        item.stash[_OUTSIDE_KEY] = {}
        return  # judged on every transport: no need to load the implementation here
    impl: Implementation = request.getfixturevalue("tpbcast_impl")
    outside = _outside(spec, cited, impl)
    item.stash[_OUTSIDE_KEY] = outside
    if len(outside) == len(cited):
        raise NotApplicable("NOT_APPLICABLE: " + "; ".join(outside.values()))
    if via is not None and impl.transport not in via:
        raise NotStaged(
            f"not staged: the test stages its fault through {' or '.join(via)} (a rogue peer "
            f"or root, a socket trick), which {impl.name!r} (transport {impl.transport!r}) "
            "does not speak"
        )


def _checks_json(checks: Iterable[_checks.Check]) -> str:
    return json.dumps(
        [
            {
                "clause": c.clause_id,
                "verdict": c.verdict.value,
                "message": c.message,
                "rank": c.rank,
            }
            for c in checks
        ]
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Judge each phase; at teardown attach the test's verdict to the report."""
    report = yield
    if isinstance(item, RegistryCheck) or _CLAUSES_KEY not in item.stash:
        return report
    phases = item.stash.setdefault(_PHASES_KEY, [])
    item.stash[_DURATION_KEY] = item.stash.get(_DURATION_KEY, 0.0) + call.duration
    if call.excinfo is None:
        phases.append(None)
        log = item.stash.get(_LOG_KEY, None)
        failed = [c for c in log.checks if c.verdict.is_failure] if log is not None else []
        if call.when == "call" and failed and report.outcome == "passed":
            # Soft checks failed: pytest must show the test failed, with every message.
            report.outcome = "failed"
            report.longrepr = "\n\n".join(
                f"failed check {i}/{len(failed)}: {c.message}" for i, c in enumerate(failed, 1)
            )
    else:
        phases.append(judge_exception(call.when, call.excinfo.value, call.excinfo.exconly()))
    if call.when == "setup":
        settings = settings_of(item.config)
        report.user_properties.append((P_IMPL_SPEC, str(settings.impl)))
        report.user_properties.append((P_SEED, int(settings.seed)))
        impl = loaded_implementation(item.config)
        if impl is not None:
            report.user_properties.append((P_IMPL, impl.name))
            report.user_properties.append((P_IMPL_VERSION, impl.version))
            report.user_properties.append((P_IMPL_CAPS, ",".join(sorted(impl.capabilities))))
            report.user_properties.append((P_IMPL_TRANSPORT, impl.transport))
    if call.when == "teardown":
        final = judge(phases)
        _checks.end()
        log = item.stash.get(_LOG_KEY, None)
        recorded = log.checks if log is not None else []
        cited: tuple[str, ...] = item.stash[_CLAUSES_KEY]
        outside = item.stash.get(_OUTSIDE_KEY, None)
        if outside is None:  # setup failed before the profile was read: judge it afresh
            outside = _outside_profile(item, cited)
        per_clause = clause_checks(cited, recorded, phases, not_applicable=outside)
        if final.verdict is Verdict.PASS and any(c.verdict.is_failure for c in per_clause):
            # Soft checks failed although no phase raised: the test as a whole failed.
            worst = next(c for c in per_clause if c.verdict.is_failure)
            final = Judgement(worst.verdict, worst.message, worst.rank, worst.clause_id)
        props = report.user_properties
        props.append((P_CHECKS, _checks_json(per_clause)))
        props.append((P_VERDICT, final.verdict.value))
        duration: float = item.stash[_DURATION_KEY]
        props.append((P_DURATION, round(duration, 6)))
        if final.message:
            props.append((P_MESSAGE, final.message))
        if final.failing_rank is not None:
            props.append((P_RANK, final.failing_rank))
    return report


def _outside(spec: Spec, cited: Sequence[str], impl: Implementation) -> dict[str, str]:
    """The cited clauses outside ``impl``'s transport profile, each with why."""
    return {
        cid: f"{cid} has scope {spec[cid].scope}; {impl.name!r} declares transport "
        f"{impl.transport!r}"
        for cid in cited
        if not spec[cid].applies_to(impl.transport)
    }


def _outside_profile(item: pytest.Item, cited: Sequence[str]) -> dict[str, str]:
    """:func:`_outside` for a test whose setup failed before the profile was read (none if
    the implementation never loaded: then every clause's check is the setup ERROR)."""
    impl = loaded_implementation(item.config)
    return {} if impl is None else _outside(item.config.stash[_SPEC_KEY], cited, impl)


def _props(report: pytest.TestReport) -> list[tuple[str, object]]:
    return [
        (str(entry[0]), entry[1])
        for entry in report.user_properties
        if isinstance(entry, tuple | list) and len(entry) == 2
    ]


@dataclass
class _ResultCollector:
    """Controller-side plugin: collects verdicts, writes reports, sets the exit status."""

    config: pytest.Config
    spec: Spec
    chosen: tuple[Clause, ...] | None
    expectations: Expectations | None = None
    checks: list[CheckResult] = field(default_factory=list)
    clauses_by_node: dict[str, tuple[str, ...]] = field(default_factory=dict)
    impl: ImplementationInfo | None = None
    impl_spec: str = ""
    seed: int | None = None
    registry_problems: str | None = None
    started: float = field(default_factory=time.monotonic)
    suite: SuiteResult | None = None
    written: tuple[Path, ...] = ()
    write_error: str | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Turn each finished test's properties into a :class:`CheckResult`."""
        props = _props(report)
        values = dict(props)
        if report.nodeid.endswith(REGISTRY_ITEM):
            if report.when == "call" and report.failed:
                self.registry_problems = report.longreprtext
            return
        clauses = tuple(str(v) for k, v in props if k == P_CLAUSE)
        if clauses:
            self.clauses_by_node[report.nodeid] = clauses
        if P_IMPL_SPEC in values and not self.impl_spec:
            self.impl_spec = str(values[P_IMPL_SPEC])
        if P_SEED in values and self.seed is None:
            self.seed = int(str(values[P_SEED]))
        if P_IMPL in values and self.impl is None:
            caps = str(values.get(P_IMPL_CAPS, ""))
            self.impl = ImplementationInfo(
                spec=self._impl_spec(),
                name=str(values[P_IMPL]),
                version=str(values.get(P_IMPL_VERSION, "")),
                capabilities=frozenset(c for c in caps.split(",") if c),
                transport=str(values.get(P_IMPL_TRANSPORT, DEFAULT_TRANSPORT)),
            )
        if report.when == "teardown" and P_CHECKS in values:
            duration = float(str(values.get(P_DURATION, report.duration)))
            self.checks.extend(
                CheckResult(
                    test_id=report.nodeid,
                    clause_ids=(str(entry["clause"]),),
                    verdict=Verdict(str(entry["verdict"])),
                    duration=duration,
                    failing_rank=None if entry["rank"] is None else int(entry["rank"]),
                    message=str(entry["message"]),
                )
                for entry in json.loads(str(values[P_CHECKS]))
            )
        elif report.when not in ("setup", "call", "teardown") and report.failed:
            # xdist reports a crashed worker's test with when="???": no verdict reached.
            self.checks.append(
                CheckResult(
                    test_id=report.nodeid,
                    clause_ids=self.clauses_by_node.get(report.nodeid, ()),
                    verdict=Verdict.ERROR,
                    duration=report.duration,
                    message=f"the test process crashed: {report.longreprtext[-2000:]}",
                )
            )

    def _impl_spec(self) -> str:
        return self.impl_spec or str(getattr(self.config.option, "tpbcast_impl", None) or "")

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Aggregate per clause, write the reports, set the exit status."""
        if self.registry_problems is not None:
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
            return
        if int(exitstatus) in _KEEP_STATUS or self.config.option.collectonly:
            return
        self.suite = aggregate(
            self.spec,
            self.checks,
            implementation=self.impl or ImplementationInfo(spec=self._impl_spec()),
            clauses=self.chosen,
            duration=time.monotonic() - self.started,
            seed=self.seed,
        )
        if self.expectations is not None:
            self.suite = apply_expectations(self.suite, self.expectations)
        try:
            self.written = _write_reports(self.suite, _report_dir(self.config), self.spec)
        except OSError as exc:
            self.write_error = f"could not write the reports: {exc}"
        session.exitstatus = self.suite.exit_status

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """The per-level verdict counts, MUST failures and where the reports went."""
        tr = terminalreporter
        if self.registry_problems is not None:
            tr.section("tpbcast conformance: registry check failed", red=True)
            tr.write_line(self.registry_problems)
            return
        if self.suite is None:
            return
        tr.section("tpbcast conformance")
        impl = self.suite.implementation
        tr.write_line(f"implementation: {impl.label} (transport {impl.transport})")
        for level, counts in self.suite.counts_by_level().items():
            shown = ", ".join(f"{v.value} {n}" for v, n in counts.items() if n)
            tr.write_line(f"{level:<6} {shown or '-'}")
        tr.write_line(f"judged: {self.suite.judgement_summary()}")
        if self.suite.expectations:
            _write_expectation_lines(tr, self.suite)
        else:
            for failure in self.suite.must_failures:
                tr.write_line(f"MUST {failure.verdict.value}: {_failure_line(failure)}")
        for path in self.written:
            tr.write_line(f"report: {path}")
        if self.write_error:
            tr.write_line(self.write_error, red=True)
        tr.write_line(f"conformance {_status_text(self.suite)}")


def _failure_line(result: ClauseResult) -> str:
    rank = f" (rank {result.failing_rank})" if result.failing_rank is not None else ""
    first = result.message.splitlines()[0] if result.message else ""
    return f"{result.clause.id}{rank}" + (f": {first}" if first else "")


def _write_expectation_lines(tr: Any, suite: SuiteResult) -> None:
    """Known results one line each, then every unexpected one with what was observed."""
    expected, unexpected = suite.expected_results, suite.unexpected
    tr.write_line(
        f"expectations: {suite.expectations}: {len(expected)} as expected, "
        f"{len(unexpected)} unexpected"
    )
    for r in expected:
        tr.write_line(f"{r.clause.level} {r.clause.id}: {r.shown_verdict}")
    for r in unexpected:
        what = "stale expectation" if r.is_stale_expectation else "regression"
        tr.write_line(
            f"UNEXPECTED ({what}) {r.clause.level} {r.shown_verdict}: {_failure_line(r)}",
            red=True,
        )


def _status_text(suite: SuiteResult) -> str:
    if suite.expectations:
        if suite.exit_status:
            return f"FAILED ({len(suite.unexpected)} unexpected result(s))"
        return f"passed ({len(suite.expected_results)} result(s) as expected)"
    return "FAILED (a MUST clause failed)" if suite.exit_status else "passed"


_KEEP_STATUS: Final = frozenset(
    {
        int(pytest.ExitCode.INTERRUPTED),
        int(pytest.ExitCode.INTERNAL_ERROR),
        int(pytest.ExitCode.USAGE_ERROR),
        int(pytest.ExitCode.NO_TESTS_COLLECTED),
    }
)


def _report_dir(config: pytest.Config) -> Path:
    raw = config.getoption("tpbcast_report_dir") or REPORT_DIR_DEFAULT
    path = Path(raw)
    return path if path.is_absolute() else config.invocation_params.dir / path


def _write_reports(suite: SuiteResult, directory: Path, spec: Spec) -> tuple[Path, ...]:
    from . import _report

    files = _report.write_reports(suite, directory, spec=spec)
    return (files.html, files.json, files.markdown)


# --------------------------------------------------------------------------- import


def _tests_dir() -> Path:
    from . import tests

    return Path(tests.__file__).resolve().parent


def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """Collect the installed tests package as a plain directory.

    pytest would import ``tests/__init__.py`` by file path under a name derived from the
    folder layout (``conformance.tests``), which is wrong both in a checkout (the folder
    installs as ``tpbcast.conformance``) and in a wheel (``tpbcast`` is a namespace
    package).  :class:`_TestModule` imports each module by its real dotted name instead.
    """
    if path.resolve() == _tests_dir():
        return pytest.Dir.from_parent(parent, path=path)
    return None


class _TestModule(pytest.Module):
    """A conformance test module, imported as ``tpbcast.conformance.tests.<name>``."""

    def _getobj(self) -> Any:
        relative = self.path.resolve().relative_to(_tests_dir()).with_suffix("")
        dotted = ".".join(("tpbcast", "conformance", "tests", *relative.parts))
        module = importlib.import_module(dotted)
        self.config.pluginmanager.consider_module(module)
        return module


def pytest_pycollect_makemodule(
    module_path: Path, parent: pytest.Collector
) -> pytest.Module | None:
    """Route modules of the tests package through :class:`_TestModule`."""
    resolved = module_path.resolve()
    if resolved.name == "__init__.py" or not resolved.is_relative_to(_tests_dir()):
        return None
    return _TestModule.from_parent(parent, path=module_path)
