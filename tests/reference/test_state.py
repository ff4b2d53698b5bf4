"""State machine, argument checks, errors, config, base paths and the adapter (in-process)."""

from __future__ import annotations

import math
import os
import pickle
import sys
import threading
import types

import pytest

import tpbcast.reference_impl as ref
from tpbcast.harness import RankContext, run_ranks
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
    make_base_path,
)
from tpbcast.reference_impl.conformance_adapter import CAPABILITIES, make

from ._helpers import RUN, fast_config, needs_numpy


def test_broadcast_before_initialize_raises() -> None:
    b = CpuTpBroadcaster()
    with pytest.raises(NotInitializedError, match="before initialize"):
        b.broadcast(bytearray(4))
    with pytest.raises(NotInitializedError):
        b.broadcast(bytearray(0))  # even a no-op-sized call is refused


def test_root_other_than_zero_raises_even_at_tp1(base_path: str) -> None:
    b = CpuTpBroadcaster()
    b.initialize(0, 1, base_path)
    with pytest.raises(ConfigurationError, match="root must be 0") as info:
        b.broadcast(bytearray(0), root=1)
    assert info.value.phase == "broadcast"
    assert not b.statistics().broken  # a bad argument does not break the stream
    b.broadcast(bytearray(3))
    b.reset()


def test_reinit_identical_is_noop_and_different_raises(base_path: str) -> None:
    b = CpuTpBroadcaster()
    b.initialize(0, 1, base_path)
    b.initialize(0, 1, base_path)  # upstream's TP=1 quirk would raise here
    with pytest.raises(ReinitMismatchError) as info:
        b.initialize(0, 1, base_path + "x")
    text = str(info.value)
    assert f"base_path={base_path!r}" in text and f"base_path={base_path + 'x'!r}" in text
    assert "was rank=0 world_size=1" in text
    b.reset()
    b.initialize(0, 1, base_path + "x")  # a new path after reset works
    assert b.is_initialized()
    b.reset()


def test_reset_is_idempotent_and_bumps_generation(base_path: str) -> None:
    b = CpuTpBroadcaster()
    assert b.generation == 0
    b.reset()
    b.reset()
    assert b.generation == 2  # also when uninitialized
    b.initialize(0, 1, base_path)
    assert b.generation == 2  # initialize leaves it alone
    b.reset()
    assert b.generation == 3
    assert not b.is_initialized()
    stats = b.statistics()
    assert (stats.rank, stats.world_size, stats.base_path, stats.initialized) == (
        None,
        None,
        None,
        False,
    )


@pytest.mark.parametrize(
    ("rank", "world_size", "path", "match"),
    [
        (0, 0, "/tmp/x/g", "world_size must be >= 1"),
        (2, 2, "/tmp/x/g", "0 <= rank < world_size"),
        (-1, 2, "/tmp/x/g", "0 <= rank < world_size"),
        (0, 2, "", "non-empty"),
        (True, 2, "/tmp/x/g", "rank must be an int"),
        (0, 2, "/tmp/x\0/g", "NUL"),
        (0, 2, "/tmp/" + "a" * 101, "limit is 107"),
    ],
)
def test_argument_checks_come_first(rank: int, world_size: int, path: str, match: str) -> None:
    b = CpuTpBroadcaster()
    with pytest.raises(ConfigurationError, match=match):
        b.initialize(rank, world_size, path)
    assert not b.is_initialized()


def test_path_length_limit_is_checked_on_every_rank() -> None:
    base = "/tmp/" + "b" * (107 - len("/tmp/") - len("_0.sock") + 1)  # 108 bytes
    assert len(base + "_0.sock") == 108
    for rank in (0, 1):
        with pytest.raises(ConfigurationError, match="108 bytes, the limit is 107") as info:
            CpuTpBroadcaster().initialize(rank, 2, base)
        assert info.value.path == base + "_0.sock"


def test_error_message_reads_well_and_pickles() -> None:
    err = PeerClosedError(
        "peer closed the connection",
        rank=0,
        peer=2,
        phase="broadcast",
        bytes_done=4096,
        bytes_total=8388608,
        elapsed=0.52,
        path="/tmp/x/g_0.sock",
        errno_name="EPIPE",
        action="write to peer 2",
    )
    assert str(err) == (
        "rank 0: write to peer 2 failed in phase 'broadcast' after 4096/8388608 bytes, "
        "0.52 s: peer closed the connection (EPIPE) [path /tmp/x/g_0.sock]"
    )
    for exc in (
        err,
        BroadcastTimeoutError("deadline passed", rank=1, phase="probe", errno_name="ETIMEDOUT"),
        SecurityError("loose dir", path="/p"),
        HandshakeError("bad peer rank -1 (world_size 4)", rank=0),
        ConfigurationError("bad"),
        BrokenBroadcasterError("broken", rank=3),
    ):
        back = pickle.loads(pickle.dumps(exc))
        assert type(back) is type(exc)
        assert str(back) == str(exc)
        assert back.fields() == exc.fields()


def test_hierarchy_keeps_stdlib_catch_sites() -> None:
    assert issubclass(ConfigurationError, ValueError)
    assert issubclass(NotInitializedError, RuntimeError)
    assert issubclass(BroadcastTimeoutError, TimeoutError)
    assert issubclass(SecurityError, PermissionError)
    assert issubclass(PeerClosedError, ConnectionError)
    for cls in (
        ConfigurationError,
        ReinitMismatchError,
        NotInitializedError,
        HandshakeError,
        PeerClosedError,
        BroadcastTimeoutError,
        SecurityError,
        BrokenBroadcasterError,
    ):
        assert issubclass(cls, BroadcastError)


@pytest.mark.parametrize(
    "changes",
    [
        {"connect_timeout": 0},
        {"init_timeout": -1.0},
        {"io_timeout": math.inf},
        {"connect_retry_interval": math.nan},
        {"init_timeout": None},
        {"allowed_uids": (-1,)},
        {"abstract_namespace": 1},
    ],
)
def test_config_validation(changes: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        BroadcasterConfig(**changes)  # type: ignore[arg-type]


def test_config_defaults_and_uids() -> None:
    cfg = BroadcasterConfig()
    assert (cfg.connect_timeout, cfg.init_timeout, cfg.io_timeout) == (120.0, 120.0, 300.0)
    assert cfg.connect_retry_interval == 0.05
    assert BroadcasterConfig(io_timeout=None).io_timeout is None
    assert cfg.accepted_uids(1000) == frozenset({1000})
    assert BroadcasterConfig(allowed_uids=[5]).accepted_uids(1) == {1, 5}  # type: ignore[arg-type]
    assert BroadcasterConfig(require_same_uid=False).accepted_uids(1) is None
    with pytest.raises(AttributeError):
        cfg.io_timeout = 1.0  # type: ignore[misc]


def test_make_base_path_precedence_and_sanitising(tmp_path: object) -> None:
    env = {"TMPDIR": "/tmp"}
    default = make_base_path(environ=env)
    assert default == f"/tmp/tpbcast_{os.geteuid()}/tp_p{os.getppid()}_dp0"
    assert make_base_path(3, environ=env).endswith("_dp3")
    keyed_a = make_base_path(environ=env, key="10.0.0.1:29500")
    keyed_b = make_base_path(environ=env, key="10.0.0.1:29501")
    assert keyed_a != keyed_b != default
    upstream = {"RTP_LLM_CPU_TP_BROADCASTER_ID": "a b/c", "RTP_LLM_CPU_TP_BROADCASTER_DIR": "/d"}
    assert make_base_path(environ=upstream) == "/d/tp_a_b_c_dp0"
    ours = {**upstream, "TPBCAST_SESSION_ID": "s1", "TPBCAST_SOCKET_DIR": "/e"}
    assert make_base_path(environ=ours) == "/e/tp_s1_dp0"
    assert make_base_path(session_id="x", base_dir="/f", environ=ours) == "/f/tp_x_dp0"
    long_id = make_base_path(session_id="é" * 200, base_dir="/f", environ={})
    name = os.path.basename(long_id)
    assert len(name) <= len("tp__dp0") + 24 and name.isascii()
    with pytest.raises(ConfigurationError, match="limit is 107"):
        make_base_path(base_dir="/" + "d" * 100, environ={})
    with pytest.raises(ConfigurationError):
        make_base_path(-1, environ={})
    assert not os.path.exists("/f/tp_x_dp0_0.sock")  # pure: it creates nothing


def test_adapter_reports_the_documented_default_deadlines() -> None:
    """TIME-7's member: DESIGN.md's defaults (120/120/300 s), untouched by set_deadlines."""
    adapter = make()
    documented = {"connect": 120.0, "init": 120.0, "io": 300.0}
    assert dict(adapter.default_deadlines()) == documented
    cfg = BroadcasterConfig()
    assert documented == {
        "connect": cfg.connect_timeout,
        "init": cfg.init_timeout,
        "io": cfg.io_timeout,
    }
    adapter.set_deadlines(connect=1.0, init=2.0, io=math.inf)
    assert dict(adapter.default_deadlines()) == documented
    assert adapter.config.io_timeout is None  # the deadlines changed, the defaults did not


def test_adapter_make_base_path_is_the_helper() -> None:
    """The base_path capability's member delegates to make_base_path, argument for argument."""
    adapter = make()
    env = {"TMPDIR": "/t", "TPBCAST_SESSION_ID": "a b"}
    assert (
        adapter.make_base_path(environ=env)
        == make_base_path(environ=env)
        == (f"/t/tpbcast_{os.geteuid()}/tp_a_b_dp0")
    )
    assert adapter.make_base_path(2, session_id="s", base_dir="/d", environ={}) == "/d/tp_s_dp2"
    assert adapter.make_base_path(1, environ={}, key="k") == make_base_path(1, environ={}, key="k")
    with pytest.raises(ConfigurationError, match="limit is 107"):
        adapter.make_base_path(base_dir="/" + "d" * 100, environ={})
    assert "base_path" in adapter.capabilities


def test_adapter_contract_members(base_path: str) -> None:
    adapter = make()
    assert adapter.name == "tpbcast-reference"
    assert isinstance(adapter.version, str) and adapter.version
    assert (
        set(adapter.capabilities)
        == set(CAPABILITIES)
        >= {
            "deadlines",
            "generation",
            "abstract_namespace",
            "tensors",
            "multi_buffer",
            "peer_credentials",
            "secure_dir",
            "error_details",
        }
    )
    adapter.set_deadlines(connect=1.5, init=2.5, io=math.inf)
    assert (adapter.config.connect_timeout, adapter.config.init_timeout) == (1.5, 2.5)
    assert adapter.config.io_timeout is None
    adapter.set_deadlines(io=3.0)
    assert adapter.config.io_timeout == 3.0 and adapter.config.connect_timeout == 1.5
    adapter.set_abstract_namespace(True)
    assert adapter.config.abstract_namespace
    assert make() is not make()
    adapter.initialize(0, 1, base_path)
    assert adapter.is_initialized()
    adapter.broadcast(bytearray(2), root=0)
    adapter.reset()
    adapter.reset()
    assert adapter.generation == 2 and not adapter.is_initialized()


def test_facade_exports() -> None:
    public = {
        name
        for name, value in vars(ref).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name != "annotations"
    }
    assert public == set(ref.__all__)


def test_instance_is_a_process_singleton() -> None:
    assert ref.instance() is ref.instance()


def test_forked_child_forgets_inherited_state(base_path: str) -> None:
    """A child must not reuse (or unlink) what its parent set up."""

    def rank_main(ctx: RankContext) -> tuple[bool, int]:
        rank = ctx.rank
        b = CpuTpBroadcaster(fast_config())
        b.initialize(rank, 2, base_path)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            forgot = not b.is_initialized()
            b.reset()  # as upstream's tests do in every child: must not touch the parent's
            os._exit(0 if forgot else 1)
        os.close(w)
        os.close(r)
        _, status = os.waitpid(pid, 0)
        path_still_there = os.path.exists(base_path + "_0.sock")
        data = bytearray(b"ok" if rank == 0 else 2)
        b.broadcast(data)  # the parent's link still works after the child left
        b.reset()
        return (path_still_there or rank != 0) and data == b"ok", os.waitstatus_to_exitcode(status)

    assert run_ranks(rank_main, 2, **RUN).values() == [(True, 0), (True, 0)]


def test_reinit_rules_in_a_group(short_dir: str) -> None:
    base_a = os.path.join(short_dir, "a")
    base_b = os.path.join(short_dir, "b")

    def rank_main(ctx: RankContext) -> list[bytes]:
        rank = ctx.rank
        b = CpuTpBroadcaster(fast_config())
        got = []
        for base in (base_a, base_a, base_b):  # same path again, then a new one
            b.initialize(rank, 2, base)
            b.initialize(rank, 2, base)  # identical: a no-op, also at TP=2
            with pytest.raises(ReinitMismatchError):
                b.initialize(rank, 3, base)
            buf = bytearray(base[-1].encode() if rank == 0 else 1)
            b.broadcast(buf)
            got.append(bytes(buf))
            b.reset()
        assert b.generation == 3
        return got

    assert run_ranks(rank_main, 2, **RUN).values() == [[b"a", b"a", b"b"]] * 2


@needs_numpy
def test_unusable_buffers_are_refused_without_breaking_the_stream(base_path: str) -> None:
    def rank_main(ctx: RankContext) -> bytes:
        import numpy as np

        rank = ctx.rank

        b = CpuTpBroadcaster(fast_config())
        b.initialize(rank, 2, base_path)
        frozen = np.zeros(4, np.uint8)
        frozen.flags.writeable = False
        bad: list[object] = ["text", np.array([object()]), [bytearray(1), 3]]
        if rank:
            bad += [b"bytes", memoryview(b"ro"), frozen]
        for obj in bad:
            with pytest.raises(ConfigurationError):
                b.broadcast(obj)
        assert not b.statistics().broken
        if rank:
            with pytest.raises(ConfigurationError, match="read-only"):
                b.broadcast(b"xy")
        buf = bytearray(b"fine" if rank == 0 else 4)
        b.broadcast(buf)  # nothing was sent by the refused calls: still in sync
        b.reset()
        return bytes(buf)

    assert run_ranks(rank_main, 2, **RUN).values() == [b"fine", b"fine"]


def test_adapter_loads_through_the_harness_contract() -> None:
    harness = pytest.importorskip("tpbcast.harness")
    impl = harness.load_implementation("tpbcast.reference_impl.conformance_adapter:make")
    assert impl.name == "tpbcast-reference"
    assert impl.capabilities == CAPABILITIES
    assert all(impl.supports(cap) for cap in CAPABILITIES)


def test_overlapping_broadcast_is_refused_and_reset_aborts(base_path: str) -> None:
    """Another thread may not write into a running broadcast; its reset() aborts it.

    The reset waits for the aborted broadcast to leave before closing anything,
    so the broadcast never touches a closed (or reused) fd.
    """
    size = 8 << 20

    def rank_main(ctx: RankContext) -> object:
        import threading
        import time

        b = CpuTpBroadcaster(fast_config(io_timeout=30.0))
        b.initialize(ctx.rank, 2, base_path)
        if ctx.rank == 1:
            ctx.wait("tried")  # never reads: rank 0 stays blocked in its write
            b.reset()
            return "peer"
        seen: dict[str, object] = {}

        def other_thread() -> None:
            deadline = time.monotonic() + 10
            while b._busy != "broadcast" and time.monotonic() < deadline:  # white-box
                time.sleep(0.001)
            try:
                b.broadcast(bytearray(1))
            except BroadcastError as exc:
                seen["overlap"] = str(exc)
            start = time.monotonic()
            b.reset()  # returns once the in-flight broadcast has stopped
            seen["reset_took"] = time.monotonic() - start
            seen["after_reset"] = b.is_initialized()
            ctx.notify("tried")

        worker = threading.Thread(target=other_thread)
        worker.start()
        with pytest.raises(BroadcastError) as info:
            b.broadcast(bytearray(size))
        worker.join(15)
        assert not worker.is_alive()
        seen["aborted"] = info.value
        return seen

    seen, peer = run_ranks(rank_main, 2, **RUN).values()
    assert peer == "peer"
    assert "broadcast() called while broadcast() is running" in seen["overlap"]
    aborted = seen["aborted"]
    assert type(aborted) is BroadcastError and "aborted: reset()" in str(aborted)
    assert aborted.errno_name == "ECANCELED" and aborted.peer == 1
    assert seen["after_reset"] is False and seen["reset_took"] < 5


def test_reset_from_another_thread_never_races_a_call_entering_or_leaving(base_path: str) -> None:
    """reset() from another thread works whatever the other thread is doing.

    A call that has just claimed the instance (or is just leaving it) used to be
    invisible to reset(), which then raised "reset() called while None() is
    running"; refusals must name the call that is really running.
    """
    b = CpuTpBroadcaster()
    stop = threading.Event()
    refusals: list[str] = []

    def hammer() -> None:
        while not stop.is_set():
            try:
                b.broadcast(bytearray(1))
            except NotInitializedError:
                pass
            except BroadcastError as exc:
                refusals.append(str(exc))

    reset_errors: list[str] = []
    init_refusals: list[str] = []
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: widen every window
    worker = threading.Thread(target=hammer, daemon=True)
    worker.start()
    try:
        for _ in range(20_000):
            try:
                b.initialize(0, 1, base_path)
            except BroadcastError as exc:
                init_refusals.append(str(exc))
            try:
                b.reset()
            except BroadcastError as exc:
                reset_errors.append(str(exc))
    finally:
        stop.set()
        sys.setswitchinterval(old_interval)
        worker.join(10)
    assert not worker.is_alive()
    # the threads really overlapped: broadcasts were refused while reset() ran
    assert any("while reset() is running" in text for text in refusals), refusals[:3]
    assert reset_errors == [], reset_errors[:3]
    assert all("initialize() called while broadcast() is running" in t for t in init_refusals)
    assert not [t for t in refusals if "None()" in t], "a refusal named no running call"
