"""pytest plugin of the conformance run: clause markers, registry checks, verdicts, reports.

Loaded only by the conformance run (``-p tpbcast.conformance.plugin``; ``python -m
tpbcast.conformance`` does it for you), never by the project's own self-tests.  This
module assembles the parts in ``conformance/_plugin/``, one job each; in the order pytest
calls them:

1. **Options and configuration** (:mod:`._plugin.options`): registers the ``clause`` and
   ``staged_via`` markers, loads the clause registry and the ``--tpbcast-clauses``
   selection (:mod:`._plugin.selection`, also ``--list``), the ``--tpbcast-expectations``
   file (an unusable one is a usage error naming it), and gives the run one private
   directory shared by all its xdist workers (``tpbcast_run_shared_dir``: an expensive
   observation, FALLBACK's torch process groups, is made once per run), removed at the
   end.  At session start the controller loads the implementation once: one that cannot
   be loaded stops the run with one usage error, not a report of identical ERRORs.
2. **Import routing** (:mod:`._plugin.routing`): the installed tests package is collected
   under its real dotted name (``tpbcast.conformance.tests.<module>``).
3. **Registry check** (:mod:`._plugin.registry`, ``tryfirst``, so before ``-k``/``-m``):
   every test cites known clause ids (and known transports in ``staged_via``), every
   MUST/SHOULD clause in scope is cited by a test.  A violation replaces the run by one
   failing item listing every problem; the run exits with status 4 (usage error).  With a
   selection, tests citing no selected clause are deselected.
4. **Transport gate** (:mod:`._plugin.gate`, an autouse fixture): cited clauses outside
   the implementation's transport profile are NOT_APPLICABLE; a test citing only such
   clauses, or staged through another transport, is not run.
5. **Verdicts** (:mod:`._plugin.verdicts`): a check log per test (``_checks``: the soft
   checks it records, one clause each), each phase judged, and at teardown the verdict
   per clause (rules in :mod:`._verdicts`) put in the report's ``user_properties`` by the
   worker -> controller codec (:mod:`._plugin.codec`), so they cross xdist and land in
   junit.xml.
6. **Results** (:mod:`._plugin.collector`, controller only): aggregates per clause, writes
   the JSON, markdown and HTML reports into ``--tpbcast-report-dir`` and sets the exit
   status: non-zero iff a MUST clause fails (FAIL or ERROR), or, with an expectations
   file, iff a result is unexpected (a FAIL/ERROR it does not list, or a listed verdict
   that turned into PASS).  Interrupted runs and usage errors keep their status.
"""

from __future__ import annotations

from typing import Final

from ._plugin.gate import _tpbcast_transport_profile
from ._plugin.options import (
    pytest_addoption,
    pytest_configure,
    pytest_sessionstart,
    pytest_unconfigure,
    tpbcast_run_shared_dir,
)
from ._plugin.registry import RegistryCheck, pytest_collection_modifyitems
from ._plugin.routing import pytest_collect_directory, pytest_pycollect_makemodule
from ._plugin.selection import list_lines, select_clauses
from ._plugin.state import REGISTRY_ITEM, REPORT_DIR_DEFAULT
from ._plugin.verdicts import pytest_runtest_makereport, pytest_runtest_setup
from ._verdicts import Unsupported, require

# pytest finds hooks and fixtures on this module by name: these are what it finds.
HOOKS_AND_FIXTURES: Final = (
    pytest_addoption,
    pytest_configure,
    pytest_sessionstart,
    pytest_unconfigure,
    tpbcast_run_shared_dir,
    pytest_collect_directory,
    pytest_pycollect_makemodule,
    pytest_collection_modifyitems,
    _tpbcast_transport_profile,
    pytest_runtest_setup,
    pytest_runtest_makereport,
)

__all__ = [
    "REGISTRY_ITEM",
    "REPORT_DIR_DEFAULT",
    "RegistryCheck",
    "Unsupported",
    "list_lines",
    "require",
    "select_clauses",
]
