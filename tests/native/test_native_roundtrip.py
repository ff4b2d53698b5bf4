"""Correct bytes in TP 2/4, every buffer type, reset and re-init."""

from __future__ import annotations

import hashlib
import os
import socket

import pytest

from tpbcast.conformance.adapters.native import (
    NativeBrokenError,
    NativeConfigurationError,
    NativeNotInitializedError,
    NativeReinitMismatchError,
    make,
)
from tpbcast.harness import run_ranks

from . import _ranks


def _roundtrip(ctx, base_path, seed):
    return _ranks.roundtrip_rank(ctx.rank, ctx.world_size, base_path, seed)


@pytest.mark.parametrize("world", [2, 4])
def test_random_payloads_arrive_intact(world, base_path):
    seed = int.from_bytes(os.urandom(4), "little")
    got = run_ranks(_roundtrip, world, args=(base_path, seed), **_ranks.RUN).values()
    want = _ranks.expected_digests(seed)
    for rank, digests in enumerate(got):
        assert digests == want, f"rank {rank} got other bytes (seed {seed})"
    assert os.listdir(os.path.dirname(base_path)) == [], "socket file left after reset"


def test_buffer_types_and_several_buffers(base_path):
    np = pytest.importorskip("numpy")
    data = [_ranks.payload(7, n) for n in (3, 4096, 10)]

    def root(ctx):
        b = _ranks.native()
        b.initialize(0, 2, base_path)
        b.broadcast(data[0])  # read-only bytes on the root: copied
        b.broadcast(np.frombuffer(data[1], dtype=np.uint8).reshape(64, 64).copy())
        b.broadcast([bytearray(data[2]), memoryview(bytearray(data[0]))])
        b.reset()
        return True

    def peer(ctx):
        b = _ranks.native()
        b.initialize(1, 2, base_path)
        first = bytearray(3)
        b.broadcast(memoryview(first))
        second = np.zeros((64, 16), dtype=np.int32)  # 4096 bytes as int32
        b.broadcast(second)
        third, fourth = bytearray(10), bytearray(3)
        b.broadcast([third, fourth])
        try:
            b.broadcast(b"\0\0\0")
        except TypeError as exc:
            readonly = str(exc)
        b.reset()
        return bytes(first), second.tobytes(), bytes(third), bytes(fourth), readonly

    _, (first, second, third, fourth, readonly) = run_ranks(
        {0: root, 1: peer}, **_ranks.RUN
    ).values()
    assert (first, second, third, fourth) == (data[0], data[1], data[2], data[0])
    assert "writable buffer" in readonly


def test_check_order_and_no_ops_at_world_one(base_path):
    def body(ctx):
        b = make()
        seen = []
        for call in (
            lambda: b.broadcast(bytearray(4)),
            lambda: (b.initialize(0, 1, base_path), b.broadcast(bytearray(4), root=1)),
            lambda: b.initialize(0, 2, base_path),
        ):
            try:
                call()
                seen.append("ok")
            except Exception as exc:
                seen.append((type(exc).__name__, str(exc)))
        b.broadcast(bytearray(4))  # world 1: no-op
        b.initialize(0, 1, base_path)  # identical re-init: no-op, also at world 1
        return seen, b.is_initialized()

    [(seen, initialized)] = run_ranks(body, 1, **_ranks.RUN).values()
    assert seen[0][0] == NativeNotInitializedError.__name__
    assert "before initialize" in seen[0][1]
    assert seen[1][0] == NativeConfigurationError.__name__ and "root=1" in seen[1][1]
    assert seen[2][0] == NativeReinitMismatchError.__name__
    assert "world_size=1" in seen[2][1] and "world_size=2" in seen[2][1]
    assert initialized


@pytest.mark.parametrize(
    ("rank", "world", "base", "needle"),
    [
        (0, 0, "g", "world_size must be"),
        (2, 2, "g", "rank must be"),
        (-1, 2, "g", "rank must be"),
        (0, 2, "", "base_path is empty"),
        (0, 2, "/tmp/" + "x" * 100, "limit 107"),
    ],
)
def test_bad_arguments_are_configuration_errors(rank, world, base, needle, native_library):
    def body(ctx):
        b = make()
        try:
            b.initialize(rank, world, base)
        except NativeConfigurationError as exc:
            return str(exc), isinstance(exc, ValueError), b.is_initialized()
        return None

    [result] = run_ranks(body, 1, **_ranks.RUN).values()
    assert result is not None, "initialize accepted bad arguments"
    message, is_value_error, initialized = result
    assert needle in message and is_value_error and not initialized


def test_reset_then_reinit_same_and_new_path(base_path):
    other = base_path + "2"
    data = _ranks.payload(3, 999)

    def root(ctx):
        b = _ranks.native()
        fds_before = _ranks.open_fds()
        gens = [b.generation]
        for step, path in enumerate((base_path, base_path, other)):
            b.initialize(0, 2, path)
            b.broadcast(bytearray(data))
            ctx.wait(f"peer_reset{step}")
            b.reset()
            b.reset()  # idempotent
            gens.append(b.generation)
            exists = os.path.exists(path + "_0.sock")
            ctx.notify(f"root_reset{step}")
            assert not exists, "socket file survived reset"
        return gens, _ranks.open_fds() - fds_before, b.is_initialized()

    def peer(ctx):
        b = _ranks.native()
        got = []
        for step, path in enumerate((base_path, base_path, other)):
            b.initialize(1, 2, path)
            buf = bytearray(len(data))
            b.broadcast(buf)
            got.append(hashlib.sha256(buf).hexdigest())
            b.reset()
            ctx.notify(f"peer_reset{step}")
            ctx.wait(f"root_reset{step}")  # never reconnect to the old listener
        return got

    (gens, leaked, initialized), got = run_ranks({0: root, 1: peer}, **_ranks.RUN).values()
    assert got == [hashlib.sha256(data).hexdigest()] * 3
    # +1 per reset() call, even an idempotent one on an uninitialized broadcaster
    assert gens == [gens[0] + 2 * i for i in range(4)], gens
    assert not leaked, f"fds leaked across init/reset: {leaked}"
    assert not initialized


def test_a_stale_socket_is_replaced(base_path):
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(base_path + "_0.sock")
    stale.close()  # a dead rank 0 left its socket file behind
    assert os.path.exists(base_path + "_0.sock")
    seed = 11
    got = run_ranks(_roundtrip, 2, args=(base_path, seed), **_ranks.RUN).values()
    assert got == [_ranks.expected_digests(seed)] * 2


def test_socket_is_private_and_failed_broadcast_breaks_until_reset(base_path):

    def root(ctx):
        b = _ranks.native()
        b.initialize(0, 2, base_path)
        mode = os.stat(base_path + "_0.sock").st_mode & 0o777
        _ranks.wait_until_a_rank_ends(ctx, "peer_gone")
        errors = []
        for _ in range(2):
            try:
                b.broadcast(bytearray(1 << 20))
            except Exception as exc:
                errors.append(type(exc).__name__)
        b.reset()
        b.initialize(0, 1, base_path)  # usable again after reset
        return mode, errors

    def peer(ctx):
        b = _ranks.native()
        b.initialize(1, 2, base_path)
        return True  # exits: closes its end of the link

    (mode, errors), _ = run_ranks({0: root, 1: peer}, **_ranks.RUN).values()
    assert mode == 0o600
    assert errors == ["NativePeerClosedError", NativeBrokenError.__name__]


def test_python_side_argument_checks(base_path):
    np = pytest.importorskip("numpy")

    def body(ctx):
        b = make()
        seen = []
        for call in (
            lambda: b.initialize(2**40, 2, base_path),
            lambda: b.initialize(0, 2, base_path + "\0tail"),
            lambda: b.set_deadlines(io=-1.0),
            lambda: b.set_deadlines(init=float("nan")),
            lambda: b.broadcast(np.zeros((4, 4), dtype=np.uint8)[:, ::2]),
        ):
            try:
                call()
                seen.append("accepted")
            except ValueError as exc:
                seen.append(str(exc))
        return seen, b.is_initialized()

    [(seen, initialized)] = run_ranks(body, 1, **_ranks.RUN).values()
    assert "rank must fit a C int" in seen[0]
    assert "NUL" in seen[1]
    assert "io must be >= 0" in seen[2] and "init must be >= 0" in seen[3]
    assert "C-contiguous" in seen[4]
    assert not initialized


def test_two_groups_share_a_directory_and_identical_reinit_is_a_no_op(base_path):
    other = base_path + "-b"
    seeds = {base_path: 21, other: 22}

    def rank(ctx):
        r, path = ctx.rank % 2, (base_path, other)[ctx.rank // 2]
        b = _ranks.native()
        b.initialize(r, 2, path)
        fds = _ranks.open_fds()
        b.initialize(r, 2, path)  # identical: no new socket, no new handshake
        same = _ranks.open_fds() == fds
        digests = []
        for size in _ranks.SIZES:
            buf = bytearray(_ranks.payload(seeds[path], size) if r == 0 else size)
            b.broadcast(buf)
            digests.append(hashlib.sha256(buf).hexdigest())
        b.reset()
        return same, digests

    got = run_ranks(rank, 4, **_ranks.RUN).values()
    assert [same for same, _ in got] == [True] * 4
    assert [d for _, d in got[:2]] == [_ranks.expected_digests(seeds[base_path])] * 2
    assert [d for _, d in got[2:]] == [_ranks.expected_digests(seeds[other])] * 2
