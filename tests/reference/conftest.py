"""Fixtures for the reference self-tests: private short directories, fast configs."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator

import pytest


@pytest.fixture
def short_dir() -> Iterator[str]:
    """A private 0700 directory with a short path (sun_path is 107 bytes)."""
    path = tempfile.mkdtemp(prefix="tb-", dir="/tmp")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def base_path(short_dir: str) -> str:
    return os.path.join(short_dir, "g")


@pytest.fixture(autouse=True)
def _no_torch_in_the_forking_parent() -> Iterator[None]:
    """DESIGN.md: torch runs only in forked ranks, never in the pytest process."""
    had_torch = "torch" in sys.modules
    yield
    if not had_torch:
        assert "torch" not in sys.modules, "this test imported torch in the pytest parent"
