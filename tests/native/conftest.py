"""Shared fixtures: the library is built once in the parent, before any fork."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
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
def short_dir(native_library: Path) -> Iterator[str]:
    """A private 0700 directory with a short path (sun_path is 107 bytes)."""
    path = tempfile.mkdtemp(prefix="cb-", dir="/tmp")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def base_path(short_dir: str) -> str:
    return os.path.join(short_dir, "g")
