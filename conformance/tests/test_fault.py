"""FAULT: dead, stalled or closing ranks; errors that name who failed and why."""

from __future__ import annotations

import os
import signal
import struct

import pytest

from tpbcast.conformance.plugin import require
from tpbcast.harness import Exit, FaultPlan, Kill, Pause

from . import _support as s
from ._support import rogue_peer, rogue_root


def _assert_clean(raised, who):
    """FAULT-3, judged on any closed-peer error a test provoked (cite FAULT-3 with it)."""
    text = raised.message.lower()
    assert "success" not in text and "errno 0" not in text, s.clause(
        "FAULT-3", f"{who}: no error says 'Success' or errno 0", raised
    )
    assert any(word in text for word in ("clos", "eof", "reset", "broken pipe", "epipe")), s.clause(
        "FAULT-3", f"{who}: EOF/EPIPE/ECONNRESET is reported as closed", raised
    )


@pytest.mark.clause("FAULT-1", "FAULT-3", "FAULT-6")
def test_dead_peer_never_kills_rank0_during_broadcast(tpbcast_run, tpbcast_impl, tpbcast_faults):
    tpbcast_faults.at(2, "after_init", Kill(signal.SIGKILL))

    def target(ctx):
        bcast = s.make(tpbcast_impl, io=20.0)
        bcast.initialize(ctx.rank, 3, ctx.base_path)
        ctx.point("after_init")
        buf = bytearray(8 * s.MiB)
        raised = s.attempt(bcast.broadcast, buf)
        bcast.reset()
        return raised

    result = tpbcast_run(
        target,
        3,
        faults=tpbcast_faults,
        sigpipe="default",
        fail_fast=False,
        expect_failure=True,
        timeout=s.GROUP_TIMEOUT,
    )
    root, _, victim = result.outcomes
    s.precondition(
        "FAULT-1", victim.signal_name == "SIGKILL", f"the fault did not happen: {victim.summary()}"
    )
    assert s.status_of(root) == "OK", s.clause(
        "FAULT-1", "rank 0 survives a dead peer with SIGPIPE at SIG_DFL", root.summary()
    )
    raised = root.value
    assert raised is not None, s.clause("FAULT-1", "rank 0's broadcast raises", None)
    assert s.mentions(raised, 2), s.clause("FAULT-1", "the error names peer 2", raised)
    _assert_clean(raised, "rank 0")


@pytest.mark.clause("FAULT-1", "FAULT-6")
def test_peer_gone_before_the_probe(tpbcast_run, tpbcast_impl):
    def target(ctx):
        if ctx.rank == 1:
            return rogue_peer("send_raw", data=struct.pack("=i", 1), then="close")(ctx)
        bcast = s.make(tpbcast_impl, init=10.0, io=10.0)
        raised = s.attempt(bcast.initialize, 0, 2, ctx.base_path)
        if raised is None:  # the probe made it before the close; the broadcast must fail
            raised = s.attempt(bcast.broadcast, bytearray(s.MiB))
        bcast.reset()
        return raised

    result = tpbcast_run(target, 2, sigpipe="default", timeout=s.GROUP_TIMEOUT)
    s.precondition("FAULT-1", result.outcomes[1].value.did("close"), "the fault did not happen")
    raised = result.outcomes[0].value
    assert raised is not None and s.mentions(raised, 1), s.clause(
        "FAULT-1", "rank 0 raises a closed-peer error naming peer 1 (probe or broadcast)", raised
    )


@pytest.mark.clause("FAULT-2", "FAULT-3", "FAULT-4", "FAULT-6")
def test_root_death_mid_broadcast_byte_level(tpbcast_run, tpbcast_impl):
    size = 64 * 1024
    data = s.payload(tpbcast_run.seed, size, "f2")

    def target(ctx):
        if ctx.rank == 0:
            return rogue_root("dies_mid_broadcast", payload=data, after=size // 2)(ctx)
        bcast = s.make(tpbcast_impl, io=30.0)
        bcast.initialize(ctx.rank, 3, ctx.base_path)
        raised = s.attempt(bcast.broadcast, bytearray(size))
        bcast.reset()
        return raised, s.sock_path(ctx.base_path)

    result = tpbcast_run(target, 3, sigpipe="default", timeout=s.GROUP_TIMEOUT)
    s.precondition("FAULT-2", result.outcomes[0].value.did("die"), "the fault did not happen")
    for outcome in result.outcomes[1:]:
        raised, path = outcome.value
        who = f"peer {outcome.rank}"
        assert raised is not None and raised.elapsed < 5.0, s.clause(
            "FAULT-2",
            f"{who} raises promptly, well before its 30 s I/O deadline",
            raised,
            rank=outcome.rank,
        )
        _assert_clean(raised, who)
        assert s.mentions(raised, size), s.clause(
            "FAULT-2",
            f"{who}: the error names bytes done/total",
            raised,
            rank=outcome.rank,
        )
        if tpbcast_impl.supports("error_details"):
            done = size // 2 if outcome.rank == 1 else 0
            want = {"rank": outcome.rank, "peer": 0, "bytes_done": done, "bytes_total": size}
            got = {key: raised.attrs.get(key) for key in want}
            assert got == want and raised.attrs.get("phase"), s.clause(
                "FAULT-4",
                f"{who}: the error carries rank/peer/phase/bytes",
                raised.attrs,
                rank=outcome.rank,
            )
            assert raised.attrs.get("path") in (path, None), s.clause(
                "FAULT-4",
                "path attribute is the socket path",
                raised.attrs,
                rank=outcome.rank,
            )


@pytest.mark.clause("FAULT-2", "FAULT-3", "FAULT-6")
def test_root_killed_mid_broadcast(tpbcast_run, tpbcast_impl):
    size = 16 * s.MiB

    def target(ctx):
        bcast = s.make(tpbcast_impl, io=30.0)
        pid_file = os.path.join(ctx.workdir, "pid0")
        if ctx.rank == 0:
            with open(pid_file, "w") as fh:
                fh.write(str(os.getpid()))
            bcast.initialize(0, 3, ctx.base_path)
            bcast.broadcast(bytearray(size))  # blocks on peer 2, which is not reading
            return "root returned"
        bcast.initialize(ctx.rank, 3, ctx.base_path)
        if ctx.rank == 1:
            first = s.attempt(bcast.broadcast, bytearray(size))
            ctx.notify("peer1_done")
            ctx.wait("root_killed", timeout=15)
            second = s.attempt(bcast.broadcast, bytearray(100))
            bcast.reset()
            return first, second
        ctx.wait("peer1_done", timeout=15)
        with open(pid_file) as fh:
            os.kill(int(fh.read()), signal.SIGKILL)
        ctx.record("fault", action="SIGKILL rank 0 while it writes to peer 2")
        ctx.notify("root_killed")
        raised = s.attempt(bcast.broadcast, bytearray(size))
        bcast.reset()
        return raised

    result = tpbcast_run(target, 3, fail_fast=False, expect_failure=True, timeout=s.GROUP_TIMEOUT)
    root, peer1, peer2 = result.outcomes
    s.precondition(
        "FAULT-2", root.signal_name == "SIGKILL", f"the fault did not happen: {root.summary()}"
    )
    for outcome in (peer1, peer2):
        assert s.status_of(outcome) == "OK", s.clause(
            "FAULT-2",
            "no peer hangs or dies when rank 0 is killed",
            outcome.summary(),
            rank=outcome.rank,
        )
    first, second = peer1.value
    s.precondition(
        "FAULT-2",
        first is None,
        f"the fault did not happen: peer 1's broadcast failed first: {first}",
    )
    for who, raised in (("peer 1's next broadcast", second), ("peer 2", peer2.value)):
        assert raised is not None and raised.elapsed < 5.0, s.clause(
            "FAULT-2", f"{who} raises a closed error promptly", raised
        )
        _assert_clean(raised, who)


@pytest.mark.clause("FAULT-4")
def test_error_attributes_on_a_dead_peer(tpbcast_run, tpbcast_impl, tpbcast_faults):
    require(tpbcast_impl, "error_details")
    size = 8 * s.MiB
    tpbcast_faults.at(1, "after_init", Kill(signal.SIGKILL))

    def target(ctx):
        bcast = s.make(tpbcast_impl, io=20.0)
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        ctx.point("after_init")
        raised = s.attempt(bcast.broadcast, bytearray(size))
        bcast.reset()
        return raised

    result = tpbcast_run(
        target, 2, faults=tpbcast_faults, fail_fast=False, expect_failure=True, timeout=20
    )
    s.precondition(
        "FAULT-4",
        result.outcomes[1].signal_name == "SIGKILL",
        f"the fault did not happen: {result.outcomes[1].summary()}",
    )
    raised = result.outcomes[0].value
    assert raised is not None, s.clause(
        "FAULT-4", "the root's broadcast to a dead peer fails", "it returned", rank=0
    )
    attrs = raised.attrs
    want = {"rank": 0, "peer": 1, "bytes_total": size}
    assert {k: attrs.get(k) for k in want} == want, s.clause(
        "FAULT-4", "rank, peer and bytes_total as attributes", attrs
    )
    assert attrs.get("phase") and attrs.get("errno_name") in ("EPIPE", "ECONNRESET"), s.clause(
        "FAULT-4", "phase and errno name (EPIPE/ECONNRESET) as attributes", attrs
    )
    assert isinstance(attrs.get("elapsed"), float) and isinstance(attrs.get("bytes_done"), int), (
        s.clause("FAULT-4", "elapsed and bytes_done as attributes", attrs)
    )
    for token in ("1", str(size), str(attrs.get("errno_name"))):
        assert s.mentions(raised, token), s.clause(
            "FAULT-4", f"the message states {token!r} too", raised.message
        )


@pytest.mark.clause("FAULT-5")
def test_probe_read_failure_says_closed(tpbcast_run, tpbcast_impl):
    def target(ctx):
        if ctx.rank == 0:
            return rogue_root("never_probes", observe=0.3)(ctx)
        bcast = s.make(tpbcast_impl, init=10.0)
        return s.attempt(bcast.initialize, 1, 2, ctx.base_path)

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    report, raised = result.outcomes[0].value, result.outcomes[1].value
    s.precondition(
        "FAULT-5", report.did("withhold_probe"), f"the fault did not happen: {report.actions}"
    )
    assert raised is not None, s.clause(
        "FAULT-5", "a peer whose root closes instead of probing fails", "it returned", rank=1
    )
    text = raised.message.lower()
    assert any(w in text for w in ("clos", "eof", "reset")), s.clause(
        "FAULT-5", "a probe read that hit EOF says the read failed (closed)", raised
    )
    assert "success" not in text, s.clause("FAULT-5", "never 'Success'", raised)


@pytest.mark.clause("FAULT-6")
def test_failures_raise_and_never_end_the_process(tpbcast_run, tpbcast_impl):
    def target(ctx):
        bcast = s.short(tpbcast_impl, connect=s.SHORT, init=s.SHORT)
        raised = [
            s.attempt(bcast.broadcast, bytearray(4)),
            s.attempt(bcast.initialize, 5, 2, ctx.base_path),
            s.attempt(bcast.initialize, 1, 2, ctx.base_path),  # nobody listens
            s.attempt(bcast.reset),
            s.attempt(bcast.reset),
        ]
        return [r is not None for r in raised]

    result = tpbcast_run(target, 1, timeout=s.GROUP_TIMEOUT, expect_failure=True)
    outcome = result.outcomes[0]
    assert s.status_of(outcome) == "OK", s.clause(
        "FAULT-6", "failures surface as exceptions; the process lives on", outcome.summary()
    )
    assert outcome.value[:3] == [True, True, True], s.clause(
        "FAULT-6", "each failure raises a catchable exception", outcome.value
    )


@pytest.mark.clause("FAULT-7")
def test_peer_dying_during_bootstrap_fails_rank0_promptly(tpbcast_run, tpbcast_impl):
    def target(ctx):
        if ctx.rank == 1:
            return rogue_peer("send_raw", data=struct.pack("=i", 1), then="close")(ctx)
        if ctx.rank == 2:
            ctx.wait("root_done", timeout=15)
            return None
        bcast = s.make(tpbcast_impl, init=6.0)
        raised = s.attempt(bcast.initialize, 0, 3, ctx.base_path)
        ctx.notify("root_done")
        bcast.reset()
        return raised

    result = tpbcast_run(target, 3, timeout=s.GROUP_TIMEOUT)
    raised, report = result.outcomes[0].value, result.outcomes[1].value
    s.precondition(
        "FAULT-7",
        report.did("send") and report.did("close"),
        f"the fault did not happen (peer 1 must announce itself, then close): {report.actions}",
    )
    assert raised is not None and raised.elapsed < 3.0, s.clause(
        "FAULT-7",
        "rank 0 fails promptly (under 3 s; its init deadline is 6 s) when connected peer 1 dies",
        raised,
        rank=0,
    )
    assert s.mentions(raised, 1), s.clause("FAULT-7", "the error names peer 1", raised, rank=0)


@pytest.mark.clause("FAULT-8")
def test_one_failed_peer_does_not_leave_the_others_hanging(
    tpbcast_run, tpbcast_impl, tpbcast_faults
):
    tpbcast_faults.at(1, "after_init", Kill(signal.SIGKILL))

    def target(ctx):
        bcast = s.make(tpbcast_impl, io=20.0)
        bcast.initialize(ctx.rank, 3, ctx.base_path)
        ctx.point("after_init")
        raised, took = s.timed(bcast.broadcast, bytearray(4 * s.MiB))
        bcast.reset()
        return raised, took

    result = tpbcast_run(
        target, 3, faults=tpbcast_faults, fail_fast=False, expect_failure=True, timeout=30
    )
    s.precondition(
        "FAULT-8", result.outcomes[1].signal_name == "SIGKILL", "the fault did not happen"
    )
    raised, took = result.outcomes[2].value
    assert took < 5.0, s.clause(
        "FAULT-8",
        "peer 2 completes or fails promptly after the root failed on peer 1 (not at its "
        "20 s I/O deadline)",
        (raised, took),
    )


@pytest.mark.clause("FAULT-9")
@pytest.mark.parametrize("schedule", range(4))
def test_random_crash_schedules(tpbcast_run, tpbcast_impl, schedule):
    require(tpbcast_impl, "deadlines")
    seed = tpbcast_run.seed * 31 + schedule
    plan = FaultPlan.random(
        seed,
        3,
        points=["before_init", "after_init", "bcast"],
        actions=[Kill(signal.SIGKILL), Exit(3), Pause(0.3)],
        count=1,
        max_hit=3,
    )
    sizes = [10_000, 1, 300_000, 77, 5000]
    budget = 2.0

    def target(ctx):
        bcast = s.make(tpbcast_impl, connect=budget, init=budget, io=budget)
        ctx.point("before_init")
        raised = s.attempt(bcast.initialize, ctx.rank, 3, ctx.base_path)
        if raised is not None:
            return "raised", 0, raised, []
        ctx.point("after_init")
        got: list[str] = []
        for index, size in enumerate(sizes):
            ctx.point("bcast")
            data = s.payload(ctx.seed, size, ("f9", index))
            buf = bytearray(data) if ctx.rank == 0 else bytearray(size)
            raised = s.attempt(bcast.broadcast, buf)
            if raised is not None:
                bcast.reset()
                return "raised", index, raised, got
            got.append(s.digest(buf))
        bcast.reset()
        return "done", len(sizes), None, got

    result = tpbcast_run(
        target, 3, faults=plan, fail_fast=False, expect_failure=True, timeout=s.GROUP_TIMEOUT
    )
    want = [s.digest(s.payload(result.seed, n, ("f9", i))) for i, n in enumerate(sizes)]
    for outcome in result.outcomes:
        assert s.status_of(outcome) != "TIMED_OUT", s.clause(
            "FAULT-9",
            f"no rank hangs ({plan.describe()})",
            outcome.summary(),
            rank=outcome.rank,
        )
        if s.status_of(outcome) != "OK":
            continue  # the victim
        kind, _, raised, got = outcome.value
        assert got == want[: len(got)], s.clause(
            "FAULT-9",
            f"rank {outcome.rank} never accepts a wrong payload",
            plan.describe(),
            rank=outcome.rank,
        )
        if kind == "raised":
            assert raised.elapsed <= 3 * budget + s.MARGIN, s.clause(
                "FAULT-9",
                f"rank {outcome.rank} raises within its deadlines",
                raised,
                rank=outcome.rank,
            )


@pytest.mark.clause("FAULT-10")
def test_one_hierarchy_with_standard_bases(tpbcast_run, tpbcast_impl):
    require(tpbcast_impl, "error_details", "deadlines")

    def target(ctx):
        bcast = s.short(tpbcast_impl, connect=0.2)
        errors = {
            "configuration": s.attempt(bcast.initialize, 0, 0, ctx.base_path),
            "not initialized": s.attempt(bcast.broadcast, bytearray(1)),
            "timeout": s.attempt(bcast.initialize, 1, 2, ctx.base_path),
        }
        bcast.reset()
        with open(s.sock_path(ctx.base_path), "w") as fh:
            fh.write("not a socket")
        errors["security"] = s.attempt(bcast.initialize, 0, 2, ctx.base_path)
        return errors

    errors = tpbcast_run(target, 1, timeout=s.GROUP_TIMEOUT).outcomes[0].value
    std = {"ValueError", "RuntimeError", "TimeoutError", "PermissionError", "OSError"}
    want = {
        "configuration": "ValueError",
        "not initialized": "RuntimeError",
        "timeout": "TimeoutError",
        "security": "PermissionError",
    }
    for kind, base in want.items():
        raised = errors[kind]
        assert raised is not None and raised.is_a(base), s.clause(
            "FAULT-10", f"a {kind} error is also a {base}", raised
        )
    own = [
        [b for b in errors[k].bases if b not in std and b not in ("Exception", "BaseException")]
        for k in want
    ]
    common = set(own[0]).intersection(*own[1:]) - {"object"}
    assert common, s.clause("FAULT-10", "all errors derive from one root class", own)
