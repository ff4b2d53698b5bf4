"""FAULT: dead, stalled or closing ranks; errors that name who failed and why.

Every check is soft and names one clause (``s.check``): FAULT-3's wording checks of an
error never decide FAULT-2 or FAULT-6, judged on the same error.  Ranks run with SIGPIPE
at SIG_DFL and ``expect_failure`` wherever the implementation's own process may die, so
a rank killed by the implementation's doing is judged (FAULT-1, FAULT-6) rather than
reported as an unattributed group failure.
"""

from __future__ import annotations

import re
import signal
import struct

import pytest

from tpbcast.conformance.plugin import require
from tpbcast.harness import Exit, FaultPlan, Kill, Pause, observe, wire
from tpbcast.harness.rogue import rogue_peer, rogue_root

from . import _support as s
from . import _watch

_RESET = "test_reset.py::test_peer_sees_root_reset_as_closed"
"""The other transport-neutral staging of FAULT-3 (a peer whose root resets)."""


def _check_clean(raised, who, *, rank=None):
    """FAULT-3, judged on any closed-peer error a test provoked (cite FAULT-3 with it).

    Soft checks: a wording failure here is FAULT-3's alone.
    """
    text = raised.message.lower()
    s.check(
        "FAULT-3",
        "success" not in text and "errno 0" not in text,
        f"{who}: no error says 'Success' or errno 0",
        raised,
        rank=rank,
    )
    s.check(
        "FAULT-3",
        any(word in text for word in ("clos", "eof", "reset", "broken pipe", "epipe")),
        f"{who}: EOF/EPIPE/ECONNRESET is reported as closed",
        raised,
        rank=rank,
    )


def _check_lives_on(outcome, cid, sentence):
    """``outcome``'s process ended normally (its failures were exceptions); soft."""
    return s.check(
        cid, s.status_of(outcome) == "OK", sentence, outcome.summary(), rank=outcome.rank
    )


@pytest.mark.idle_wait
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
    s.killed("FAULT-1", victim)
    survived = _check_lives_on(
        root, "FAULT-1", "rank 0 survives a dead peer with SIGPIPE at SIG_DFL"
    )
    _check_lives_on(root, "FAULT-6", "rank 0's failure is an exception; its process lives on")
    # FAULT-3 reads an error's wording: without one there is nothing to read (no PASS).
    if not survived:
        s.staged_elsewhere("FAULT-3", False, f"rank 0 did not live on ({root.summary()})", _RESET)
        return
    raised = root.value
    if not s.check("FAULT-1", raised is not None, "rank 0's broadcast raises", None, rank=0):
        s.staged_elsewhere("FAULT-3", False, "rank 0's broadcast raised nothing", _RESET)
        return
    s.check("FAULT-1", s.mentions(raised, 2), "the error names peer 2", raised, rank=0)
    _check_clean(raised, "rank 0", rank=0)


@pytest.mark.clause("FAULT-1", "FAULT-6")
@pytest.mark.staged_via("uds-v1")
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

    result = tpbcast_run(
        target,
        2,
        sigpipe="default",
        fail_fast=False,
        expect_failure=True,
        timeout=s.GROUP_TIMEOUT,
    )
    root, rogue = result.outcomes
    s.rogue_did("FAULT-1", rogue, "close")
    survived = _check_lives_on(
        root, "FAULT-1", "rank 0 survives a peer gone before the probe (SIGPIPE at SIG_DFL)"
    )
    _check_lives_on(root, "FAULT-6", "rank 0's failure is an exception; its process lives on")
    if survived:
        raised = root.value
        s.check(
            "FAULT-1",
            raised is not None and s.mentions(raised, 1),
            "rank 0 raises a closed-peer error naming peer 1 (probe or broadcast)",
            raised,
            rank=0,
        )


@pytest.mark.clause("FAULT-2", "FAULT-3", "FAULT-4", "FAULT-6")
@pytest.mark.staged_via("uds-v1")
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
        return raised, wire.socket_path(ctx.base_path)

    result = tpbcast_run(
        target,
        3,
        sigpipe="default",
        fail_fast=False,
        expect_failure=True,
        timeout=s.GROUP_TIMEOUT,
    )
    rogue = result.outcomes[0]
    s.rogue_did("FAULT-2", rogue, "die")
    for outcome in result.outcomes[1:]:
        who, rank = f"peer {outcome.rank}", outcome.rank
        lives = _check_lives_on(
            outcome, "FAULT-6", f"{who}'s failure is an exception; its process lives on"
        )
        if not lives:
            s.check(
                "FAULT-2", False, f"{who} raises when rank 0 dies", outcome.summary(), rank=rank
            )
            continue
        raised, path = outcome.value
        if not s.check(
            "FAULT-2",
            raised is not None and raised.elapsed < 5.0,
            f"{who} raises promptly, well before its 30 s I/O deadline",
            raised,
            rank=rank,
        ):
            continue
        _check_clean(raised, who, rank=rank)
        done = size // 2 if outcome.rank == 1 else 0
        s.check(
            "FAULT-2",
            s.mentions(raised, size) and (done == 0 or s.mentions(raised, done)),
            f"{who}: the error names bytes done/total ({done}/{size})",
            raised,
            rank=rank,
        )
        if outcome.rank == 1:  # FAULT-4's message half needs no capability
            text = raised.message
            s.check(
                "FAULT-4",
                s.mentions(raised, done)
                and "broadcast" in text.lower()
                and re.search(r"\d(\.\d+)? ?m?s\b", text) is not None,
                f"{who}: the message states the phase, bytes done/total and the elapsed time",
                raised,
                rank=rank,
            )
        if tpbcast_impl.supports("error_details"):
            done = size // 2 if outcome.rank == 1 else 0
            want = {"rank": outcome.rank, "peer": 0, "bytes_done": done, "bytes_total": size}
            got = {key: raised.attrs.get(key) for key in want}
            s.check(
                "FAULT-4",
                got == want and raised.attrs.get("phase"),
                f"{who}: the error carries rank/peer/phase/bytes",
                raised.attrs,
                rank=rank,
            )
            s.check(
                "FAULT-4",
                raised.attrs.get("path") in (path, None),
                "path attribute is the socket path",
                raised.attrs,
                rank=rank,
            )


@pytest.mark.clause("FAULT-2", "FAULT-3", "FAULT-6")
@pytest.mark.staged_via("uds-v1")  # rank 0 blocks in a socket write to a peer that does not
# read while peer 1 finishes: stream semantics; test_bounded.py stages FAULT-2 for any transport
def test_root_killed_mid_broadcast(tpbcast_run, tpbcast_impl):
    size = 16 * s.MiB

    def target(ctx):
        bcast = s.make(tpbcast_impl, io=30.0)
        if ctx.rank == 0:
            s.publish_pid(ctx)
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
        observe.kill(s.published_pid(ctx, 0, "FAULT-2"))
        ctx.record("fault", action="SIGKILL rank 0 while it writes to peer 2")
        ctx.notify("root_killed")
        raised = s.attempt(bcast.broadcast, bytearray(size))
        bcast.reset()
        return raised

    result = tpbcast_run(target, 3, fail_fast=False, expect_failure=True, timeout=s.GROUP_TIMEOUT)
    root, peer1, peer2 = result.outcomes
    s.killed("FAULT-2", root)
    alive = []
    for outcome in (peer1, peer2):
        ok = _check_lives_on(outcome, "FAULT-2", "no peer hangs or dies when rank 0 is killed")
        _check_lives_on(
            outcome, "FAULT-6", f"peer {outcome.rank}'s failure is an exception; it lives on"
        )
        alive.append(ok)
    checks = []
    if alive[0]:
        first, second = peer1.value
        s.fault_happened("FAULT-2", first is None, f"peer 1's broadcast failed first: {first}")
        checks.append(("peer 1's next broadcast", second, 1))
    if alive[1]:
        checks.append(("peer 2", peer2.value, 2))
    for who, raised, rank in checks:
        if s.check(
            "FAULT-2",
            raised is not None and raised.elapsed < 5.0,
            f"{who} raises a closed error promptly",
            raised,
            rank=rank,
        ):
            _check_clean(raised, who, rank=rank)


@pytest.mark.clause("FAULT-4")
def test_error_attributes_on_a_dead_peer(tpbcast_run, tpbcast_impl, tpbcast_faults):
    require(tpbcast_impl, "error_details")
    size = 8 * s.MiB
    tpbcast_faults.at(1, "after_init", Kill(signal.SIGKILL))

    def target(ctx):
        # SIGPIPE ignored here: surviving it is FAULT-1's subject, the error's attributes
        # are this test's; a rank killed by it would leave them unjudged.
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        bcast = s.make(tpbcast_impl, io=20.0)
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        ctx.point("after_init")
        raised = s.attempt(bcast.broadcast, bytearray(size))
        bcast.reset()
        return raised

    result = tpbcast_run(
        target, 2, faults=tpbcast_faults, fail_fast=False, expect_failure=True, timeout=20
    )
    s.killed("FAULT-4", result.outcomes[1])
    root = result.outcomes[0]
    s.precondition("FAULT-4", s.status_of(root) == "OK", f"rank 0 did not live: {root.summary()}")
    raised = root.value
    if not s.check(
        "FAULT-4", raised is not None, "the root's broadcast to a dead peer fails", "it returned"
    ):
        return
    attrs = raised.attrs
    want = {"rank": 0, "peer": 1, "bytes_total": size}
    s.check(
        "FAULT-4",
        {k: attrs.get(k) for k in want} == want,
        "rank, peer and bytes_total as attributes",
        attrs,
        rank=0,
    )
    s.check(
        "FAULT-4",
        attrs.get("phase") and attrs.get("errno_name") in ("EPIPE", "ECONNRESET"),
        "phase and errno name (EPIPE/ECONNRESET) as attributes",
        attrs,
        rank=0,
    )
    s.check(
        "FAULT-4",
        isinstance(attrs.get("elapsed"), float) and isinstance(attrs.get("bytes_done"), int),
        "elapsed and bytes_done as attributes",
        attrs,
        rank=0,
    )
    for token in ("1", str(size), str(attrs.get("errno_name"))):
        s.check(
            "FAULT-4",
            s.mentions(raised, token),
            f"the message states {token!r} too",
            raised.message,
            rank=0,
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
    s.fault_happened("FAULT-5", report.did("withhold_probe"), report.actions)
    if not s.check(
        "FAULT-5",
        raised is not None,
        "a peer whose root closes instead of probing fails",
        "it returned",
        rank=1,
    ):
        return
    text = raised.message.lower()
    s.check(
        "FAULT-5",
        any(w in text for w in ("clos", "eof", "reset")),
        "a probe read that hit EOF says the read failed (closed)",
        raised,
        rank=1,
    )
    s.check("FAULT-5", "success" not in text, "never 'Success'", raised, rank=1)


@pytest.mark.clause("FAULT-6")
@pytest.mark.staged_via("uds-v1")
def test_failures_raise_and_never_end_the_process(tpbcast_run, tpbcast_impl):
    """Rank 0 provokes failures; rank 1 is the suite's watcher.  Its third call, a peer
    whose rank 0 never listens, is released by a stand-in rank 0 after a bound (an
    implementation without the ``deadlines`` capability retries connect for its own
    default): the stand-in accepts and closes, so initialize fails there too."""
    release_after = s.SHORT + s.MARGIN

    def target(ctx):
        if ctx.rank == 1:
            if not _watch.notified(ctx, "connecting", 10):
                return False
            if _watch.unfinished(ctx, ["connect_done"], release_after):
                return _watch.turn_away_peers(wire.socket_path(ctx.base_path), 1, timeout=2.0) > 0
            return False
        bcast = s.short(tpbcast_impl, connect=s.SHORT, init=s.SHORT)
        raised = [
            s.attempt(bcast.broadcast, bytearray(4)),
            s.attempt(bcast.initialize, 5, 2, ctx.base_path),
        ]
        ctx.notify("connecting")
        raised.append(s.attempt(bcast.initialize, 1, 2, ctx.base_path))  # nobody listens
        ctx.notify("connect_done")
        raised += [s.attempt(bcast.reset), s.attempt(bcast.reset)]
        return [r is not None for r in raised]

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT, expect_failure=True)
    outcome = result.outcomes[0]
    if not _check_lives_on(
        outcome, "FAULT-6", "failures surface as exceptions; the process lives on"
    ):
        return
    calls = ("broadcast before initialize", "initialize(5, 2)", "initialize with no rank 0")
    for call, failed in zip(calls, outcome.value, strict=False):
        s.check("FAULT-6", failed, f"{call} raises a catchable exception", "it returned", rank=0)


@pytest.mark.clause("FAULT-7")
@pytest.mark.staged_via("uds-v1")
def test_peer_dying_during_bootstrap_fails_rank0_promptly(tpbcast_run, tpbcast_impl):
    """Peer 1 announces itself and dies; peer 2 never comes.  Rank 0 must fail at once,
    naming peer 1, not at its 6 s init deadline.  Rank 2 is the suite's watcher: a rank 0
    still waiting after the 3 s bound (none of its waits notices the dead peer, or it has
    no deadline at all) is released by a connection that closes at once."""
    bound = 3.0

    def target(ctx):
        if ctx.rank == 1:
            return rogue_peer("send_raw", data=struct.pack("=i", 1), then="close")(ctx)
        if ctx.rank == 2:
            late = _watch.unfinished(ctx, ["root_done"], bound + 0.5)
            return bool(late) and _watch.poke(wire.socket_path(ctx.base_path))
        bcast = s.make(tpbcast_impl, init=6.0)
        raised = s.attempt(bcast.initialize, 0, 3, ctx.base_path)
        ctx.notify("root_done")
        bcast.reset()
        return raised

    result = tpbcast_run(target, 3, timeout=s.GROUP_TIMEOUT)
    raised, report, released = (o.value for o in result.outcomes)
    s.fault_happened(
        "FAULT-7",
        report.did("send") and report.did("close"),
        f"peer 1 must announce itself, then close: {report.actions}",
    )
    note = "; the suite released it after 3.5 s" if released else ""
    if not s.check(
        "FAULT-7",
        raised is not None and raised.elapsed < bound,
        f"rank 0 fails promptly (under {bound:g} s; its init deadline is 6 s) when connected "
        "peer 1 dies",
        f"{raised}{note}",
        rank=0,
    ):
        return
    s.check("FAULT-7", s.mentions(raised, 1), "the error names peer 1", raised, rank=0)


# How long rank 0 waits, after its failed broadcast, for peer 2 to end its own call
# before rank 0 resets (a reset closes every link whatever the broadcast did).
_F8_WAIT = s.MARGIN


@pytest.mark.clause("FAULT-8")
def test_one_failed_peer_does_not_leave_the_others_hanging(
    tpbcast_run, tpbcast_impl, tpbcast_faults
):
    """Peer 1 dies; the root's broadcast fails on it.  Peer 2, still waiting for its
    bytes, must fail while the root has NOT reset yet: the failed broadcast itself must
    close or abort the remaining links.  Rank 0 waits up to _F8_WAIT s for peer 2 before
    its own reset (which would release peer 2 whatever the broadcast did)."""
    tpbcast_faults.at(1, "after_init", Kill(signal.SIGKILL))

    def target(ctx):
        # SIGPIPE ignored here: surviving it is FAULT-1's subject, not this test's.
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        bcast = s.make(tpbcast_impl, io=20.0)
        bcast.initialize(ctx.rank, 3, ctx.base_path)
        ctx.point("after_init")
        if ctx.rank == 0:
            raised = s.attempt(bcast.broadcast, bytearray(4 * s.MiB))
            before_reset = _watch.notified(ctx, "peer2_done", _F8_WAIT)
            bcast.reset()
            return raised, before_reset
        raised, took = s.timed(bcast.broadcast, bytearray(4 * s.MiB))
        ctx.notify("peer2_done")
        bcast.reset()
        return raised, took

    result = tpbcast_run(
        target, 3, faults=tpbcast_faults, fail_fast=False, expect_failure=True, timeout=30
    )
    root, victim, peer2 = result.outcomes
    s.killed("FAULT-8", victim)
    if not s.stageable(
        "FAULT-8", s.status_of(root) == "OK", f"rank 0 did not get through: {root.summary()}"
    ):
        return
    root_raised, before_reset = root.value
    if not s.stageable(
        "FAULT-8",
        root_raised is not None,
        "the root's broadcast did not fail on the dead peer 1 (FAULT-1's subject): nothing "
        "to abort",
    ):
        return
    if not s.check(
        "FAULT-8",
        s.status_of(peer2) == "OK",
        "peer 2 neither hangs nor dies when the root's broadcast fails on peer 1",
        peer2.summary(),
        rank=2,
    ):
        return
    raised, took = peer2.value
    s.check(
        "FAULT-8",
        before_reset,
        "after the root's broadcast failed on peer 1, peer 2's broadcast ends (the root "
        "closes or aborts its link) before the root's own reset()",
        f"peer 2 was still waiting {_F8_WAIT:g} s after the root failed ({root_raised}); "
        f"only the root's reset ended it after {took:.2f}s: {raised}",
        rank=2,
    )


# FAULT-9: the deadlines the ranks set, the scheduling noise allowed on top of them, and
# a pause longer than a broadcast deadline plus that noise, so a rank waiting for a
# paused one must give up (raise) before the paused rank resumes.
_F9_BOOT = 1.0  # connect and init
_F9_IO = 0.5
_F9_SLACK = 1.5
_F9_PAUSE = _F9_IO + _F9_SLACK + 1.0
_F9_SIZES = (10_000, 1, 300_000, 77, 5000)


def _f9_target(tpbcast_impl):
    def target(ctx):
        bcast = s.make(tpbcast_impl, connect=_F9_BOOT, init=_F9_BOOT, io=_F9_IO)
        ctx.point("before_init")
        calls = []
        raised, took = s.timed(bcast.initialize, ctx.rank, 3, ctx.base_path)
        calls.append(("initialize", took, raised))
        got: list[str] = []
        if raised is not None:
            return calls, got
        ctx.point("after_init")
        for index, size in enumerate(_F9_SIZES):
            ctx.point("bcast")
            data = s.payload(ctx.seed, size, ("f9", index))
            buf = bytearray(data) if ctx.rank == 0 else bytearray(size)
            raised, took = s.timed(bcast.broadcast, buf)
            calls.append((f"broadcast {index}", took, raised))
            if raised is not None:
                break
            got.append(s.digest(buf))
        bcast.reset()
        return calls, got

    return target


def _judge_crash_schedule(tpbcast_run, tpbcast_impl, plan):
    """Run the 3-rank sequence under ``plan``; every surviving rank completes correctly
    or raises, and every call ends within its deadline (+ slack), returned or raised."""
    result = tpbcast_run(
        _f9_target(tpbcast_impl),
        3,
        faults=plan,
        fail_fast=False,
        expect_failure=True,
        timeout=s.GROUP_TIMEOUT,
    )
    want = [s.digest(s.payload(result.seed, n, ("f9", i))) for i, n in enumerate(_F9_SIZES)]
    schedule = " ".join(plan.describe().split())
    limits = {"initialize": 2 * _F9_BOOT + _F9_SLACK}
    for outcome in result.outcomes:
        rank = outcome.rank
        if not s.check(
            "FAULT-9",
            s.status_of(outcome) != "TIMED_OUT",
            f"no rank hangs ({schedule})",
            outcome.summary(),
            rank=rank,
        ):
            continue
        if s.status_of(outcome) != "OK":
            continue  # the victim
        calls, got = outcome.value
        s.check(
            "FAULT-9",
            got == want[: len(got)],
            f"rank {rank} never accepts a wrong payload ({schedule})",
            f"{len(got)} payload(s), not all as sent",
            rank=rank,
        )
        for call, took, raised in calls:
            limit = limits.get(call, _F9_IO + _F9_SLACK)
            s.check(
                "FAULT-9",
                took <= limit,
                f"rank {rank}'s {call} ends (returns or raises) within its deadline "
                f"(+{_F9_SLACK:g}s), even while another rank is paused for {_F9_PAUSE:g}s "
                f"({schedule})",
                f"it took {took:.2f}s (limit {limit:.2f}s): {raised or 'returned'}",
                rank=rank,
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
        actions=[Kill(signal.SIGKILL), Exit(3), Pause(_F9_PAUSE)],
        count=1,
        max_hit=3,
    )
    _judge_crash_schedule(tpbcast_run, tpbcast_impl, plan)


@pytest.mark.clause("FAULT-9")
def test_root_paused_mid_sequence(tpbcast_run, tpbcast_impl, tpbcast_faults):
    """The schedule random draws may miss: rank 0 paused (SIGSTOP) between two
    broadcasts for longer than the peers' I/O deadline.  The peers must give up at their
    deadline, not wait for the root to resume."""
    require(tpbcast_impl, "deadlines")
    tpbcast_faults.at(0, "bcast", Pause(_F9_PAUSE), hit=2)
    _judge_crash_schedule(tpbcast_run, tpbcast_impl, tpbcast_faults)


@pytest.mark.clause("FAULT-10")
@pytest.mark.staged_via("uds-v1")
def test_one_hierarchy_with_standard_bases(tpbcast_run, tpbcast_impl):
    require(tpbcast_impl, "deadlines")

    def target(ctx):
        bcast = s.short(tpbcast_impl, connect=0.2)
        errors = {
            "not initialized": s.attempt(bcast.broadcast, bytearray(1)),
            "configuration": s.attempt(bcast.initialize, 0, 0, ctx.base_path),
        }
        bcast.reset()  # also after a world size 0 it accepted (INIT-1's subject)
        errors["timeout"] = s.attempt(bcast.initialize, 1, 2, ctx.base_path)
        bcast.reset()
        with open(wire.socket_path(ctx.base_path), "w") as fh:
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
        if raised is None:
            continue  # no such error to judge: the call did not fail (another clause's)
        s.check(
            "FAULT-10",
            raised.is_a(base),
            f"a {kind} error is also a {base}",
            raised,
        )
    raised_all = [errors[k] for k in want if errors[k] is not None]
    if len(raised_all) < 2:
        return
    own = [
        [b for b in r.bases if b not in std and b not in ("Exception", "BaseException")]
        for r in raised_all
    ]
    common = set(own[0]).intersection(*own[1:]) - {"object"}
    s.check("FAULT-10", common, "all errors derive from one root class", own)
