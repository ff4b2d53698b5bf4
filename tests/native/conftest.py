"""Shared fixtures: the library is built once in the parent, before any fork."""

from __future__ import annotations

from pathlib import Path

import pytest

from tpbcast.conformance.adapters.native import library_path
from tpbcast.conformance.adapters.native._lib import load


@pytest.fixture(scope="session")
def native_library() -> Path:
    """Build (or reuse) libcbcast in this worker; a missing compiler fails loudly."""
    path = library_path()
    load()  # dlopen in the parent so forked ranks inherit the mapping
    return path


@pytest.fixture
def short_dir(short_dir: str, native_library: Path) -> str:
    """tests/conftest.py's ``short_dir``, with libcbcast built and loaded in this (parent)
    process first, so the ranks forked by a test that takes a socket path inherit it."""
    return short_dir
