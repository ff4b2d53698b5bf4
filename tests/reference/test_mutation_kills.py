"""Behaviour the reference's other self-tests left unchecked, found by mutation testing.

Each test here pins a behaviour that a mutmut mutant of ``tpbcast.reference_impl``
changed without any other self-test noticing (``nox -s mutation``; the mutants are
listed in reports/mutation/).  They check what a user or an operator sees -- an error
that names the setting to change, a field of an error, a deadline -- never the source
text.  Most run in the pytest process (a wire-v1 peer or rank 0 is a thread using
tpbcast.harness.wire); a few fork ranks through tpbcast.harness.run_ranks; those that
need torch are in tests/dispatch/test_mutation_kills_torch.py.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import math
import os
import select
import signal
import socket
import stat
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tpbcast.harness import RankContext, run_ranks, wire
from tpbcast.reference_impl import (
    BroadcasterConfig,
    BroadcastError,
    BroadcastTimeoutError,
    BrokenBroadcasterError,
    ConfigurationError,
    CpuTpBroadcaster,
    HandshakeError,
    NotInitializedError,
    PeerClosedError,
    ReinitMismatchError,
    SecurityError,
    TorchDistributedEngine,
    bootstrap,
    make_base_path,
)
from tpbcast.reference_impl import _bootstrap as bootstrap_module
from tpbcast.reference_impl import _broadcaster as broadcaster_module
from tpbcast.reference_impl import _paths as paths_module
from tpbcast.reference_impl._dispatch_bootstrap import _check_deadline_budget
from tpbcast.reference_impl._errors import errno_name
from tpbcast.reference_impl._paths import ensure_private_dir, prepare_socket_path
from tpbcast.reference_impl.conformance_adapter import make

from ._helpers import in_thread, needs_torch, when_broadcasting

# A base path whose socket path (<base>_0.sock) is 108 bytes: one over sun_path.
_TOO_LONG = "/tmp/" + "p" * (107 - len("/tmp/") - len("_0.sock") + 1)


def test_a_too_long_socket_path_tells_how_to_fix_it() -> None:
    """The error names the knob an operator turns (the env var, spelled as it is)."""
    with pytest.raises(ConfigurationError) as info:
        CpuTpBroadcaster().initialize(0, 2, _TOO_LONG)
    path = _TOO_LONG + "_0.sock"
    assert str(info.value) == (
        "socket path is 108 bytes, the limit is 107 (sun_path); use a shorter base path or "
        f"set TPBCAST_SOCKET_DIR to a short directory [path {path}]"
    )
    assert info.value.path == path


# -- BroadcasterConfig -----------------------------------------------------------------


def test_a_non_number_deadline_is_refused_naming_the_setting_the_value_and_its_type() -> None:
    with pytest.raises(ConfigurationError) as info:
        BroadcasterConfig(init_timeout="5")  # type: ignore[arg-type]
    assert str(info.value) == "init_timeout must be a number of seconds, got '5' (type=str)"


@pytest.mark.parametrize(
    "setting", ["connect_timeout", "connect_retry_interval", "init_timeout", "io_timeout"]
)
def test_every_deadline_setting_is_checked_under_its_own_name(setting: str) -> None:
    with pytest.raises(ConfigurationError, match=f"^{setting} must be a finite number > 0, got 0"):
        BroadcasterConfig(**{setting: 0})  # type: ignore[arg-type]


@pytest.mark.parametrize("uid", [True, "1000", -1, 1.0])
def test_allowed_uids_hold_only_non_negative_ints(uid: object) -> None:
    with pytest.raises(ConfigurationError, match=f"allowed_uids must hold uids >= 0, got {uid!r}"):
        BroadcasterConfig(allowed_uids=(uid,))  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -1.0, math.inf, math.nan])
def test_only_io_timeout_suggests_none_for_waiting_forever(bad: float) -> None:
    """connect/init deadlines cannot be None (always bounded); the io one can, and says so."""
    with pytest.raises(ConfigurationError) as io:
        BroadcasterConfig(io_timeout=bad)
    assert (
        str(io.value)
        == f"io_timeout must be a finite number > 0, got {bad!r}; use None to wait forever"
    )
    with pytest.raises(ConfigurationError) as connect:
        BroadcasterConfig(connect_timeout=bad)
    assert str(connect.value) == f"connect_timeout must be a finite number > 0, got {bad!r}"


@pytest.mark.parametrize("flag", ["require_same_uid", "abstract_namespace", "verify_socket_dir"])
def test_switches_take_only_bools(flag: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        BroadcasterConfig(**{flag: 1})  # type: ignore[arg-type]
    assert str(info.value) == f"{flag} must be a bool, got 1"


def test_allowed_uids_alone_replace_the_same_uid_rule() -> None:
    config = BroadcasterConfig(require_same_uid=False, allowed_uids=(4242, 7))
    assert config.accepted_uids(own_uid=1000) == frozenset({4242, 7})
    assert BroadcasterConfig(allowed_uids=(7,)).accepted_uids(1000) == frozenset({1000, 7})
    assert BroadcasterConfig(require_same_uid=False).accepted_uids(1000) is None


# -- make_base_path and the socket path policy ------------------------------------------


def test_make_base_path_defaults_to_tmp_without_tmpdir() -> None:
    base = make_base_path(session_id="s", environ={})
    assert base == f"/tmp/tpbcast_{os.geteuid()}/tp_s_dp0"


def test_make_base_path_reads_the_process_environment_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TPBCAST_SESSION_ID", "envsession")
    monkeypatch.setenv("TPBCAST_SOCKET_DIR", "/tmp/envdir")
    assert make_base_path(1) == "/tmp/envdir/tp_envsession_dp1"


def test_a_long_session_id_keeps_a_prefix_and_a_digest_of_the_whole() -> None:
    session = "s" * 40
    digest = hashlib.sha256(session.encode()).hexdigest()[:12]
    assert make_base_path(session_id=session, base_dir="/b") == f"/b/tp_{'s' * 11}_{digest}_dp0"


def test_make_base_path_errors_say_what_to_change() -> None:
    with pytest.raises(ConfigurationError) as bad_rank:
        make_base_path(-1)
    assert str(bad_rank.value) == "dp_rank must be an int >= 0, got -1"
    with pytest.raises(ConfigurationError) as too_long:
        make_base_path(session_id="s", base_dir="/tmp/" + "d" * 100)
    assert "; set TPBCAST_SOCKET_DIR (or base_dir) to a shorter directory [path" in str(
        too_long.value
    )


def test_a_bound_but_not_listening_socket_is_stale_and_replaced(short_dir: str) -> None:
    path = os.path.join(short_dir, "g_0.sock")
    leftover = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        leftover.bind(path)  # bound, never listening: nobody can connect to it
        prepare_socket_path(path)
        assert not os.path.lexists(path)
    finally:
        leftover.close()


@contextlib.contextmanager
def _cwd(path: str) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def test_a_listener_bound_by_a_relative_name_with_dotdot_is_live(short_dir: str) -> None:
    """/proc/net/unix shows the name as bound ("../g_0.sock"); it still owns our path."""
    sub = os.path.join(short_dir, "sub")
    os.mkdir(sub)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with _cwd(sub):
            listener.bind("../g_0.sock")
        listener.listen(1)
        with pytest.raises(SecurityError) as info:
            prepare_socket_path(os.path.join(short_dir, "g_0.sock"))
    finally:
        listener.close()
    assert str(info.value).startswith(
        "another process is listening on this socket path (a second group with the same "
        "base path?); refusing to take it over. Give each group its own session id "
        "(TPBCAST_SESSION_ID or make_base_path(session_id=...)). (EADDRINUSE) [path "
    )


def test_what_sits_at_the_socket_path_is_named(short_dir: str) -> None:
    directory = os.path.join(short_dir, "d_0.sock")
    os.mkdir(directory)
    with pytest.raises(SecurityError, match=r"^a directory is at the socket path; refusing"):
        prepare_socket_path(directory)
    fifo = os.path.join(short_dir, "f_0.sock")
    os.mkfifo(fifo)
    with pytest.raises(SecurityError, match=r"^a special file is at the socket path; refusing"):
        prepare_socket_path(fifo)


# -- rank 0's bootstrap, in this process (peers are threads speaking wire v1) ----------


def _root_error(base: str, world_size: int, init_timeout: float) -> BaseException:
    """Initialize rank 0 (which must fail); return its error, every fd closed again."""
    bcast = CpuTpBroadcaster(BroadcasterConfig(init_timeout=init_timeout))
    try:
        with pytest.raises(Exception) as info:
            bcast.initialize(0, world_size, base)
    finally:
        bcast.reset()
    return info.value


def test_a_rank_that_never_connects_is_named_when_the_init_deadline_passes(
    base_path: str,
) -> None:
    err = _root_error(base_path, 3, init_timeout=0.2)
    assert isinstance(err, BroadcastTimeoutError)
    assert (err.rank, err.phase, err.errno_name) == (0, "accept", "ETIMEDOUT")
    assert err.path == base_path + "_0.sock"
    assert "deadline of 0.2 s passed with 0/2 peers connected; missing rank(s) [1, 2]" in str(err)


def test_a_half_announced_rank_at_the_deadline_is_blamed_with_its_bytes(base_path: str) -> None:
    done = threading.Event()

    def half_peer() -> None:
        sock = wire.connect(base_path + "_0.sock", wire.Deadline.after(5.0))
        with sock:
            wire.send_all(sock, wire.pack_rank(1)[:2], wire.Deadline.after(5.0))
            done.wait(10.0)

    thread = in_thread(half_peer)
    try:
        err = _root_error(base_path, 2, init_timeout=0.5)
    finally:
        done.set()
        thread.join(10.0)
    assert isinstance(err, BroadcastTimeoutError)
    assert (err.bytes_done, err.bytes_total, err.errno_name) == (2, 4, "ETIMEDOUT")
    assert err.reason == "deadline of 0.5 s passed (no data from peer)"
    assert (err.rank, err.phase, err.path) == (0, "handshake", base_path + "_0.sock")
    assert f"read from connection 1 (pid {os.getpid()}) failed" in str(err)


def test_a_joined_peer_that_hangs_up_early_is_named_with_rank_0s_path(base_path: str) -> None:
    def quitter() -> None:
        sock = wire.connect(base_path + "_0.sock", wire.Deadline.after(5.0))
        with sock:
            wire.send_all(sock, wire.pack_rank(1), wire.Deadline.after(5.0))

    thread = in_thread(quitter)
    try:
        err = _root_error(base_path, 3, init_timeout=10.0)
    finally:
        thread.join(10.0)
    assert isinstance(err, PeerClosedError)
    assert (err.rank, err.peer, err.phase) == (0, 1, "accept")
    assert err.path == base_path + "_0.sock"
    assert (
        f": peer 1 (pid {os.getpid()}) closed the connection while rank 0 waited for the "
        f"other peers [path {base_path}_0.sock]"
    ) in str(err)


# -- the process-wide instance -----------------------------------------------------------


def test_the_first_instance_call_creates_the_broadcaster() -> None:
    saved = broadcaster_module._Singleton.value
    broadcaster_module._Singleton.value = None
    try:
        first = broadcaster_module.instance()
        assert isinstance(first, CpuTpBroadcaster)
        assert broadcaster_module.instance() is first
    finally:
        broadcaster_module._Singleton.value = saved


# -- errors ----------------------------------------------------------------------------


def test_errno_names() -> None:
    assert errno_name(errno.EPIPE) == "EPIPE"
    assert errno_name(None) is None
    assert errno_name(99999) == "errno 99999"  # unknown to this libc: still shown


def test_an_object_array_is_refused_with_the_reason(base_path: str) -> None:
    numpy = pytest.importorskip("numpy")
    bcast = CpuTpBroadcaster()
    bcast.initialize(0, 1, base_path)
    try:
        with pytest.raises(ConfigurationError) as info:
            bcast.broadcast(numpy.array([object()], dtype=object))
    finally:
        bcast.reset()
    assert str(info.value) == (
        "buffer 0 is a numpy array of dtype object; it holds Python object pointers, which "
        "mean nothing in another process"
    )


def test_broadcast_refusals_name_the_rank_and_the_phase(base_path: str) -> None:
    bcast = CpuTpBroadcaster()
    with pytest.raises(NotInitializedError) as early:
        bcast.broadcast(bytearray(1))
    assert str(early.value) == (
        "in phase 'broadcast': broadcast called before initialize (or after reset)"
    )
    bcast.initialize(0, 1, base_path)
    try:
        with pytest.raises(ConfigurationError) as bad_root:
            bcast.broadcast(bytearray(1), root=1)
    finally:
        bcast.reset()
    assert (bad_root.value.rank, bad_root.value.phase) == (0, "broadcast")
    assert str(bad_root.value) == (
        "rank 0: in phase 'broadcast': root must be 0 (star topology: only rank 0 sends), got 1"
    )


# -- a peer's bootstrap against rank 0 stand-ins ----------------------------------------


def test_a_peer_that_finds_no_rank_0_says_what_it_tried(base_path: str) -> None:
    config = BroadcasterConfig(connect_timeout=0.2, connect_retry_interval=0.01)
    with pytest.raises(BroadcastTimeoutError) as info:
        CpuTpBroadcaster(config).initialize(1, 2, base_path)
    err = info.value
    assert (err.rank, err.peer, err.phase, err.errno_name) == (1, 0, "connect", "ENOENT")
    assert str(err).startswith("rank 1: connect to rank 0 failed in phase 'connect' after ")
    assert err.path == base_path + "_0.sock"


def test_a_peer_fails_at_once_on_a_connect_error_that_waiting_cannot_fix(base_path: str) -> None:
    """A datagram socket at the path: EPROTOTYPE is not retried (not ENOENT/ECONNREFUSED)."""
    squatter = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    squatter.bind(base_path + "_0.sock")
    try:
        with pytest.raises(BroadcastError) as info:
            CpuTpBroadcaster(BroadcasterConfig(connect_timeout=30.0)).initialize(1, 2, base_path)
    finally:
        squatter.close()
    err = info.value
    assert type(err) is BroadcastError
    assert (err.rank, err.phase, err.errno_name) == (1, "connect", "EPROTOTYPE")
    assert f"connect failed: {os.strerror(errno.EPROTOTYPE)}" in str(err)
    assert err.elapsed is not None and err.elapsed < 10.0  # not the 30 s connect budget


def test_a_peer_refuses_a_listener_of_a_foreign_uid(base_path: str) -> None:
    """Only the uids the config allows may listen on rank 0's socket (here: not ours)."""
    other = os.geteuid() + 4242
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(base_path + "_0.sock")
    listener.listen(1)  # the connection completes in the backlog: no accept needed
    config = BroadcasterConfig(require_same_uid=False, allowed_uids=(other,), init_timeout=2.0)
    try:
        with pytest.raises(SecurityError) as info:
            CpuTpBroadcaster(config).initialize(1, 2, base_path)
    finally:
        listener.close()
    err = info.value
    assert (err.rank, err.peer, err.phase, err.action) == (1, 0, "connect", "connect to rank 0")
    assert err.path == base_path + "_0.sock"
    assert (
        f"the process listening on rank 0's socket (pid {os.getpid()} uid {os.geteuid()}) "
        f"is not an allowed uid ({other}); refusing to join"
    ) in str(err)


# -- a group of two in this process (rank 0 initializes in a thread) --------------------


@contextlib.contextmanager
def _pair(base: str, io_timeout: float) -> Iterator[tuple[CpuTpBroadcaster, CpuTpBroadcaster]]:
    config = BroadcasterConfig(connect_timeout=10.0, init_timeout=10.0, io_timeout=io_timeout)
    root, peer = CpuTpBroadcaster(config), CpuTpBroadcaster(config)
    failed: list[BaseException] = []

    def init_root() -> None:
        try:
            root.initialize(0, 2, base)
        except BaseException as exc:  # reported below, in the test's thread
            failed.append(exc)

    thread = in_thread(init_root)
    try:
        peer.initialize(1, 2, base)
        thread.join(15.0)
        assert not failed and root.is_initialized(), failed
        yield root, peer
    finally:
        peer.reset()
        thread.join(15.0)
        root.reset()


def test_a_multi_buffer_receive_deadline_counts_the_whole_transfer(base_path: str) -> None:
    with (
        _pair(base_path, io_timeout=0.3) as (_root, peer),  # rank 0 never sends
        pytest.raises(BroadcastTimeoutError) as info,
    ):
        peer.broadcast([bytearray(3), bytearray(5)])
    err = info.value
    assert (err.rank, err.peer, err.phase, err.errno_name) == (1, 0, "broadcast", "ETIMEDOUT")
    assert (err.bytes_done, err.bytes_total) == (0, 8)
    assert ": deadline of 0.3 s passed (no data from peer) (ETIMEDOUT)" in str(err)


@pytest.mark.parametrize("side", ["root", "peer"])
def test_reset_from_another_thread_stops_a_multi_buffer_transfer(base_path: str, side: str) -> None:
    """The list-of-buffers path honours the abort pipe too (reset returns promptly)."""
    with _pair(base_path, io_timeout=30.0) as (root, peer):
        me = root if side == "root" else peer
        # rank 0 writes more than the socket holds to a peer that never reads; the peer
        # waits for bytes rank 0 never sends
        buffers = [bytearray(4 << 20), bytearray(4 << 20)]
        caught: list[BaseException] = []

        def transfer() -> None:
            try:
                me.broadcast(buffers)
            except BaseException as exc:
                caught.append(exc)

        thread = in_thread(transfer)
        when_broadcasting(me)
        started = time.monotonic()
        me.reset()
        took = time.monotonic() - started
        thread.join(15.0)
    assert not thread.is_alive() and took < 5.0
    (err,) = caught
    assert type(err) is BroadcastError and err.errno_name == "ECANCELED"


def test_a_long_failure_reason_is_kept_to_300_characters(base_path: str) -> None:
    """The broken state quotes the failure, cut at 300 characters (+ "...")."""

    class _LongStopError(Exception):
        pass

    def stop(signum: int, frame: object) -> None:
        raise _LongStopError("x" * 400)

    main = threading.get_ident()
    bcast = CpuTpBroadcaster(BroadcasterConfig(init_timeout=10.0, io_timeout=30.0))

    def reader() -> None:  # a wire-v1 peer that reads one payload byte, then stops rank 0
        sock = wire.connect(base_path + "_0.sock", wire.Deadline.after(10.0))
        with sock:
            wire.send_all(sock, wire.pack_rank(1), wire.Deadline.after(10.0))
            wire.recv_exact(sock, 2, wire.Deadline.after(10.0))  # probe + first byte
            signal.pthread_kill(main, signal.SIGUSR1)

    old = signal.signal(signal.SIGUSR1, stop)
    try:
        thread = in_thread(reader)
        bcast.initialize(0, 2, base_path)
        with pytest.raises(_LongStopError):
            bcast.broadcast(bytearray(16 << 20))  # blocks: the reader stops reading
        with pytest.raises(BrokenBroadcasterError) as info:
            bcast.broadcast(bytearray(1))
        thread.join(10.0)
    finally:
        signal.signal(signal.SIGUSR1, old)
        bcast.reset()
    assert f"({'x' * 300}...)" in str(info.value)
    assert (info.value.rank, info.value.phase) == (0, "broadcast")
    assert repr(bcast).startswith("<CpuTpBroadcaster uninitialized rank=None")  # after reset


# -- torch tensors (in forked ranks only: never torch in the pytest process) --------------


def test_writing_to_a_peer_that_left_names_the_errno(base_path: str) -> None:
    with _pair(base_path, io_timeout=10.0) as (root, peer):
        peer.reset()  # its end of the link closes
        with pytest.raises(PeerClosedError) as info:
            for _ in range(8):  # the first write may still fit the socket buffer
                root.broadcast(bytearray(1 << 20))
    err = info.value
    assert err.errno_name in {"EPIPE", "ECONNRESET"}
    assert (err.rank, err.peer, err.phase) == (0, 1, "broadcast")
    assert ": peer closed the connection (E" in str(err)


@pytest.mark.parametrize("payload", [1 << 20, None], ids=["one-buffer", "two-buffers"])
def test_a_link_closed_under_the_broadcaster_is_not_taken_for_a_peer_closing(
    base_path: str, payload: int | None
) -> None:
    """EBADF is this process's own fault: a BroadcastError naming it, not PeerClosedError."""
    with _pair(base_path, io_timeout=10.0) as (root, _peer):
        link = root._links.peers[1]  # white-box: close rank 0's socket behind its back
        assert link is not None
        link.close()
        buffers = bytearray(payload) if payload else [bytearray(3), bytearray(5)]
        with pytest.raises(BroadcastError) as info:
            root.broadcast(buffers)
    err = info.value
    assert type(err) is BroadcastError
    assert (err.rank, err.peer, err.errno_name) == (0, 1, "EBADF")
    assert f": {os.strerror(errno.EBADF)} (EBADF) [path {base_path}_0.sock]" in str(err)


def test_a_listener_that_drops_each_connection_is_retried_then_named(
    base_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dropped before the rank handshake (EPIPE): the peer connects again until its connect
    deadline, then fails naming rank 0 as the peer and the handshake as the phase."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(base_path + "_0.sock")
    listener.listen(4)
    real = bootstrap_module._peer_credentials
    attempts: list[int] = []

    def credentials_then_drop(sock: socket.socket) -> tuple[int, int, int]:
        creds = real(sock)
        conn, _ = listener.accept()  # queued by the peer's connect: returns at once
        conn.close()  # the fault: rank 0's side goes away before the handshake
        attempts.append(1)
        return creds

    monkeypatch.setattr(bootstrap_module, "_peer_credentials", credentials_then_drop)
    config = BroadcasterConfig(connect_timeout=0.3, connect_retry_interval=0.01)
    try:
        with pytest.raises(PeerClosedError) as info:
            CpuTpBroadcaster(config).initialize(1, 2, base_path)
    finally:
        listener.close()
    err = info.value
    assert len(attempts) >= 2  # retried, not failed at the first drop
    assert (err.rank, err.peer, err.phase) == (1, 0, "handshake")
    assert (err.action, err.path) == ("write to rank 0", base_path + "_0.sock")
    assert err.errno_name in {"EPIPE", "ECONNRESET"} and err.bytes_done == 0


def test_an_empty_two_dimensional_buffer_is_received_next_to_a_full_one(base_path: str) -> None:
    """memoryview.cast refuses a view with a zero in its shape: it still flattens (to 0 B)."""
    numpy = pytest.importorskip("numpy")
    with _pair(base_path, io_timeout=10.0) as (root, peer):
        received = bytearray(2)
        caught: list[BaseException] = []

        def send() -> None:
            try:
                root.broadcast([memoryview(numpy.zeros((0, 3), numpy.uint8)), b"ab"])
            except BaseException as exc:
                caught.append(exc)

        thread = in_thread(send)
        peer.broadcast([memoryview(numpy.zeros((0, 3), numpy.float32)), received])
        thread.join(10.0)
    assert not caught and received == b"ab"


def _uid_refusal(base_path: str, allowed_uids: tuple[int, ...]) -> SecurityError:
    """Rank 0 allows only ``allowed_uids`` (not ours); a peer of ours connects: the refusal."""
    config = BroadcasterConfig(require_same_uid=False, allowed_uids=allowed_uids, init_timeout=5.0)

    def peer() -> None:
        with contextlib.suppress(OSError):
            sock = wire.connect(base_path + "_0.sock", wire.Deadline.after(5.0))
            sock.close()

    thread = in_thread(peer)
    try:
        with pytest.raises(SecurityError) as info:
            CpuTpBroadcaster(config).initialize(0, 2, base_path)
    finally:
        thread.join(10.0)
    return info.value


def test_rank_0_names_a_refused_uid_and_the_setting_that_widens_it(base_path: str) -> None:
    other = os.geteuid() + 4242
    assert (
        f"rejected a connection from pid {os.getpid()} uid {os.geteuid()}: only uid(s) "
        f"{other} may join (BroadcasterConfig.allowed_uids widens this)"
    ) in str(_uid_refusal(base_path, (other,)))


def test_the_pending_connection_cap_lists_every_waiting_connection(base_path: str) -> None:
    """world_size 2: two silent connections may wait; the third is refused naming both."""
    release = threading.Event()
    socks: list[socket.socket] = []

    def silent_connections() -> None:
        for _ in range(3):
            with contextlib.suppress(OSError):
                socks.append(wire.connect(base_path + "_0.sock", wire.Deadline.after(5.0)))
        release.wait(10.0)
        for sock in socks:
            sock.close()

    thread = in_thread(silent_connections)
    try:
        err = _root_error(base_path, 2, init_timeout=10.0)
    finally:
        release.set()
        thread.join(15.0)
    pid = os.getpid()
    assert (
        f"already pending: connection 1 (pid {pid}, 0/4 bytes), connection 2 (pid {pid}, 0/4 bytes)"
    ) in str(err)


# -- buffers a caller may pass ----------------------------------------------------------


class _Pair(ctypes.Structure):
    _fields_ = (("a", ctypes.c_int32), ("b", ctypes.c_double))


def _world_of_one(base: str) -> CpuTpBroadcaster:
    bcast = CpuTpBroadcaster()
    bcast.initialize(0, 1, base)
    return bcast


def test_a_non_buffer_is_refused_with_what_to_pass(base_path: str) -> None:
    bcast = _world_of_one(base_path)
    try:
        with pytest.raises(ConfigurationError) as info:
            bcast.broadcast([bytearray(1), object()])
    finally:
        bcast.reset()
    assert str(info.value) == (
        "buffer 1 of type object is not a buffer; pass bytes-like objects, numpy arrays or "
        "torch CPU tensors"
    )


def test_without_numpy_a_strided_struct_view_is_refused_with_what_to_do(
    base_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    strided = memoryview((_Pair * 4)())[::2]  # 1-D, non-contiguous, a multi-char format
    monkeypatch.setitem(sys.modules, "numpy", None)  # "not installed": import fails
    bcast = _world_of_one(base_path)
    try:
        with pytest.raises(ConfigurationError) as info:
            bcast.broadcast(strided)
    finally:
        bcast.reset()
    assert str(info.value) == (
        "buffer 0 is a non-contiguous memoryview; install numpy or pass a contiguous buffer"
    )


def test_a_strided_two_dimensional_view_of_object_pointers_is_refused_by_index(
    base_path: str,
) -> None:
    numpy = pytest.importorskip("numpy")
    objects = memoryview(numpy.empty((2, 4), dtype=object)[:, ::2])
    bcast = _world_of_one(base_path)
    try:
        with pytest.raises(ConfigurationError, match=r"^buffer 1 is a numpy array of dtype object"):
            bcast.broadcast([bytearray(1), objects])
    finally:
        bcast.reset()


def test_a_peer_receives_into_a_strided_two_dimensional_view(base_path: str) -> None:
    """Not contiguous, not 1-D: staged through numpy and copied back into the caller's memory."""
    numpy = pytest.importorskip("numpy")
    expected = numpy.arange(8, dtype=numpy.uint8).reshape(4, 2)
    target = numpy.zeros((4, 4), dtype=numpy.uint8)
    with _pair(base_path, io_timeout=10.0) as (root, peer):
        caught: list[BaseException] = []

        def send() -> None:
            try:
                root.broadcast([expected.tobytes(), b"!"])
            except BaseException as exc:
                caught.append(exc)

        thread = in_thread(send)
        tail = bytearray(1)
        peer.broadcast([memoryview(target[:, ::2]), tail])
        thread.join(10.0)
    assert not caught and tail == b"!"
    assert (target[:, ::2] == expected).all() and not target[:, 1::2].any()


def test_progress_is_shown_only_when_both_byte_counts_are_known() -> None:
    assert str(BroadcastError("stopped", rank=1, bytes_done=5)) == "rank 1: stopped"
    assert str(BroadcastError("stopped", bytes_total=9, elapsed=0.5)) == "after 0.50 s: stopped"
    assert str(BroadcastError("stopped", bytes_done=5, bytes_total=9)) == (
        "after 5/9 bytes: stopped"
    )


@pytest.mark.parametrize("kind", ["symlink", "loose", "foreign"])
def test_an_untrusted_socket_directory_is_named_in_the_refusal(short_dir: str, kind: str) -> None:
    directory = os.path.join(short_dir, "sockets")
    if kind == "symlink":
        os.mkdir(directory + ".real", 0o700)
        os.symlink(directory + ".real", directory)
    else:
        os.mkdir(directory, 0o700)
        if kind == "loose":
            os.chmod(directory, 0o755)
        elif os.geteuid() == 0:
            os.chown(directory, 65534, -1)
        else:
            pytest.skip("making a directory of another owner needs root")
    with pytest.raises(SecurityError) as info:
        CpuTpBroadcaster().initialize(0, 2, os.path.join(directory, "g"))
    assert info.value.path == directory
    assert str(info.value).endswith(f"[path {directory}]")


def test_a_joined_peer_that_talks_before_the_probe_is_named(base_path: str) -> None:
    done = threading.Event()

    def chatty() -> None:
        sock = wire.connect(base_path + "_0.sock", wire.Deadline.after(5.0))
        with sock:
            wire.send_all(sock, wire.pack_rank(1) + b"??", wire.Deadline.after(5.0))
            done.wait(10.0)

    thread = in_thread(chatty)
    try:
        err = _root_error(base_path, 3, init_timeout=10.0)
    finally:
        done.set()
        thread.join(10.0)
    assert isinstance(err, HandshakeError)
    assert (err.rank, err.peer, err.phase) == (0, 1, "accept")
    assert (
        f"peer 1 (pid {os.getpid()}) sent 2 unexpected byte(s) after its rank, before the "
        "link probe"
    ) in str(err)


def test_repr_shows_the_state(base_path: str) -> None:
    bcast = CpuTpBroadcaster()
    assert repr(bcast) == (
        "<CpuTpBroadcaster uninitialized rank=None world_size=None base_path=None generation=0>"
    )
    bcast.initialize(0, 1, base_path)
    try:
        assert repr(bcast) == (
            f"<CpuTpBroadcaster initialized rank=0 world_size=1 base_path={base_path!r} "
            "generation=0>"
        )
    finally:
        bcast.reset()
    assert repr(bcast).endswith("generation=1>")


def test_an_overlapping_call_is_refused_naming_both_calls(base_path: str) -> None:
    with _pair(base_path, io_timeout=30.0) as (_root, peer):
        caught: list[BaseException] = []

        def receive() -> None:  # waits: rank 0 sends nothing
            try:
                peer.broadcast(bytearray(4))
            except BaseException as exc:
                caught.append(exc)

        thread = in_thread(receive)
        when_broadcasting(peer)
        with pytest.raises(BroadcastError) as info:
            peer.broadcast(bytearray(4))
        peer.reset()  # aborts the waiting receive
        thread.join(15.0)
    assert str(info.value) == (
        "rank 1: in phase 'broadcast': broadcast() called while broadcast() is running "
        "(another thread or a signal handler); a broadcaster is not re-entrant"
    )


def test_more_buffers_than_one_sendmsg_takes_arrive_in_order(base_path: str) -> None:
    """Over IOV_MAX (1024) buffers rank 0 skips the one-sendmsg path and sends them one by one."""
    count = 1500
    sent = [bytes([i % 251]) * 3 for i in range(count)]
    received = [bytearray(3) for _ in range(count)]
    with _pair(base_path, io_timeout=20.0) as (root, peer):
        caught: list[BaseException] = []

        def send() -> None:
            try:
                root.broadcast(sent)
            except BaseException as exc:
                caught.append(exc)

        thread = in_thread(send)
        peer.broadcast(received)
        thread.join(20.0)
    assert not caught and [bytes(r) for r in received] == sent


# -- the dispatch hook's plain-type surface (no process group needed) ---------------------


def test_make_dispatcher_turns_deadlines_into_the_broadcaster_config(short_dir: str) -> None:
    adapter = make().make_dispatcher(
        engine=object(), rank=3, world_size=4, workdir=short_dir, group_timeout=8.0,
        connect=1.0, init=1.5, io=2.5,
    )  # fmt: skip
    assert (adapter.rank, adapter.world_size) == (3, 4)  # type: ignore[attr-defined]
    assert adapter.config == BroadcasterConfig(  # type: ignore[attr-defined]
        connect_timeout=1.0, init_timeout=1.5, io_timeout=2.5
    )
    defaults = make().make_dispatcher(
        engine=object(), rank=0, world_size=2, workdir=short_dir, group_timeout=8.0, io=math.inf
    )
    assert defaults.config == BroadcasterConfig(  # type: ignore[attr-defined]
        connect_timeout=2.0, init_timeout=2.0, io_timeout=None
    )


def test_broadcast_cpu_before_bootstrap_is_refused_naming_the_rank(short_dir: str) -> None:
    reference = make()
    adapter: Any = reference.make_dispatcher(
        engine=object(), rank=3, world_size=4, workdir=short_dir
    )
    assert adapter.path == "collective"
    with pytest.raises(NotInitializedError) as info:
        adapter.broadcast_cpu([bytearray(1)])
    assert (info.value.rank, info.value.phase) == (3, "dispatch")
    assert str(info.value) == (
        "rank 3: in phase 'dispatch': call bootstrap() before broadcast_cpu()"
    )
    adapter.teardown()  # nothing bootstrapped: resets the adapter's own broadcaster
    assert reference.generation == 1


def test_bootstrap_refuses_a_group_timeout_inside_the_bootstrap_budget(base_path: str) -> None:
    """Checked before the process group is touched (no torch in this process)."""
    slow = CpuTpBroadcaster(BroadcasterConfig(connect_timeout=10.0, init_timeout=10.0))
    with pytest.raises(ConfigurationError) as info:
        bootstrap(
            slow, tp_rank=1, tp_size=2, local_world_size=2, base_path=base_path, group_timeout=5.0
        )
    assert (info.value.rank, info.value.phase) == (1, "bootstrap")
    assert (
        "process-group timeout 5 s must exceed the broadcaster's bootstrap budget "
        "connect_timeout + init_timeout = 20 s"
    ) in str(info.value)


def test_several_buffers_to_a_departed_peer_raise_even_with_sigpipe_at_default(
    base_path: str,
) -> None:
    """The one-sendmsg path passes MSG_NOSIGNAL too: EPIPE, not death by SIGPIPE."""

    def rank_main(ctx: RankContext) -> str | None:
        bcast = CpuTpBroadcaster(BroadcasterConfig(init_timeout=10.0, io_timeout=10.0))
        bcast.initialize(ctx.rank, 2, base_path)
        if ctx.rank == 1:
            bcast.reset()  # leaves: its end of the link closes
            ctx.notify("left")
            return None
        ctx.wait("left")
        try:
            with pytest.raises(PeerClosedError) as info:
                for _ in range(8):  # the first call may still fit the socket buffer
                    bcast.broadcast([bytearray(1 << 20), bytearray(1 << 20)])
            return info.value.errno_name
        finally:
            bcast.reset()

    result = run_ranks(rank_main, 2, timeout=30.0, sigpipe="default")
    assert result.values()[0] in {"EPIPE", "ECONNRESET"}


@pytest.mark.parametrize("sent", [b"", b"abc"], ids=["at-the-first-read", "mid-transfer"])
def test_a_reset_during_a_receive_is_a_peer_closing_with_the_bytes_so_far(
    base_path: str, sent: bytes
) -> None:
    """Rank 0 (a wire-v1 stand-in) sends some of 8 bytes and closes with our rank handshake
    still unread in its queue: Linux then reports ECONNRESET, after the queued bytes."""
    ready = threading.Event()

    def partial_root() -> None:
        listener = wire.listen(base_path + "_0.sock", 1)
        with listener:
            ready.set()
            conn = wire.accept(listener, wire.Deadline.after(10.0))
            with conn:  # never reads the 4-byte rank: closing then resets the link
                # ...but waits for it: closed before the peer wrote it, the peer would
                # see EPIPE and take rank 0 for a previous incarnation (connect again)
                assert select.select([conn], [], [], 10.0)[0], "no rank handshake"
                wire.send_all(conn, bytes([wire.PROBE]) + sent, wire.Deadline.after(10.0))

    thread = in_thread(partial_root)
    assert ready.wait(10.0)
    config = BroadcasterConfig(connect_timeout=10.0, init_timeout=10.0, io_timeout=10.0)
    peer = CpuTpBroadcaster(config)
    try:
        peer.initialize(1, 2, base_path)
        thread.join(10.0)
        with pytest.raises(PeerClosedError) as info:
            peer.broadcast(bytearray(8))
    finally:
        peer.reset()
        thread.join(10.0)
    err = info.value
    assert (err.bytes_done, err.bytes_total, err.errno_name) == (len(sent), 8, "ECONNRESET")
    assert str(err).startswith(
        f"rank 1: read from rank 0 failed in phase 'broadcast' after {len(sent)}/8 bytes"
    )


def test_an_engine_wraps_a_group_it_does_not_own_by_default() -> None:
    assert TorchDistributedEngine().owns_group is False  # no torch needed to build one
    assert TorchDistributedEngine(owns_group=True).owns_group is True


def test_argument_and_reinit_errors_name_type_and_phase(base_path: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        CpuTpBroadcaster().initialize("0", 2, base_path)  # type: ignore[arg-type]
    assert str(info.value) == "rank must be an int, got '0' (type=str)"
    bcast = CpuTpBroadcaster()
    bcast.initialize(0, 1, base_path)
    try:
        with pytest.raises(ReinitMismatchError) as mismatch:
            bcast.initialize(0, 1, base_path + "x")
    finally:
        bcast.reset()
    assert (mismatch.value.rank, mismatch.value.phase) == (0, "initialize")


def test_reset_during_initialize_from_another_thread_is_refused(base_path: str) -> None:
    bcast = CpuTpBroadcaster(BroadcasterConfig(init_timeout=1.0))
    caught: list[BaseException] = []

    def init() -> None:  # rank 0 waits for a peer that never comes
        try:
            bcast.initialize(0, 2, base_path)
        except BaseException as exc:
            caught.append(exc)

    thread = in_thread(init)
    deadline = time.monotonic() + 10.0
    while bcast._busy != "initialize":  # white-box, as _when_broadcasting
        assert time.monotonic() < deadline, "initialize never started"
        time.sleep(0.001)  # polling with a deadline: the other thread is entering the call
    with pytest.raises(BroadcastError) as info:
        bcast.reset()
    thread.join(15.0)
    bcast.reset()
    assert (info.value.rank, info.value.phase) == (None, "reset")  # no rank until initialized
    assert (
        "reset() called while initialize() is running (a signal handler, or another thread "
        "during initialize); a broadcaster is not re-entrant"
    ) in str(info.value)
    assert len(caught) == 1 and isinstance(caught[0], BroadcastTimeoutError)


def test_the_deadline_budget_is_not_checked_without_a_group_timeout() -> None:
    config = BroadcasterConfig(connect_timeout=10.0, init_timeout=10.0)
    assert _check_deadline_budget(None, config, None, 0) is None


def test_config_is_the_default_until_initialize_and_again_after_reset(base_path: str) -> None:
    default = BroadcasterConfig(init_timeout=7.0)
    bcast = CpuTpBroadcaster(default)
    assert bcast.config is default
    other = BroadcasterConfig(init_timeout=8.0)
    bcast.initialize(0, 1, base_path, config=other)
    assert bcast.config is other
    bcast.reset()
    assert bcast.config is default


def test_several_buffers_wait_for_room_when_the_link_is_already_full(base_path: str) -> None:
    """A slow peer: rank 0's socket buffer is full before the call (filler written into the
    link first), so its one sendmsg finds no room (EAGAIN); every byte still arrives, in
    order, once the peer reads."""
    first, second = bytes(range(256)) * 4, b"tail"
    got: dict[str, bytes] = {}
    filled = threading.Event()
    filler_size: list[int] = []

    def slow_peer() -> None:
        sock = wire.connect(base_path + "_0.sock", wire.Deadline.after(10.0))
        with sock:
            wire.send_all(sock, wire.pack_rank(1), wire.Deadline.after(10.0))
            wire.recv_exact(sock, 1, wire.Deadline.after(10.0))  # the probe
            assert filled.wait(10.0)
            wire.recv_exact(sock, filler_size[0], wire.Deadline.after(20.0))
            got["payload"] = wire.recv_exact(
                sock, len(first) + len(second), wire.Deadline.after(20.0)
            )

    thread = in_thread(slow_peer)
    bcast = CpuTpBroadcaster(BroadcasterConfig(init_timeout=10.0, io_timeout=20.0))
    try:
        bcast.initialize(0, 2, base_path)
        link = bcast._links.peers[1]  # white-box: fill rank 0's side of the link
        assert link is not None
        size = 0
        with contextlib.suppress(BlockingIOError):
            while True:
                size += link.send(bytes(65536), socket.MSG_DONTWAIT)
        filler_size.append(size)
        filled.set()
        bcast.broadcast([first, second])
        thread.join(20.0)
    finally:
        bcast.reset()
    assert got["payload"] == first + second


# -- rank 0 waiting for the other peers: what a joined peer may not do ---------------------


def test_a_joined_peer_that_chatters_is_named_with_what_rank_0_read(base_path: str) -> None:
    """Rank 0 reads at most 64 bytes of a joined peer's chatter before refusing it; the
    error says how many it read, when and on which socket."""
    done = threading.Event()

    def chatty() -> None:
        sock = wire.connect(base_path + "_0.sock", wire.Deadline.after(5.0))
        with sock:
            wire.send_all(sock, wire.pack_rank(1) + b"?" * 100, wire.Deadline.after(5.0))
            done.wait(10.0)

    thread = in_thread(chatty)
    try:
        err = _root_error(base_path, 3, init_timeout=10.0)
    finally:
        done.set()
        thread.join(10.0)
    assert isinstance(err, HandshakeError)
    assert (err.rank, err.peer, err.phase, err.path) == (0, 1, "accept", base_path + "_0.sock")
    assert err.elapsed is not None and 0.0 <= err.elapsed < 10.0
    assert f"peer 1 (pid {os.getpid()}) sent 64 unexpected byte(s) after its rank" in str(err)


def test_a_joined_peer_whose_link_resets_is_named_with_the_errno(
    base_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 0's read of a joined peer fails (ECONNRESET: the peer closed with a byte
    unread, here one rank 0's end of the link wrote): a closed peer, errno named."""
    real = bootstrap_module._peer_credentials
    accepted: list[socket.socket] = []

    def capture(sock: socket.socket) -> tuple[int, int, int]:
        accepted.append(sock)  # rank 0's end of each connection it accepts
        return real(sock)

    monkeypatch.setattr(bootstrap_module, "_peer_credentials", capture)

    def resetting_peer() -> None:
        sock = wire.connect(base_path + "_0.sock", wire.Deadline.after(5.0))
        with sock:
            wire.send_all(sock, wire.pack_rank(1), wire.Deadline.after(5.0))
            deadline = time.monotonic() + 10.0
            while not accepted and time.monotonic() < deadline:
                time.sleep(0.001)  # polling with a deadline: rank 0 is accepting
            accepted[0].send(b"x")  # lands in this peer's queue, never read: close resets

    thread = in_thread(resetting_peer)
    try:
        err = _root_error(base_path, 3, init_timeout=10.0)
    finally:
        thread.join(10.0)
    assert type(err) is PeerClosedError
    assert (err.rank, err.peer, err.phase, err.errno_name) == (0, 1, "accept", "ECONNRESET")
    assert err.path == base_path + "_0.sock"
    assert (
        f"peer 1 (pid {os.getpid()}) closed the connection while rank 0 waited for the other "
        "peers (ECONNRESET)"
    ) in str(err)


def test_rank_0_lists_every_allowed_uid_when_it_refuses_one(base_path: str) -> None:
    base = os.geteuid() + 4242
    err = _uid_refusal(base_path, (base + 1, base))
    assert f": only uid(s) {base}, {base + 1} may join (" in str(err)
    assert (err.rank, err.phase) == (0, "accept")


# -- the broadcaster's own bookkeeping -------------------------------------------------------


def test_every_broadcast_is_counted_whichever_path_it_takes(base_path: str) -> None:
    """A world of one (nothing to move), an empty list and a list of buffers between two
    ranks: each call adds one to ``broadcasts``; bytes count once per call."""
    alone = _world_of_one(base_path + "1")
    try:
        alone.broadcast([bytearray(1), bytearray(2)])
        alone.broadcast([bytearray(1), bytearray(2)])
        alone.broadcast(bytearray(1))  # the one-buffer path
        alone.broadcast(bytearray(1))
        assert alone.statistics().broadcasts == 4
    finally:
        alone.reset()
    with _pair(base_path, io_timeout=10.0) as (root, peer):
        caught: list[BaseException] = []

        def send() -> None:
            try:
                for _ in range(2):
                    root.broadcast([b"ab", b"c"])
                root.broadcast([bytearray(0)])
                root.broadcast([b"", b"de"])
                root.broadcast(b"fg")
            except BaseException as exc:
                caught.append(exc)

        thread = in_thread(send)
        for _ in range(2):
            peer.broadcast([bytearray(2), bytearray(1)])
        peer.broadcast([bytearray(0)])
        last = bytearray(2)
        peer.broadcast([bytearray(0), last])  # an empty buffer first: 0 bytes counted
        flat = bytearray(2)
        peer.broadcast(flat)
        thread.join(10.0)
        assert not caught and last == b"de" and flat == b"fg"
        sent, received = root.statistics(), peer.statistics()
    assert (sent.broadcasts, sent.bytes_sent) == (5, 10)
    assert (received.broadcasts, received.bytes_received) == (5, 10)


def test_several_buffers_to_a_peer_that_left_count_the_whole_transfer(base_path: str) -> None:
    with _pair(base_path, io_timeout=10.0) as (root, peer):
        peer.reset()  # its end of the link closes
        with pytest.raises(PeerClosedError) as info:
            for _ in range(8):  # the first write may still fit the socket buffer
                root.broadcast([bytearray(3), bytearray(5)])
    err = info.value
    assert (err.rank, err.peer, err.bytes_done, err.bytes_total) == (0, 1, 0, 8)


@pytest.mark.parametrize("several", [True, False], ids=["several-buffers", "one-buffer"])
def test_a_peer_whose_link_was_closed_under_it_names_that_for_several_buffers(
    base_path: str, several: bool
) -> None:
    """The peer's wait for the first buffer polls its cached poller, which reports the
    closed fd (POLLNVAL): "closed under us", EBADF, nothing received of the 8 bytes."""
    with _pair(base_path, io_timeout=10.0) as (_root, peer):
        link = peer._links.peers[0]  # white-box: close the peer's socket behind its back
        assert link is not None
        link.close()
        with pytest.raises(BroadcastError) as info:
            peer.broadcast([bytearray(3), bytearray(5)] if several else bytearray(8))
    err = info.value
    assert type(err) is BroadcastError
    assert (err.rank, err.peer, err.errno_name, err.action) == (1, 0, "EBADF", "read from rank 0")
    assert (err.bytes_done, err.bytes_total) == (0, 8)
    assert err.reason == "socket was closed under us"


class _StopError(Exception):
    pass


@pytest.mark.parametrize(
    ("message", "quoted"), [("", "_StopError"), ("x" * 300, "x" * 300)], ids=["empty", "300"]
)
def test_the_broken_state_quotes_the_failure_by_message_or_else_by_type(
    base_path: str, monkeypatch: pytest.MonkeyPatch, message: str, quoted: str
) -> None:
    """A failure without a message is quoted by its type's name; one of exactly 300
    characters whole (no "..."); repr says "broken" until reset."""

    def fail(*args: object, **kwargs: object) -> int:
        raise _StopError(message)

    with _pair(base_path, io_timeout=10.0) as (root, _peer):
        monkeypatch.setattr(broadcaster_module, "send_views", fail)
        with pytest.raises(_StopError):
            root.broadcast([bytearray(3), bytearray(5)])
        with pytest.raises(BrokenBroadcasterError) as info:
            root.broadcast(bytearray(1))
        assert repr(root).startswith("<CpuTpBroadcaster broken rank=0 world_size=2 ")
    assert (
        f"a previous broadcast failed, so the byte stream is out of sync ({quoted}); call "
        "reset() and initialize() again"
    ) in str(info.value)


def test_at_exit_every_live_broadcaster_is_reset_even_if_one_refuses(base_path: str) -> None:
    """The atexit hook resets each live instance (rank 0's socket file goes); one that
    refuses (busy initializing in another thread) does not stop it or escape it."""
    idle = _world_of_one(base_path + "1")
    busy = CpuTpBroadcaster(BroadcasterConfig(init_timeout=10.0))
    caught: list[BaseException] = []

    def init() -> None:  # rank 0 waits for a peer
        try:
            busy.initialize(0, 2, base_path)
        except BaseException as exc:
            caught.append(exc)

    thread = in_thread(init)
    deadline = time.monotonic() + 10.0
    while busy._busy != "initialize":  # white-box, as _when_broadcasting
        assert time.monotonic() < deadline, "initialize never started"
        time.sleep(0.001)  # polling with a deadline: the other thread is entering the call
    try:
        broadcaster_module._reset_at_exit()
        assert not idle.is_initialized() and idle.generation == 1
    finally:
        # end the waiting initialize at once: a "peer" announcing an impossible rank
        sock = wire.connect(base_path + "_0.sock", wire.Deadline.after(5.0))
        with sock:
            wire.send_all(sock, wire.pack_rank(7), wire.Deadline.after(5.0))
            thread.join(10.0)
        busy.reset()
        idle.reset()
    assert len(caught) == 1 and isinstance(caught[0], HandshakeError)


# -- what sits at the socket path, and who listens there -----------------------------------


def _bound(path: str, *, listening: bool) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    if listening:
        sock.listen(1)
    return sock


def test_every_kind_of_file_in_the_way_is_named(short_dir: str) -> None:
    """At the socket path: a symlink, a regular file; as the socket directory: a socket."""
    link = os.path.join(short_dir, "l_0.sock")
    os.symlink("/nonexistent", link)
    with pytest.raises(SecurityError, match=r"^a symlink is at the socket path; refusing"):
        prepare_socket_path(link)
    regular = os.path.join(short_dir, "r_0.sock")
    with open(regular, "wb"):
        pass
    with pytest.raises(SecurityError, match=r"^a regular file is at the socket path; refusing"):
        prepare_socket_path(regular)
    not_a_dir = os.path.join(short_dir, "s")
    with (
        contextlib.closing(_bound(not_a_dir, listening=False)),
        pytest.raises(SecurityError) as info,
    ):
        CpuTpBroadcaster().initialize(0, 2, os.path.join(not_a_dir, "g"))
    assert str(info.value).startswith("socket directory is a socket, not a directory; refusing")


def test_a_listener_bound_by_a_relative_name_owns_only_the_path_it_names(short_dir: str) -> None:
    """Bound as "sub/g_0.sock" from ``short_dir``: <short_dir>/sub/g_0.sock is live (every
    component compared); a stale socket elsewhere is still replaced."""
    os.mkdir(os.path.join(short_dir, "sub"))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale_path = os.path.join(short_dir, "x_0.sock")
    try:
        with _cwd(short_dir):
            listener.bind("sub/g_0.sock")
        listener.listen(1)
        with pytest.raises(SecurityError, match=r"^another process is listening"):
            prepare_socket_path(os.path.join(short_dir, "sub", "g_0.sock"))
        with contextlib.closing(_bound(stale_path, listening=False)):
            prepare_socket_path(stale_path)
        assert not os.path.lexists(stale_path)
    finally:
        listener.close()


def test_a_listener_in_a_directory_with_a_space_is_found(short_dir: str) -> None:
    """/proc/net/unix's path column may hold spaces: the listener is still live."""
    directory = os.path.join(short_dir, "a b")
    os.mkdir(directory)
    path = os.path.join(directory, "g_0.sock")
    with (
        contextlib.closing(_bound(path, listening=True)),
        pytest.raises(SecurityError, match=r"^another process is listening"),
    ):
        prepare_socket_path(path)
    assert os.path.lexists(path)


def test_an_abstract_listener_does_not_own_a_file_of_the_same_name(short_dir: str) -> None:
    """/proc/net/unix shows an abstract name as "@name"; a stale socket file named
    "@name" is not that listener's and is replaced."""
    name = f"tpbk{os.getpid()}_{os.path.basename(short_dir)}"
    path = os.path.join(short_dir, "@" + name)
    with (
        contextlib.closing(_bound("\0" + name, listening=True)),
        contextlib.closing(_bound(path, listening=False)),
    ):
        prepare_socket_path(path)
        assert not os.path.lexists(path)


@pytest.mark.parametrize("dp_rank", [True, "1", 1.0])
def test_make_base_path_takes_only_an_int_dp_rank(dp_rank: object) -> None:
    with pytest.raises(ConfigurationError) as info:
        make_base_path(dp_rank)  # type: ignore[arg-type]
    assert str(info.value) == f"dp_rank must be an int >= 0, got {dp_rank!r}"


def test_the_default_session_is_the_parent_pid_plus_a_digest_of_the_key() -> None:
    digest = hashlib.sha256(b"10.0.0.1:29500").hexdigest()[:10]
    base = make_base_path(key="10.0.0.1:29500", base_dir="/b", environ={})
    assert base == f"/b/tp_p{os.getppid()}_{digest}_dp0"


def test_a_session_id_of_the_maximum_length_is_kept_as_it_is() -> None:
    assert make_base_path(session_id="s" * 24, base_dir="/b") == "/b/tp_" + "s" * 24 + "_dp0"


# -- numpy arrays and torch tensors between two ranks ---------------------------------------


def test_numpy_arrays_of_any_shape_and_layout_travel_whole(base_path: str) -> None:
    """2-D float32 arrays, contiguous and strided (staged through a temporary), arrive
    whole: every byte counted, not one per row or per element."""
    numpy = pytest.importorskip("numpy")
    source = numpy.arange(24, dtype=numpy.float32).reshape(4, 6) + 0.5
    plain, backing = numpy.zeros((4, 6), numpy.float32), numpy.zeros((4, 6), numpy.float32)
    with _pair(base_path, io_timeout=10.0) as (root, peer):
        caught: list[BaseException] = []

        def send() -> None:
            try:
                root.broadcast([source, source[:, ::2], b"!"])
            except BaseException as exc:
                caught.append(exc)

        thread = in_thread(send)
        tail = bytearray(1)
        peer.broadcast([plain, backing[:, ::2], tail])
        thread.join(10.0)
        assert not caught and tail == b"!"
        assert peer.statistics().bytes_received == 96 + 48 + 1
    assert (plain == source).all()
    assert (backing[:, ::2] == source[:, ::2]).all() and not backing[:, 1::2].any()


def test_a_read_only_numpy_array_is_refused_on_a_peer_with_what_to_pass(base_path: str) -> None:
    numpy = pytest.importorskip("numpy")
    frozen = numpy.zeros((2, 2), numpy.float32)
    frozen.flags.writeable = False
    with (
        _pair(base_path, io_timeout=10.0) as (_root, peer),
        pytest.raises(ConfigurationError) as info,
    ):
        peer.broadcast([bytearray(1), frozen])
    assert str(info.value).startswith("buffer 1 is a read-only numpy array; ")


@needs_torch
def test_conjugate_tensors_arrive_resolved_and_a_meta_tensor_is_refused(base_path: str) -> None:
    """A contiguous tensor with the conj bit is sent as the values it shows (resolved),
    an empty one too; a tensor not on the CPU is refused saying what to do."""

    def rank_main(ctx: RankContext) -> object:
        import torch

        torch.set_num_threads(1)
        bcast = CpuTpBroadcaster(BroadcasterConfig(init_timeout=20.0, io_timeout=20.0))
        bcast.initialize(ctx.rank, 2, base_path)
        try:
            values = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)
            shown = values.conj() if ctx.rank == 0 else torch.zeros(2, dtype=torch.complex64)
            empty = torch.empty(0, dtype=torch.complex64).conj()  # data_ptr 0 before and after
            tail = bytearray(b"!") if ctx.rank == 0 else bytearray(1)
            bcast.broadcast([shown, empty, tail])
            if ctx.rank == 1:
                return [shown.resolve_conj().tolist(), bytes(tail)]
            with pytest.raises(ConfigurationError) as info:
                bcast.broadcast(torch.empty(3, device="meta"))
            return str(info.value)
        finally:
            bcast.reset()

    refusal, received = run_ranks(rank_main, 2, timeout=60.0).values()
    assert received == [[1 - 2j, 3 + 4j], b"!"]
    assert refusal == (
        "buffer 0 is a torch tensor on device 'meta'; only CPU tensors can be broadcast over "
        "the socket (copy it with .cpu() first)"
    )


# -- the bootstrap's remaining corners ---------------------------------------------------------


def test_of_several_half_announced_connections_the_first_is_blamed(base_path: str) -> None:
    """At the init deadline two connections are still announcing their rank: the error
    names the one that connected first, with its bytes."""
    done = threading.Event()

    def two_half_peers() -> None:
        first = wire.connect(base_path + "_0.sock", wire.Deadline.after(5.0))
        wire.send_all(first, wire.pack_rank(1)[:1], wire.Deadline.after(5.0))
        second = wire.connect(base_path + "_0.sock", wire.Deadline.after(5.0))
        wire.send_all(second, wire.pack_rank(2)[:3], wire.Deadline.after(5.0))
        with first, second:
            done.wait(10.0)

    thread = in_thread(two_half_peers)
    try:
        err = _root_error(base_path, 3, init_timeout=0.5)
    finally:
        done.set()
        thread.join(10.0)
    assert isinstance(err, BroadcastTimeoutError)
    assert (err.bytes_done, err.bytes_total, err.errno_name) == (1, 4, "ETIMEDOUT")
    assert f"read from connection 1 (pid {os.getpid()}) failed" in str(err)


def test_a_duplicate_rank_is_refused_naming_the_rank(base_path: str) -> None:
    done = threading.Event()

    def twins() -> None:
        socks = []
        for _ in range(2):
            sock = wire.connect(base_path + "_0.sock", wire.Deadline.after(5.0))
            wire.send_all(sock, wire.pack_rank(1), wire.Deadline.after(5.0))
            socks.append(sock)
        done.wait(10.0)
        for sock in socks:
            sock.close()

    thread = in_thread(twins)
    try:
        err = _root_error(base_path, 3, init_timeout=10.0)
    finally:
        done.set()
        thread.join(10.0)
    assert isinstance(err, HandshakeError)
    assert (err.rank, err.peer, err.phase) == (0, 1, "handshake")
    pid = os.getpid()
    assert f"duplicate peer rank 1 from pid {pid} (pid {pid} announced it first)" in str(err)


def test_a_peer_waits_for_the_probe_only_until_its_init_deadline(base_path: str) -> None:
    """Rank 0's socket accepts (a listener's backlog) but never sends the link probe: the
    peer gives up at init_timeout, naming the probe."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(base_path + "_0.sock")
    listener.listen(1)
    config = BroadcasterConfig(connect_timeout=5.0, init_timeout=0.3)
    caught: list[BaseException] = []

    def join() -> None:
        try:
            CpuTpBroadcaster(config).initialize(1, 2, base_path)
        except BaseException as exc:
            caught.append(exc)

    thread = in_thread(join)
    thread.join(10.0)
    alive = thread.is_alive()
    listener.close()  # resets the queued connection: a hung peer wakes up
    thread.join(10.0)
    assert not alive, "the peer waited past its init deadline"
    (err,) = caught
    assert isinstance(err, BroadcastTimeoutError)
    assert (err.rank, err.peer, err.phase) == (1, 0, "probe")
    assert (err.action, err.path) == ("read from rank 0", base_path + "_0.sock")


def test_asking_a_transfer_to_stop_never_fails_however_often_it_is_asked() -> None:
    """request_abort never blocks or raises: once the pipe is full it is readable anyway."""
    links = bootstrap_module.Links()
    links.open_abort_pipe()
    try:
        for _ in range(70_000):  # more single bytes than a pipe holds (64 KiB)
            links.request_abort()
        assert select.select([links.abort_r], [], [], 0)[0]
    finally:
        links.close(unlink=False)


def test_a_broadcaster_inherited_across_fork_can_start_over_alone(base_path: str) -> None:
    """In a forked child the inherited broadcaster forgets its group; initialized again as
    a world of one it broadcasts (nothing to move)."""
    inherited = CpuTpBroadcaster()

    def rank_main(ctx: RankContext) -> int:
        inherited.initialize(0, 1, base_path)
        inherited.broadcast(bytearray(b"x"))
        inherited.broadcast([bytearray(1)])
        return inherited.statistics().broadcasts

    assert run_ranks(rank_main, 1, timeout=30.0).values() == [2]


def test_a_peer_cannot_receive_into_bytes_and_is_told_what_to_pass(base_path: str) -> None:
    with (
        _pair(base_path, io_timeout=10.0) as (_root, peer),
        pytest.raises(ConfigurationError) as info,
    ):
        peer.broadcast([bytearray(1), b"abc"])
    assert str(info.value).startswith("buffer 1 (bytes) is read-only; ")


def test_without_numpy_a_strided_byte_view_is_still_sent(
    base_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A strided 1-D view of single-character items needs no numpy (a bytearray stage)."""
    monkeypatch.setitem(sys.modules, "numpy", None)  # "not installed": import fails
    with _pair(base_path, io_timeout=10.0) as (root, peer):
        caught: list[BaseException] = []

        def send() -> None:
            try:
                root.broadcast(memoryview(bytearray(b"a-b-c-d-"))[::2])
            except BaseException as exc:
                caught.append(exc)

        thread = in_thread(send)
        target = bytearray(8)
        peer.broadcast(memoryview(target)[::2])
        thread.join(10.0)
    assert not caught and target == bytearray(b"a\0b\0c\0d\0")


def test_rank_0_sends_an_empty_read_only_two_dimensional_view(base_path: str) -> None:
    """memoryview.cast refuses a view with a zero in its shape; read-only on rank 0, it is
    copied instead (0 bytes) and the buffer after it still arrives."""
    numpy = pytest.importorskip("numpy")
    empty = numpy.zeros((0, 3), numpy.float32)
    empty.flags.writeable = False
    with _pair(base_path, io_timeout=10.0) as (root, peer):
        caught: list[BaseException] = []

        def send() -> None:
            try:
                root.broadcast([memoryview(empty), b"ab"])
            except BaseException as exc:
                caught.append(exc)

        thread = in_thread(send)
        received = bytearray(2)
        peer.broadcast([bytearray(0), received])
        thread.join(10.0)
    assert not caught and received == b"ab"


@pytest.mark.parametrize("probe", [b"", b"\x00"], ids=["closes", "wrong-byte"])
def test_a_peer_names_what_rank_0_did_instead_of_probing(base_path: str, probe: bytes) -> None:
    """Rank 0 (a wire-v1 stand-in) reads our rank, then closes without the probe or sends
    a wrong probe byte: the peer says which, with its rank, the phase and the path."""
    ready = threading.Event()

    def root() -> None:
        listener = wire.listen(base_path + "_0.sock", 1)
        with listener:
            ready.set()
            conn = wire.accept(listener, wire.Deadline.after(10.0))
            with conn:
                wire.recv_exact(conn, 4, wire.Deadline.after(10.0))  # our rank
                if probe:
                    wire.send_all(conn, probe, wire.Deadline.after(10.0))
                    conn.recv(1)  # wait for the peer to hang up

    thread = in_thread(root)
    assert ready.wait(10.0)
    config = BroadcasterConfig(connect_timeout=10.0, init_timeout=10.0)
    try:
        with pytest.raises(BroadcastError) as info:
            CpuTpBroadcaster(config).initialize(1, 2, base_path)
    finally:
        thread.join(10.0)
    err = info.value
    assert (err.rank, err.peer, err.phase) == (1, 0, "probe")
    assert err.path == base_path + "_0.sock" and err.elapsed is not None
    if probe:
        assert type(err) is HandshakeError
        assert err.reason == f"bad link probe byte: expected 0x{wire.PROBE:02x}, got 0x00"
    else:
        assert type(err) is PeerClosedError and err.action is None
        assert err.reason == (
            "rank 0 closed the connection before sending the link probe (it may have "
            "rejected this rank or failed; see rank 0's error)"
        )


def test_a_new_socket_directory_is_private_from_the_start(
    short_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even under umask 0 the directory is created 0700: no moment in which others could
    reach it before the chmod that pins the mode."""
    modes: list[int] = []
    real_chmod = os.chmod

    def chmod(path: Any, mode: int, *args: Any, **kwargs: Any) -> None:
        modes.append(stat.S_IMODE(os.lstat(path).st_mode))  # the mode before the chmod
        real_chmod(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "chmod", chmod)
    old = os.umask(0)
    try:
        ensure_private_dir(os.path.join(short_dir, "new"))
    finally:
        os.umask(old)
    assert modes == [0o700]


def test_a_stale_socket_that_vanishes_before_its_removal_is_fine(
    short_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process may remove the stale socket between our check and our unlink."""
    path = os.path.join(short_dir, "v_0.sock")

    def removed_meanwhile(candidate: str, ident: object) -> bool:
        os.unlink(candidate)  # someone else cleans up first
        return False

    monkeypatch.setattr(paths_module, "_has_live_listener", removed_meanwhile)
    with contextlib.closing(_bound(path, listening=False)):
        prepare_socket_path(path)
    assert not os.path.lexists(path)


def test_reset_keeps_a_socket_file_that_is_no_longer_ours(base_path: str) -> None:
    """Rank 0's socket path was taken over (removed and bound anew) while it ran: its
    reset removes only the file it bound, so the newcomer's stays."""
    path = base_path + "_0.sock"
    with _pair(base_path, io_timeout=10.0) as (root, _peer):
        os.unlink(path)
        newcomer = _bound(path, listening=True)
        root.reset()
    with contextlib.closing(newcomer):
        assert os.path.lexists(path)


def _until_read(sock: socket.socket) -> None:
    """Wait until the other end has read everything ``sock`` sent (SIOCOUTQ drops to 0)."""
    import fcntl
    import termios

    deadline = time.monotonic() + 10.0
    while int.from_bytes(fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, bytes(4)), "little"):
        assert time.monotonic() < deadline, "the other end never read"
        time.sleep(0.001)  # polling with a deadline: rank 0 reads when its poll wakes


@pytest.mark.parametrize("hang_up", ["close", "reset"])
def test_a_connection_that_hangs_up_mid_rank_is_named_with_its_bytes(
    base_path: str, monkeypatch: pytest.MonkeyPatch, hang_up: str
) -> None:
    """Two bytes of the rank, read one at a time, then the connection ends (end of stream,
    or ECONNRESET: it closed with a byte from rank 0's end unread): rank 0 names it with
    the bytes it got."""
    real = bootstrap_module._peer_credentials
    accepted: list[socket.socket] = []

    def capture(sock: socket.socket) -> tuple[int, int, int]:
        accepted.append(sock)  # rank 0's end of the connection
        return real(sock)

    monkeypatch.setattr(bootstrap_module, "_peer_credentials", capture)

    def truncated() -> None:
        sock = wire.connect(base_path + "_0.sock", wire.Deadline.after(5.0))
        with sock:
            for byte in wire.pack_rank(1)[:2]:
                wire.send_all(sock, bytes([byte]), wire.Deadline.after(5.0))
                _until_read(sock)
            if hang_up == "reset":
                accepted[0].send(b"x")  # left unread: closing now resets the link

    thread = in_thread(truncated)
    try:
        err = _root_error(base_path, 3, init_timeout=10.0)
    finally:
        thread.join(10.0)
    assert type(err) is HandshakeError
    assert (err.rank, err.phase, err.path) == (0, "handshake", base_path + "_0.sock")
    assert (err.bytes_done, err.bytes_total) == (2, 4) and err.elapsed is not None
    assert err.reason == (
        f"pid {os.getpid()} closed the connection after 2/4 bytes of its rank handshake"
    )


class _UnreadableConnection:
    """Rank 0's end of an accepted connection whose reads fail with ``error``."""

    def __init__(self, real: socket.socket, error: OSError) -> None:
        self._real = real
        self._error = error

    def recv_into(self, *args: object) -> int:
        raise self._error

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (OSError(errno.ENOMEM, os.strerror(errno.ENOMEM)), os.strerror(errno.ENOMEM)),
        (OSError("the interposer refused the read"), "the interposer refused the read"),
    ],
    ids=["ENOMEM", "no-errno"],
)
def test_a_failed_read_of_a_rank_announcement_is_named_with_its_errno(
    base_path: str, monkeypatch: pytest.MonkeyPatch, error: OSError, reason: str
) -> None:
    """A read error that is not a hang-up fails rank 0's bootstrap with its reason and
    errno and the connection it read from, not as a peer closing."""
    real = bootstrap_module._Pending
    monkeypatch.setattr(
        bootstrap_module,
        "_Pending",
        lambda conn, *rest: real(_UnreadableConnection(conn, error), *rest),
    )
    done = threading.Event()

    def announcing() -> None:
        sock = wire.connect(base_path + "_0.sock", wire.Deadline.after(5.0))
        with sock:
            wire.send_all(sock, wire.pack_rank(1), wire.Deadline.after(5.0))
            done.wait(10.0)

    thread = in_thread(announcing)
    try:
        err = _root_error(base_path, 2, init_timeout=10.0)
    finally:
        done.set()
        thread.join(10.0)
    assert type(err) is BroadcastError
    assert err.reason == reason
    assert (err.rank, err.phase, err.path) == (0, "handshake", base_path + "_0.sock")
    assert (err.bytes_done, err.bytes_total) == (0, 4)
    assert err.errno_name == (errno_name(error.errno) if error.errno else None)
    assert err.action == f"read from connection 1 (pid {os.getpid()})"


class _PollCounter:
    """Stands in for the select module in _bootstrap: counts the pollers rank 0 makes
    while it waits for its peers, and their polls."""

    def __init__(self) -> None:
        self.made = 0
        self.polls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(select, name)

    def poll(self) -> Any:
        self.made += 1
        real = select.poll()
        counter = self

        class _Poller:
            def register(self, *args: Any) -> None:
                real.register(*args)

            def poll(self, timeout: int | None = None) -> list[tuple[int, int]]:
                counter.polls += 1
                return real.poll(timeout)

        return _Poller()


def test_rank_0_waiting_for_its_peers_sleeps_in_poll(
    base_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One peer joined, one connection silent, the last rank never comes: rank 0 waits
    for news of each (data, a hang-up, a new connection), never merely for room to write,
    so it polls a handful of times in its 0.3 s, not in a loop."""
    counter = _PollCounter()
    monkeypatch.setattr(bootstrap_module, "select", counter)
    done = threading.Event()

    def joined_and_silent() -> None:
        joined = wire.connect(base_path + "_0.sock", wire.Deadline.after(5.0))
        wire.send_all(joined, wire.pack_rank(1), wire.Deadline.after(5.0))
        silent = wire.connect(base_path + "_0.sock", wire.Deadline.after(5.0))
        with joined, silent:
            done.wait(10.0)

    thread = in_thread(joined_and_silent)
    try:
        err = _root_error(base_path, 3, init_timeout=0.3)
    finally:
        done.set()
        thread.join(10.0)
    assert isinstance(err, BroadcastTimeoutError)
    assert counter.polls <= 20, f"{counter.polls} polls in 0.3 s"


@pytest.mark.parametrize("init_timeout", [1e-9, 0.0008], ids=["passed", "under-1-ms"])
def test_rank_0_does_not_poll_once_its_init_deadline_passed(
    base_path: str, monkeypatch: pytest.MonkeyPatch, init_timeout: float
) -> None:
    """Alone and out of time, rank 0 fails without a poll of 0 ms; with under a
    millisecond left it waits that millisecond in one poll instead of looping."""
    counter = _PollCounter()
    monkeypatch.setattr(bootstrap_module, "select", counter)
    err = _root_error(base_path, 2, init_timeout=init_timeout)
    assert isinstance(err, BroadcastTimeoutError)
    if init_timeout < 1e-6:
        assert counter.polls == 0
    else:
        assert counter.made <= 3, f"{counter.made} waits within {init_timeout} s"


def test_a_rank_that_arrives_as_the_init_deadline_passes_still_joins(
    base_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 0's poll reports the last peer's rank just as the deadline passes (held here
    until it has): what poll reported is still handled, so the group is complete."""
    init_timeout = 0.3
    started = time.monotonic()
    real_poll = select.poll

    class _LatePoller:
        def __init__(self) -> None:
            self._real = real_poll()
            self._listener: int | None = None

        def register(self, fd: int, *args: Any) -> None:
            self._listener = fd if self._listener is None else self._listener
            self._real.register(fd, *args)

        def poll(self, timeout: int | None = None) -> list[tuple[int, int]]:
            ready = self._real.poll(timeout)
            if any(fd != self._listener for fd, _ in ready):  # a connection's data
                while time.monotonic() < started + init_timeout + 0.05:
                    time.sleep(0.001)  # polling with a deadline: let the deadline pass
            return ready

    proxy = _PollCounter()
    monkeypatch.setattr(proxy, "poll", _LatePoller, raising=False)
    monkeypatch.setattr(bootstrap_module, "select", proxy)
    probe: list[bytes] = []

    def last_peer() -> None:
        sock = wire.connect(base_path + "_0.sock", wire.Deadline.after(5.0))
        with sock:
            wire.send_all(sock, wire.pack_rank(1), wire.Deadline.after(5.0))
            probe.append(wire.recv_exact(sock, 1, wire.Deadline.after(5.0)))

    thread = in_thread(last_peer)
    bcast = CpuTpBroadcaster(BroadcasterConfig(init_timeout=init_timeout))
    try:
        bcast.initialize(0, 2, base_path)
        thread.join(10.0)
    finally:
        bcast.reset()
    assert probe == [bytes([wire.PROBE])]


def test_a_peer_of_an_abstract_group_counts_its_attempts_and_names_the_address(
    base_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No rank 0 in the abstract namespace: the peer retries until its connect deadline
    and says how many times it tried, naming the address as ss shows it (@name)."""
    sleeps: list[float] = []
    real_sleep = time.sleep

    def counted_sleep(seconds: float) -> None:
        sleeps.append(seconds)  # one between two attempts
        real_sleep(seconds)

    monkeypatch.setattr(bootstrap_module.time, "sleep", counted_sleep)
    config = BroadcasterConfig(
        connect_timeout=0.05, connect_retry_interval=0.01, abstract_namespace=True
    )
    with pytest.raises(BroadcastTimeoutError) as info:
        CpuTpBroadcaster(config).initialize(1, 2, base_path)
    err = info.value
    assert err.path == "@" + base_path + "_0.sock"
    assert len(sleeps) >= 1
    assert f"rank 0 was not reachable after {len(sleeps) + 1} attempts within " in err.reason


def test_a_peer_reset_before_the_probe_connects_again(base_path: str) -> None:
    """Rank 0's socket accepts, lets our rank arrive unread and closes (the peer sees
    ECONNRESET, nothing of the probe): a listener that never accepted us, so the peer
    connects again while its connect deadline lasts."""
    listener = wire.listen(base_path + "_0.sock", 4)
    stop = threading.Event()
    dropped: list[int] = []

    def resetting_root() -> None:
        while not stop.is_set():
            if not select.select([listener], [], [], 0.05)[0]:
                continue
            conn, _ = listener.accept()
            with conn:  # closed with the rank unread: the peer's read gets ECONNRESET
                select.select([conn], [], [], 5.0)
            dropped.append(1)

    thread = in_thread(resetting_root)
    config = BroadcasterConfig(connect_timeout=0.3, connect_retry_interval=0.01)
    try:
        with pytest.raises(PeerClosedError) as info:
            CpuTpBroadcaster(config).initialize(1, 2, base_path)
    finally:
        stop.set()
        thread.join(10.0)
        listener.close()
    assert info.value.errno_name == "ECONNRESET" and info.value.phase == "probe"
    assert len(dropped) >= 2  # connected again after the first reset


def test_a_world_size_that_is_not_an_int_is_refused_by_name() -> None:
    with pytest.raises(ConfigurationError) as info:
        CpuTpBroadcaster().initialize(0, "2", "/tmp/unused")  # type: ignore[arg-type]
    assert str(info.value) == "world_size must be an int, got '2' (type=str)"


def test_a_peer_of_an_abstract_group_names_the_address_when_rank_0_hangs_up(
    base_path: str,
) -> None:
    path = base_path + "_0.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(b"\0" + os.fsencode(path))
    listener.listen(1)

    def root() -> None:  # reads our rank, then closes without the probe
        conn, _ = listener.accept()
        with conn:
            wire.recv_exact(conn, 4, wire.Deadline.after(10.0))

    thread = in_thread(root)
    config = BroadcasterConfig(connect_timeout=5.0, init_timeout=5.0, abstract_namespace=True)
    try:
        with pytest.raises(PeerClosedError) as info:
            CpuTpBroadcaster(config).initialize(1, 2, base_path)
    finally:
        thread.join(10.0)
        listener.close()
    assert (info.value.phase, info.value.path) == ("probe", "@" + path)


@pytest.mark.skipif(os.geteuid() != 0, reason="a peer of another uid needs setuid (root)")
def test_a_peer_of_another_user_is_told_why_it_cannot_connect(base_path: str) -> None:
    """Rank 0's socket (in a 0700 directory of root) refuses a peer running as nobody:
    EACCES at connect, a SecurityError that says what to fix."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(base_path + "_0.sock")
    listener.listen(1)

    def peer(ctx: RankContext) -> tuple[object, ...]:
        os.setgid(65534)
        os.setuid(65534)  # nobody
        with pytest.raises(SecurityError) as info:
            CpuTpBroadcaster(BroadcasterConfig(connect_timeout=5.0)).initialize(1, 2, base_path)
        err = info.value
        return (err.phase, err.errno_name, err.reason)

    try:
        (seen,) = run_ranks(peer, 1, timeout=30.0).values()
    finally:
        listener.close()
    assert seen == (
        "connect",
        "EACCES",
        "permission denied connecting to rank 0's socket; it or its directory belongs to "
        "another user. Fix this and try again (same user, or a path you own).",
    )


def test_a_world_of_one_listens_nowhere(base_path: str) -> None:
    """Rank 0 alone has no peer to wait for: no socket file, nothing to connect to."""
    bcast = _world_of_one(base_path)
    try:
        assert not os.path.lexists(base_path + "_0.sock")
        bcast.broadcast(bytearray(1))
    finally:
        bcast.reset()


def test_rank_0_that_cannot_open_its_abort_pipe_leaves_no_socket_file(
    base_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_pipe(links: Any) -> None:
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    monkeypatch.setattr(bootstrap_module.Links, "open_abort_pipe", no_pipe)

    def peer() -> None:
        with contextlib.suppress(OSError, TimeoutError):
            sock = wire.connect(base_path + "_0.sock", wire.Deadline.after(5.0))
            with sock:
                wire.send_all(sock, wire.pack_rank(1), wire.Deadline.after(5.0))
                wire.recv_exact(sock, 1, wire.Deadline.after(5.0))

    thread = in_thread(peer)
    with pytest.raises(OSError, match="Too many open files"):
        CpuTpBroadcaster(BroadcasterConfig(init_timeout=10.0)).initialize(0, 2, base_path)
    thread.join(10.0)
    assert not os.path.lexists(base_path + "_0.sock")


def test_broadcast_errors_of_an_abstract_group_name_the_at_address(base_path: str) -> None:
    config = BroadcasterConfig(init_timeout=10.0, io_timeout=10.0, abstract_namespace=True)
    root, peer = CpuTpBroadcaster(config), CpuTpBroadcaster(config)
    thread = in_thread(lambda: root.initialize(0, 2, base_path))
    try:
        peer.initialize(1, 2, base_path)
        thread.join(10.0)
        peer.reset()
        with pytest.raises(PeerClosedError) as info:
            for _ in range(8):  # the first write may still fit the socket buffer
                root.broadcast(bytearray(1 << 20))
    finally:
        peer.reset()
        root.reset()
    assert info.value.path == "@" + base_path + "_0.sock"


def test_rank_0_of_an_abstract_group_refuses_a_name_in_use(base_path: str) -> None:
    holder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    holder.bind(b"\0" + os.fsencode(base_path + "_0.sock"))
    config = BroadcasterConfig(init_timeout=5.0, abstract_namespace=True)
    try:
        with pytest.raises(SecurityError) as info:
            CpuTpBroadcaster(config).initialize(0, 2, base_path)
    finally:
        holder.close()
    err = info.value
    assert (err.phase, err.errno_name, err.path) == (
        "bind",
        "EADDRINUSE",
        "@" + base_path + "_0.sock",
    )
    assert err.reason.startswith("another process holds this socket name") and err.rank == 0
