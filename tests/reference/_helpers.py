"""Helpers shared by the reference self-tests: fast configs and a raw wire-v1 speaker.

The raw functions here speak the bytes of wire protocol v1 with plain stdlib
sockets -- deliberately NOT through tpbcast.reference_impl -- so that a mixed
group (reference rank + raw rank) checks the protocol, not our class against
itself.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import random
import select
import socket
import struct
import time

import pytest

from tpbcast.reference_impl import BroadcasterConfig

RAW_PROBE = b"\x5a"


def have(module: str) -> bool:
    """Whether ``module`` is installed, WITHOUT importing it in this (forking) process.

    ``pytest.importorskip("torch")`` would import torch in the pytest parent;
    the ranks import it themselves after the fork (DESIGN.md: never let torch's
    thread pools exist in a process that forks ranks).
    """
    return importlib.util.find_spec(module) is not None


needs_numpy = pytest.mark.skipif(not have("numpy"), reason="numpy is not installed")
needs_torch = pytest.mark.skipif(not have("torch"), reason="torch is not installed")


def fast_config(**changes: object) -> BroadcasterConfig:
    """Short deadlines so that a hang fails in seconds, not minutes."""
    base: dict[str, object] = {
        "connect_timeout": 10.0,
        "connect_retry_interval": 0.01,
        "init_timeout": 10.0,
        "io_timeout": 10.0,
    }
    base.update(changes)
    return BroadcasterConfig(**base)  # type: ignore[arg-type]


def payload(seed: int, size: int) -> bytes:
    """Deterministic random bytes: every rank can compute what rank 0 sends."""
    return random.Random(seed).randbytes(size)


def list_fds() -> set[int]:
    """Open fds of this process (the listing's own fd excluded)."""
    fds = {int(x) for x in os.listdir("/proc/self/fd")}
    return {fd for fd in fds if os.path.exists(f"/proc/self/fd/{fd}")}


def raw_connect(address: str | bytes, timeout: float = 10.0) -> socket.socket:
    """Connect a blocking AF_UNIX stream socket, retrying until rank 0 listens."""
    deadline = time.monotonic() + timeout
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            if exc.errno not in (errno.ENOENT, errno.ECONNREFUSED, errno.EAGAIN):
                raise
            if time.monotonic() > deadline:
                raise
            select.select([], [], [], 0.01)  # retry interval, as a peer does


def raw_listen(address: str | bytes, backlog: int) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10.0)
    sock.bind(address)
    sock.listen(backlog)
    return sock


def raw_accept(listener: socket.socket) -> socket.socket:
    """Accept one connection; it gets the listener's deadline too.

    ``socket.accept`` hands back a BLOCKING socket without a timeout (the
    listener's timeout is not inherited), so every later recv would wait forever.
    """
    conn, _ = listener.accept()
    conn.settimeout(listener.gettimeout())
    return conn


def raw_recv_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(min(n - len(out), 1 << 20))
        if not chunk:
            raise EOFError(f"EOF after {len(out)}/{n} bytes")
        out += chunk
    return bytes(out)


def raw_expect_eof(sock: socket.socket) -> None:
    """The stream must end here: no trailing bytes (no header, no footer)."""
    extra = sock.recv(16)
    assert extra == b"", f"unexpected trailing bytes {extra!r}"


def pack_rank(rank: int) -> bytes:
    return struct.pack("=i", rank)
