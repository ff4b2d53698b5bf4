"""``exec:`` and SignalStorm: a storm aimed at a rank reaches the driver that runs its code.

The implementation's blocking syscalls run in the driver process, so a storm that only
signals the rank's Python thread would not test them. The driver declares the signals it
takes in its hello (``storm_signals``); the adapter registers it as a companion of the
rank; the storm signals every companion that declared the signal, and none that did not.
Each test proves where the signals went before judging anything else.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import shlex
import signal
import struct
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from tpbcast.conformance.adapters.exec import driver_path
from tpbcast.harness import FaultPlan, RankContext, SignalStorm, load_implementation, run_ranks
from tpbcast.harness._companions import current, register, unregister
from tpbcast.harness._exec_protocol import ProtocolError, Reader, decode_hello
from tpbcast.harness.adapter import ImplementationLoadError

from ._ranks import payload, process_state

FAKE = Path(__file__).with_name("_fake_driver.py")
SIZES = (0, 1, 4097, 1 << 20, 8 << 20)
STORM_THREAD = "tpbcast-signal-storm"
STORM_BUDGET = 30.0  # how long a test waits for a storm thread to end (bounded)
# The kit's line on stderr when its channel ends (tpbcast_driver.h, tpbcast_storm_report_).
HANDLED = re.compile(
    r"tpbcast_driver: pid (\d+) handled storm signals: SIGUSR1 (\d+), SIGUSR2 (\d+); "
    r"its channel I/O retried EINTR (\d+) time"
)


@pytest.fixture(scope="session")
def native_exec() -> str:
    """``exec:<built driver>``; built once in the parent, before any fork."""
    return f"exec:{driver_path()}"


def _fake(mode: str) -> str:
    return f"exec:{shlex.join([sys.executable, str(FAKE), mode])}"


def _join_storms() -> None:
    """Wait (bounded) until this rank's storm threads ended: each writes its record last."""
    for thread in [t for t in threading.enumerate() if t.name == STORM_THREAD]:
        thread.join(STORM_BUDGET)
        assert not thread.is_alive(), f"the signal storm still runs after {STORM_BUDGET}s"


def _storming() -> bool:
    return any(t.name == STORM_THREAD for t in threading.enumerate())


def _caught(pid: int) -> int:
    """``SigCgt`` of ``/proc/<pid>/status``: the mask of signals with a handler."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("SigCgt:"):
                return int(line.split()[1], 16)
    raise AssertionError(f"no SigCgt line in /proc/{pid}/status")


def _storm_done(record_detail: str) -> dict[str, Any]:
    """The details of a ``signal-storm-done`` record (``k=v`` reprs of ints and dicts)."""
    fields = dict(re.findall(r"(\w+)=(\{[^}]*\}|'[^']*'|\d+)", record_detail))
    return {k: ast.literal_eval(v) for k, v in fields.items()}


def _done_records(outcome: Any) -> list[dict[str, Any]]:
    return [_storm_done(f.detail) for f in outcome.faults if f.action == "signal-storm-done"]


def _storm_rank(ctx: RankContext, impl: Any) -> dict[str, Any]:
    """Create the broadcaster (its driver says hello and is registered), fire the storm,
    then broadcast every size, round after round while the storm lasts (at least twice;
    rank 0 decides with a 1-byte flag). Returns what the test judges."""
    bcast = impl.create()
    driver = bcast.driver_pid
    caught = _caught(driver)
    bcast.set_deadlines(connect=20, init=20, io=20)
    ctx.point("storm")
    bcast.initialize(ctx.rank, ctx.world_size, ctx.base_path)
    digests: list[str] = []
    rounds = during_storm = 0
    while True:
        flag = bytearray([1 if rounds < 2 or (_storming() and rounds < 50) else 0])
        if ctx.rank != 0:
            flag = bytearray(1)
        bcast.broadcast(flag)
        if not flag[0]:
            break
        storming = _storming()
        for size in SIZES:
            buf = bytearray(payload(rounds, size) if ctx.rank == 0 else b"\xee" * size)
            bcast.broadcast(buf)
            digests.append(hashlib.sha256(buf).hexdigest())
        rounds += 1
        during_storm += storming
    _join_storms()
    alive = process_state(driver) not in ("gone", "Z")
    bcast.reset()
    bcast.close()  # the driver writes its count of handled signals, then exits
    return {
        "driver": driver,
        "caught": caught,
        "digests": digests,
        "rounds": rounds,
        "during_storm": during_storm,
        "alive": alive,
    }


def test_a_storm_reaches_the_exec_driver_and_every_byte_arrives(native_exec):
    """(a) Both ranks of a native exec: group are stormed (SIGUSR2, 200 x 0.5 ms) while they
    broadcast 0 B .. 8 MiB: each storm record names the rank's driver with signals sent to
    it, the drivers stayed alive, and every byte of every round is right."""
    impl = load_implementation(native_exec)
    storm = SignalStorm(signal.SIGUSR2, count=200, interval=0.0005)
    plan = FaultPlan().at(0, "storm", storm).at(1, "storm", storm)
    result = run_ranks(_storm_rank, 2, args=(impl,), timeout=90, faults=plan)
    result.raise_for_failure()
    rounds = result.outcomes[0].value["rounds"]
    expected = [
        hashlib.sha256(payload(r, size)).hexdigest() for r in range(rounds) for size in SIZES
    ]
    for outcome in result.outcomes:
        value = outcome.value
        (done,) = _done_records(outcome)
        assert done["sent"] > 0
        assert done["companions_sent"].get(value["driver"], 0) > 0, (
            f"rank {outcome.rank}: the storm did not signal driver pid {value['driver']}: {done}"
        )
        assert "companions_not_signalled" not in done, done
        assert value["alive"], f"rank {outcome.rank}: driver {value['driver']} died in the storm"
        assert value["digests"] == expected, f"rank {outcome.rank}: wrong bytes"
    assert result.outcomes[0].value["during_storm"] > 0, "no round ran while the storm lasted"
    assert not result.survivors
    for outcome in result.outcomes:  # the drivers' own count (see the next test)
        counts = {int(p): int(u2) for p, _, u2, _ in HANDLED.findall(outcome.stderr)}
        assert counts.get(outcome.value["driver"], 0) > 0, outcome.stderr


def _storm_then_close(ctx: RankContext, impl: Any, broadcast: bool) -> dict[str, Any]:
    """One rank: create (hello, registration), storm, wait for the storm's end, one echo
    broadcast when asked (the fake echoes; the channel must still be in step), close."""
    bcast = impl.create()
    driver = bcast.driver_pid
    caught = _caught(driver)
    ctx.point("storm")
    _join_storms()
    alive = process_state(driver) not in ("gone", "Z")
    echoed = None
    if broadcast:
        bcast.initialize(1, 2, ctx.base_path)  # the fake: any call succeeds
        buf = bytearray(b"still here")
        bcast.broadcast(buf)
        echoed = bytes(buf)
    bcast.close()
    return {"driver": driver, "caught": caught, "alive": alive, "echoed": echoed}


def test_the_driver_itself_handles_the_storm(native_exec):
    """(b) Proof from the driver's side, not the rank's: the kit has handlers for SIGUSR1
    and SIGUSR2 (SigCgt) and, when its channel ends, reports how many it handled and how
    often its own channel I/O saw EINTR. The storm hits the driver idle in ``read`` of the
    next request: both counts are > 0 for the rank's own driver (EINTR > 0 also proves the
    handler has no SA_RESTART, with which the kernel restarts the read unseen)."""
    impl = load_implementation(native_exec)
    plan = FaultPlan().at(0, "storm", SignalStorm(signal.SIGUSR2, count=100, interval=0.0005))
    result = run_ranks(_storm_then_close, 1, args=(impl, False), timeout=60, faults=plan)
    result.raise_for_failure()
    (outcome,) = result.outcomes
    value = outcome.value
    mask = (1 << (signal.SIGUSR1 - 1)) | (1 << (signal.SIGUSR2 - 1))
    assert value["caught"] & mask == mask, f"driver SigCgt {value['caught']:#x}"
    (done,) = _done_records(outcome)
    assert done["companions_sent"].get(value["driver"], 0) > 0, done
    counts = {int(p): tuple(map(int, n)) for p, *n in HANDLED.findall(outcome.stderr)}
    assert value["driver"] in counts, (
        f"driver {value['driver']} reported nothing: {outcome.stderr!r}"
    )
    usr1, usr2, eintr = counts[value["driver"]]
    assert usr2 > 0 and usr1 == 0, counts
    assert eintr > 0, f"the driver's blocked read never saw EINTR (SA_RESTART?): {counts}"
    assert usr2 <= done["companions_sent"][value["driver"]]  # signals coalesce, never multiply


def test_a_driver_that_declares_no_storm_signals_is_not_signalled():
    """(c) The fake driver's hello has no ``storm_signals`` (an older driver): it is not
    signalled (SIGUSR2's default action would kill it), the record says why, and it still
    answers afterwards."""
    impl = load_implementation(_fake("ok"))
    plan = FaultPlan().at(0, "storm", SignalStorm(signal.SIGUSR2, count=50, interval=0.0005))
    result = run_ranks(_storm_then_close, 1, args=(impl, True), timeout=60, faults=plan)
    result.raise_for_failure()
    (outcome,) = result.outcomes
    value = outcome.value
    (done,) = _done_records(outcome)
    assert done["sent"] == 50
    assert done["companions_sent"] == {}, done
    assert done["companions_not_signalled"] == {value["driver"]: "SIGUSR2 not declared"}, done
    assert value["alive"] and value["echoed"] == b"still here", value


def _hello(tail: bytes) -> bytes:
    def string(text: bytes) -> bytes:
        return struct.pack("<I", len(text)) + text

    return struct.pack("<i", 1) + string(b"drv") + string(b"1") + string(b"deadlines") + tail


def test_hello_storm_signals_are_optional_and_checked():
    def decode(tail: bytes) -> frozenset[int]:
        return decode_hello(Reader(_hello(tail), "hello")).storm_signals

    assert decode(b"") == frozenset()  # an older driver: none
    assert decode(struct.pack("<I", 0)) == frozenset()
    both = b"SIGUSR1 SIGUSR2"
    assert decode(struct.pack("<I", len(both)) + both) == {signal.SIGUSR1, signal.SIGUSR2}
    for bad, match in ((b"SIGKILL", "no handler can take"), (b"USR1", "not a signal name")):
        with pytest.raises(ProtocolError, match=match):
            decode(struct.pack("<I", len(bad)) + bad)


def test_the_native_driver_declares_its_storm_signals(native_exec):
    bcast = load_implementation(native_exec).create()
    try:
        (mine,) = [c for c in current() if c.pid == bcast.driver_pid]
        assert mine.storm_signals == {signal.SIGUSR1, signal.SIGUSR2}
    finally:
        bcast.close()
    assert bcast.driver_pid not in {c.pid for c in current()}, "closed, still registered"


def _forked_child_sees(ctx: RankContext) -> tuple[int, int, tuple[int, ...]]:
    """Register this rank itself (declaring SIGUSR1), then ask a forked child what it sees."""
    me = os.getpid()
    register(me, frozenset({signal.SIGUSR1}))
    try:
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover - forked child, ends in os._exit
            from tpbcast.harness._companions import send

            seen = len(current())
            sent = send(signal.SIGUSR1).sent
            os.write(write, struct.pack("<ii", seen, len(sent)))
            os._exit(0)
        os.close(write)
        data = os.read(read, 8)
        os.close(read)
        os.waitpid(child, 0)
        seen, sent = struct.unpack("<ii", data)
        return seen, sent, tuple(c.pid for c in current())
    finally:
        unregister(me)


def test_a_forked_child_does_not_inherit_the_companions():
    (outcome,) = run_ranks(_forked_child_sees, 1, timeout=30).outcomes
    seen, sent, parent_sees = outcome.value
    assert (seen, sent) == (0, 0), "a forked child must see (and signal) none of them"
    assert parent_sees == (outcome.pid,)


def test_a_bad_storm_signal_in_the_hello_is_a_load_error(tmp_path):
    """The same check at load time, through a driver: a named error, not a storm that
    kills the driver later."""
    script = tmp_path / "drv.py"
    script.write_text(
        "import os, struct, sys\n"
        "def s(b): return struct.pack('<I', len(b)) + b\n"
        "os.read(0, 5)\n"
        "body = b'\\x00' + struct.pack('<i', 1) + s(b'x') + s(b'1') + s(b'') + s(b'SIGSTOP')\n"
        "os.write(1, struct.pack('<I', len(body)) + body)\n"
        "os.read(0, 1)\n"
    )
    with pytest.raises(ImplementationLoadError, match="SIGSTOP, which no handler can take"):
        load_implementation(f"exec:{shlex.join([sys.executable, str(script)])}")
