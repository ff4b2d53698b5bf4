"""``exec:`` adapter: the protocol round trip, error replies, and the driver's lifetime.

The native example's driver (``conformance/adapters/exec/cbcast_driver.c``) is the real
implementation behind most tests; ``_fake_driver.py`` scripts what a real one cannot be
made to do on demand (a detailed timeout error, a crash mid-call, a broken reply).
"""

from __future__ import annotations

import os
import pickle
import shlex
import signal
import sys
import threading
from pathlib import Path

import pytest

from tpbcast.conformance.adapters.exec import driver_path
from tpbcast.harness import load_implementation, run_ranks
from tpbcast.harness._exec_errors import (
    ExecBrokenError,
    ExecConfigurationError,
    ExecDriverError,
    ExecNotInitializedError,
    ExecTimeoutError,
)
from tpbcast.harness.adapter import (
    CapabilityMissing,
    ExecNotAsked,
    ImplementationLoadError,
    UnknownCapabilityError,
)

from ._ranks import process_state

FAKE = Path(__file__).with_name("_fake_driver.py")


@pytest.fixture(scope="session")
def native_exec() -> str:
    """``exec:<built driver>``; built once in the parent, before any fork."""
    return f"exec:{driver_path()}"


def _fake(mode: str) -> str:
    return f"exec:{shlex.join([sys.executable, str(FAKE), mode])}"


def test_load_reads_the_hello(native_exec):
    impl = load_implementation(native_exec)
    assert impl.name == "tpbcast-native-example"
    assert impl.version == "0.1.0"
    assert impl.capabilities == {
        "deadlines",
        "generation",
        "peer_credentials",
        "error_details",
        "multi_buffer",
    }


@pytest.mark.parametrize("world", [2, 3])
def test_protocol_round_trip(native_exec, world, tmp_path):
    impl = load_implementation(native_exec)
    sizes = [0, 1, 4096, 1 << 20]

    def target(ctx):
        bcast = impl.create()
        bcast.set_deadlines(connect=10, init=10, io=10)
        before = bcast.is_initialized(), bcast.generation
        bcast.initialize(ctx.rank, ctx.world_size, str(tmp_path / "g"))
        got = []
        for n in sizes:
            buf = bytearray(bytes([n % 251]) * n) if ctx.rank == 0 else bytearray(n)
            bcast.broadcast(buf)
            got.append(bytes(buf) == bytes([n % 251]) * n)
        pair = (
            [bytearray(b"ab"), bytearray(b"cde")] if ctx.rank == 0 else [bytearray(2), bytearray(3)]
        )
        bcast.broadcast(pair)
        during = bcast.is_initialized()
        bcast.reset()
        bcast.reset()  # idempotent
        return (
            before,
            got,
            bytes(pair[0] + pair[1]),
            during,
            bcast.is_initialized(),
            bcast.generation,
        )

    result = run_ranks(target, world, timeout=30, check_fds=True)
    for outcome in result.outcomes:
        assert outcome.value == ((False, 0), [True] * len(sizes), b"abcde", True, False, 2)
        assert outcome.leaked_fds == (), f"rank {outcome.rank} kept {outcome.leaked_fds}"
    assert not result.survivors


def test_error_replies_map_to_exceptions_with_details(native_exec, tmp_path):
    impl = load_implementation(native_exec)

    def target(ctx):
        bcast = impl.create()
        raised = []
        for call in (
            lambda: bcast.initialize(0, 0, str(tmp_path / "g")),
            lambda: bcast.broadcast(bytearray(1)),
        ):
            try:
                call()
            except Exception as exc:
                raised.append(exc)
        return raised

    config, not_init = run_ranks(target, 1, timeout=30).outcomes[0].value
    assert isinstance(config, ExecConfigurationError) and isinstance(config, ValueError)
    assert config.error_class == "config" and config.phase and config.rank == 0
    assert "world" in str(config)
    assert isinstance(not_init, ExecNotInitializedError) and isinstance(not_init, RuntimeError)


def test_every_detail_crosses_and_pickles():
    bcast = load_implementation(_fake("timeout")).create()
    with pytest.raises(ExecTimeoutError) as info:
        bcast.initialize(1, 2, "/x/g")
    exc = info.value
    assert isinstance(exc, TimeoutError)
    assert str(exc) == "rank 1 initialize: fake deadline passed"
    details = (exc.rank, exc.peer, exc.bytes_done, exc.bytes_total, exc.elapsed)
    assert details == (1, 0, 10, 100, 0.25)
    assert (exc.phase, exc.path, exc.errno_name) == ("initialize", "/x/g", "ETIMEDOUT")
    again = pickle.loads(pickle.dumps(exc))
    assert type(again) is ExecTimeoutError and again.errno_name == "ETIMEDOUT"
    bcast.close()


def test_driver_dies_with_its_rank_mid_call(native_exec, tmp_path):
    """Rank 0 of a 2-rank group waits in initialize for a peer that never comes (the
    driver is inside a C call, not reading its channel), then is SIGKILLed: PDEATHSIG
    must take the driver along; nobody is left in the group, nothing is orphaned."""
    impl = load_implementation(native_exec)
    pid_file = tmp_path / "driver.pid"

    def target(ctx):
        bcast = impl.create()
        bcast.set_deadlines(connect=60, init=60)
        pid_file.write_text(str(bcast.driver_pid))
        waiter = threading.Thread(
            target=bcast.initialize, args=(0, 2, str(tmp_path / "g")), daemon=True
        )
        waiter.start()
        sock = tmp_path / "g_0.sock"
        while not sock.exists():  # the driver is in its accept loop once this exists
            waiter.join(0.005)
        os.kill(os.getpid(), signal.SIGKILL)

    result = run_ranks(target, 1, timeout=30)
    assert result.outcomes[0].signal_name == "SIGKILL"
    assert not result.survivors, f"driver outlived its rank: {result.survivors}"
    assert process_state(int(pid_file.read_text())) in ("gone", "Z")


def test_driver_crash_mid_call_names_rank_and_command(tmp_path):
    spec = _fake("crash")
    impl = load_implementation(spec)

    def target(ctx):
        bcast = impl.create()
        bcast.initialize(ctx.rank, 2, str(tmp_path / "g"))
        errors = []
        for _ in range(2):
            try:
                bcast.broadcast(bytearray(8))
            except ExecDriverError as exc:
                errors.append(exc)
        return errors

    first, second = run_ranks(target, 1, timeout=30).outcomes[0].value
    text = str(first)
    assert "rank 0's exec: driver" in text
    assert spec.removeprefix("exec:") in text
    assert "was killed by SIGSEGV during broadcast" in text
    assert str(second) == text, "a later call must repeat the failure, not hang"
    assert first.rank == 0 and first.command[-1] == "crash"


def test_a_broken_reply_is_a_driver_error():
    bcast = load_implementation(_fake("garbage")).create()
    with pytest.raises(ExecDriverError, match=r"broke the protocol in its broadcast reply"):
        bcast.broadcast(bytearray(4))
    bcast.close()


def _refusals() -> list[tuple[str, object]]:
    import numpy as np

    strided = np.zeros((4, 4), dtype=np.uint8)[:, ::2]
    return [
        ("read_only_buffer", lambda b: b.broadcast(b"abcd")),
        ("read_only_buffer", lambda b: b.broadcast([bytearray(2), b"cd"])),  # none sent
        ("contiguous_buffer", lambda b: b.broadcast(strided)),
        ("int_range", lambda b: b.broadcast(bytearray(4), 2**31)),
        ("int_range", lambda b: b.initialize(1, 2**31, "/x/g")),
        ("int_range", lambda b: b.initialize(-(2**31) - 1, 2, "/x/g")),
        ("nul_in_path", lambda b: b.initialize(1, 2, "/x/g\0h")),
        ("deadline_range", lambda b: b.set_deadlines(io=-1.0)),
        ("deadline_range", lambda b: b.set_deadlines(connect=float("nan"))),
    ]


@pytest.mark.parametrize("index", range(9))
def test_a_check_made_before_the_driver_is_unsupported_and_asks_nothing(index):
    """What the adapter refuses itself is no answer of the implementation: an
    ``ExecNotAsked`` (a ``CapabilityMissing``: the suite says UNSUPPORTED, never PASS),
    and the driver got no request (the fake counts them in its generation reply)."""
    check, call = _refusals()[index]
    bcast = load_implementation(_fake("ok")).create()
    bcast.initialize(1, 2, "/x/g")
    before = bcast.generation
    with pytest.raises(ExecNotAsked) as info:
        call(bcast)
    assert isinstance(info.value, CapabilityMissing)
    assert info.value.check == check and info.value.capability == f"exec:{check}"
    text = str(info.value)
    assert "checked by the exec adapter before the driver; the driver was never asked" in text
    assert str(FAKE) in text, "the message names the driver"
    assert bcast.generation == before, "a refused call reached the driver"
    again = pickle.loads(pickle.dumps(info.value))
    assert type(again) is ExecNotAsked and str(again) == text
    buf = bytearray(b"wxyz")
    bcast.broadcast(buf)  # the fake echoes: the channel is still in step
    assert buf == b"wxyz" and bcast.generation == before + 1
    bcast.close()


def test_a_failed_reset_reaches_the_caller_as_an_error():
    """Protocol 1, ``R`` answered with an error reply: the rank gets the class's exception
    with its details, like any other call (issue 24: a throwing C++ reset)."""
    bcast = load_implementation(_fake("reset_fails")).create()
    with pytest.raises(ExecBrokenError, match=r"reset: close\(7\) failed") as info:
        bcast.reset()
    assert (info.value.rank, info.value.phase, info.value.errno_name) == (3, "reset", "EIO")
    assert bcast.is_initialized() is False, "the channel is still in step"
    bcast.close()


@pytest.mark.parametrize(
    ("spec", "error", "match"),
    [
        ("exec:", ImplementationLoadError, "no command after 'exec:'"),
        ("exec:'unclosed", ImplementationLoadError, "does not parse"),
        ("exec:/nonexistent/driver", ImplementationLoadError, "could not start"),
        (_fake("caps=tensors"), ImplementationLoadError, "cannot carry"),
        (_fake("caps=deadline"), UnknownCapabilityError, "did you mean 'deadlines'"),
    ],
)
def test_load_errors_name_the_spec(spec, error, match):
    with pytest.raises(error, match=match):
        load_implementation(spec)


def test_the_plugin_option_accepts_an_exec_spec():
    from tpbcast.fixtures._options import validate_impl

    assert validate_impl(" exec:./drv --x ", "--tpbcast-impl") == "exec:./drv --x"
    for bad in ("exec:", "exec:   "):
        with pytest.raises(pytest.UsageError, match=r"or 'exec:<command \.\.\.>'"):
            validate_impl(bad, "--tpbcast-impl")
