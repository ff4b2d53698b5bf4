"""Fixtures for the reference self-tests (``short_dir`` and ``base_path``: tests/conftest.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _no_torch_in_the_forking_parent() -> Iterator[None]:
    """DESIGN.md: torch runs only in forked ranks, never in the pytest process."""
    had_torch = "torch" in sys.modules
    yield
    if not had_torch:
        assert "torch" not in sys.modules, "this test imported torch in the pytest parent"
