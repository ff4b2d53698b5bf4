"""Fixtures for the reference self-tests (``short_dir`` and ``base_path``: tests/conftest.py)."""

from __future__ import annotations

import socket
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


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A non-blocking Unix socket pair: rank 0's end and the peer's."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    for sock in (a, b):
        sock.setblocking(False)
    try:
        yield a, b
    finally:
        a.close()
        b.close()
