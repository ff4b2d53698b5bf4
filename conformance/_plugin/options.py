"""Options, configuration and the run's lifetime: what is set up before collection and
taken down after the run (the registry, the selection, the expectations file, the
implementation loaded once, the directory the run's workers share)."""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tpbcast.conformance._cleanup import CleanupPlugin
from tpbcast.conformance._expectations import Expectations, ExpectationsError, load_expectations
from tpbcast.conformance.spec import Spec, load_spec
from tpbcast.fixtures import settings_of

from .collector import ResultCollector, report_dir
from .selection import select_clauses
from .state import REPORT_DIR_DEFAULT, SELECTED_KEY, SHARED_DIR_ENV, SHARED_KEY, SPEC_KEY

__all__ = [
    "pytest_addoption",
    "pytest_configure",
    "pytest_sessionstart",
    "pytest_unconfigure",
    "tpbcast_run_shared_dir",
]

_RESULTS_PLUGIN = "tpbcast-conformance-results"
_CLEANUP_PLUGIN = "tpbcast-conformance-cleanup"


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
    config.stash[SPEC_KEY] = spec
    try:
        chosen = select_clauses(spec, config.getoption("tpbcast_clauses"))
    except ValueError as exc:
        raise pytest.UsageError(f"--tpbcast-clauses: {exc}") from None
    config.stash[SELECTED_KEY] = None if chosen is None else tuple(c.id for c in chosen)
    # Every process removes what its tests' groups leaked; the controller sums it up.
    cleanup = CleanupPlugin(
        config, controller=not _is_worker(config), report_dir=lambda: report_dir(config)
    )
    config.pluginmanager.register(cleanup, _CLEANUP_PLUGIN)
    if not _is_worker(config):
        expectations = _load_expectations(config, spec)
        collector = ResultCollector(config, spec, chosen, expectations=expectations)
        config.pluginmanager.register(collector, _RESULTS_PLUGIN)
        # Workers are spawned after configure and inherit this: expensive observations
        # (FALLBACK's torch process groups) are made once per run, not once per worker.
        shared = tempfile.mkdtemp(prefix="tpbcast-run-")
        os.environ[SHARED_DIR_ENV] = shared
        config.stash[SHARED_KEY] = shared


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
    shared = config.stash.get(SHARED_KEY, None)
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
