"""What the plugin's hooks hand one another: stash keys on the config and on each item.

Kept in one module so each part of the plugin reads the keys the others wrote without
importing those parts.
"""

from __future__ import annotations

from typing import Final

import pytest

from tpbcast.conformance import _checks
from tpbcast.conformance._verdicts import Judgement
from tpbcast.conformance.spec import Spec

__all__ = [
    "CLAUSES_KEY",
    "DURATION_KEY",
    "LOG_KEY",
    "OUTSIDE_KEY",
    "PHASES_KEY",
    "REGISTRY_ITEM",
    "REPORT_DIR_DEFAULT",
    "SELECTED_KEY",
    "SHARED_DIR_ENV",
    "SHARED_KEY",
    "SPEC_KEY",
]

REPORT_DIR_DEFAULT: Final = "reports/conformance"
SHARED_DIR_ENV: Final = "TPBCAST_CONFORMANCE_SHARED_DIR"
"""A private directory of one run, shared by its xdist workers (they inherit the env)."""
REGISTRY_ITEM: Final = "tpbcast-clause-registry"

# On the config: the registry, the clause selection (None: all), the run's shared dir.
SPEC_KEY: Final = pytest.StashKey[Spec]()
SELECTED_KEY: Final = pytest.StashKey[tuple[str, ...] | None]()
SHARED_KEY: Final = pytest.StashKey[str]()
# On each item: the clauses it cites, its check log, its phases' judgements and time, and
# the cited clauses outside the implementation's transport profile (with why).
CLAUSES_KEY: Final = pytest.StashKey[tuple[str, ...]]()
LOG_KEY: Final = pytest.StashKey[_checks.CheckLog]()
PHASES_KEY: Final = pytest.StashKey[list[Judgement | None]]()
DURATION_KEY: Final = pytest.StashKey[float]()
OUTSIDE_KEY: Final = pytest.StashKey[dict[str, str]]()
