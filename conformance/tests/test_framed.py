"""FRAME: RTP-LLM's framed wire, judged by byte-level framed peers and roots.

Each test stages its fault with a framed rogue (``tpbcast.harness.rogue.framed_peer`` /
``framed_root``) or with ranks of the implementation itself, proves from the rogue's
report that the fault happened, then judges the implementation's reaction.  "framed §N"
in the docstrings is a section of shared/reference/rtp_llm_framed_wire.md.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tpbcast.conformance.plugin import require
from tpbcast.harness import wire
from tpbcast.harness.rogue import framed_peer, framed_root

from . import _support as s
from . import _watch

pytestmark = pytest.mark.staged_via("uds-framed")

TIMEOUT_ENV = "RTP_LLM_CPU_TP_BROADCASTER_BROADCAST_TIMEOUT_MS"
ACK = bytes([wire.FRAME_ACK])


def _init(ctx, bcast, world_size=None):
    bcast.initialize(ctx.rank, world_size or ctx.world_size, ctx.base_path)


@pytest.mark.clause("WIRE-1", "WIRE-4", "FRAME-1", "FRAME-2", "FRAME-4", "FRAME-6", "FRAME-7")
@pytest.mark.world_size(2, 3)
def test_root_frames_and_commits_for_byte_level_peers(tpbcast_run, tpbcast_impl, world_size):
    """The implementation as rank 0 (umask 0), the suite as every framed peer."""
    sizes = [1, 4096, 0]
    payloads = [s.payload(tpbcast_run.seed, n, i) for i, n in enumerate(sizes)]

    def target(ctx):
        if ctx.rank:
            return framed_peer(ctx.base_path, ctx.rank, frames=len(sizes), observe=s.OBSERVE)
        os.umask(0)
        bcast = s.make(tpbcast_impl)
        _init(ctx, bcast)
        left = os.path.lexists(wire.state_path(ctx.base_path))
        raised = [s.attempt(bcast.broadcast, bytearray(p)) for p in payloads]
        bcast.reset()
        return left, raised

    result = tpbcast_run(target, timeout=s.GROUP_TIMEOUT)
    (left, raised), *peers = s.ok_values(result)
    for rank, report in enumerate(peers, start=1):
        s.check(
            "WIRE-1",
            report.probe is not None,
            "a framed peer reaches rank 0 at <base_path>_0.sock",
            report.error,
            rank=0,
        )
        s.check(
            "WIRE-4",
            report.probe == wire.PROBE,
            "rank 0 sends the probe 0x5a",
            report.probe,
            rank=0,
        )
        s.precondition("FRAME-4", report.error is None, f"rogue peer {rank}: {report.error}")
        facts = report.state_facts
        s.check(
            "FRAME-1",
            facts is not None
            and (facts.kind, facts.mode, facts.uid, facts.size)
            == ("regular", 0o600, os.geteuid(), 8),
            "the state file a peer finds after the probe is a regular 8-byte 0600 file of "
            "rank 0's uid (umask 0 on rank 0)",
            facts,
            rank=0,
        )
        want = [(wire.FRAME_MAGIC, n) for n in sizes]
        s.check(
            "FRAME-4",
            report.headers == want,
            "each frame's header: magic, byte count",
            report.headers,
            rank=0,
        )
        s.check(
            "FRAME-4",
            report.payloads == payloads,
            "each header is followed by the payload",
            [len(p) for p in report.payloads],
            rank=0,
        )
        s.check(
            "FRAME-7",
            report.decisions == [1, 2, 3],
            "rank 0 publishes the commit of each generation once every peer acknowledged",
            report.decisions,
            rank=0,
        )
    s.check(
        "FRAME-2",
        not left,
        "the state file is gone when rank 0's initialize returns",
        "it still exists",
        rank=0,
    )
    s.check(
        "FRAME-6",
        raised == [None] * len(sizes),
        "rank 0's broadcasts return once every peer acknowledged",
        raised,
        rank=0,
    )


@pytest.mark.clause("WIRE-2", "FRAME-6", "FRAME-8")
def test_peer_acknowledges_once_and_returns_on_the_commit_only(tpbcast_run, tpbcast_impl):
    """The suite as rank 0: it holds the commit back after the acknowledgement and checks
    that the implementation's peer is still inside broadcast, then commits."""
    data = s.payload(tpbcast_run.seed, 1000)

    def target(ctx):
        if ctx.rank == 0:

            def held():
                ctx.notify("acked")
                ctx.wait("checked", timeout=s.GROUP_TIMEOUT)

            return framed_root(
                ctx.base_path, 2, payloads=[data], after_acks=held, observe=s.OBSERVE
            )
        bcast = s.make(tpbcast_impl)
        _init(ctx, bcast)
        buf = bytearray(len(data))
        call = _watch.Call(bcast.broadcast, buf)
        ctx.wait("acked", timeout=s.GROUP_TIMEOUT)
        returned_early = call.wait(0.5)
        ctx.notify("checked")
        ended = call.wait(s.PATIENCE)
        outcome = call.ended().raised if ended else "still blocked"
        bcast.reset()
        return returned_early, outcome, bytes(buf) == data

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    root, (early, outcome, intact) = s.ok_values(result)
    s.check(
        "WIRE-2",
        root.announced.get(1) == wire.pack_rank(1),
        "the peer announces its rank as 4 native-endian bytes",
        root.announced,
        rank=1,
    )
    s.precondition("FRAME-6", root.error is None and root.acks, f"rogue root: {root.error}")
    s.check(
        "FRAME-6",
        root.acks[0].get(1) == ACK,
        "the peer acknowledges the frame with exactly one byte 0x6b",
        root.acks,
        rank=1,
    )
    s.check(
        "FRAME-8",
        not early,
        "the peer's broadcast has not returned before rank 0 published the commit",
        "it returned",
        rank=1,
    )
    s.check(
        "FRAME-8",
        outcome is None and intact,
        "once the commit is published, the peer returns with the payload",
        (outcome, intact),
        rank=1,
    )


@pytest.mark.clause("FRAME-7", "FAULT-12")
@pytest.mark.parametrize("ack", ["never", "wrong", "twice"])
def test_root_needs_every_acknowledgement(tpbcast_run, tpbcast_impl, ack):
    """World 3: rank 1 is the implementation, rank 2 a framed rogue answering ``ack``.
    Neither rank 0 nor rank 1 may return success for a frame rank 2 did not acknowledge
    once; a second acknowledgement is a byte out of turn, and rank 0's NEXT broadcast
    must not take it for the next frame's."""
    require(tpbcast_impl, "deadlines")
    frames = 2 if ack == "twice" else 1

    def target(ctx):
        if ctx.rank == 2:
            return framed_peer(ctx.base_path, 2, frames=frames, ack=ack, observe=s.OBSERVE)
        bcast = s.make(tpbcast_impl, io=s.SHORT + 1.0)
        _init(ctx, bcast)
        out = []
        for i in range(frames):
            buf = bytearray(s.payload(1, 100, i)) if ctx.rank == 0 else bytearray(100)
            out.append(s.attempt(bcast.broadcast, buf))
            if out[-1] is not None:
                break
        bcast.reset()
        return out

    result = tpbcast_run(target, 3, timeout=s.GROUP_TIMEOUT)
    root, peer, rogue = s.ok_values(result)
    s.precondition("FRAME-7", len(rogue.headers) >= 1, f"rogue peer got no frame: {rogue.error}")
    if ack == "twice":
        s.check(
            "FRAME-7",
            root[-1] is not None,
            "after a doubled acknowledgement, rank 0's next broadcast raises",
            root,
            rank=0,
        )
        return
    s.check(
        "FRAME-7",
        root[0] is not None,
        f"rank 0's broadcast raises when a peer's acknowledgement is {ack}",
        "it returned",
        rank=0,
    )
    s.check(
        "FRAME-7",
        peer[0] is not None,
        "no other peer returns success for that frame",
        "rank 1 returned",
        rank=1,
    )
    s.check(
        "FRAME-7",
        rogue.decisions[-1] != 1,
        "rank 0 never publishes the commit of that generation",
        f"decision word {rogue.decisions}",
        rank=0,
    )
    s.check(
        "FAULT-12",
        (root[0] is None) == (peer[0] is None),
        "rank 0 and rank 1 both return or both raise",
        (root, peer),
    )


@pytest.mark.clause("FRAME-5", "FRAME-12", "FAULT-12")
@pytest.mark.parametrize("sizes", [(100, 100, 101), (100, 100, 0), (0, 0, 7)], ids=str)
def test_size_mismatch_fails_every_rank_and_is_terminal(tpbcast_run, tpbcast_impl, sizes):
    """World 3 of the implementation; rank k calls broadcast with ``sizes[k]`` bytes.
    Every rank must raise; then every later call raises (0 bytes too), is_initialized()
    stays true and an identical initialize does not make the instance broadcast again."""

    def target(ctx):
        bcast = s.make(tpbcast_impl)
        _init(ctx, bcast)
        size = sizes[ctx.rank]
        first = s.attempt(bcast.broadcast, bytearray(b"\x01" * size))
        ctx.sync("first")
        initialized = s.initialized(bcast)
        again = s.attempt(bcast.broadcast, bytearray(size))
        zero = s.attempt(bcast.broadcast, bytearray())
        s.attempt(bcast.initialize, ctx.rank, ctx.world_size, ctx.base_path)
        after_reinit = s.attempt(bcast.broadcast, bytearray())
        ctx.sync("done")
        bcast.reset()
        ctx.sync("reset")
        _init(ctx, bcast)
        digests = s.group_roundtrip(ctx, bcast, [64])
        ctx.sync("end")
        bcast.reset()
        return first, initialized, again, zero, after_reinit, digests

    result = tpbcast_run(target, 3, timeout=2 * s.GROUP_TIMEOUT)
    want = s.expected_digests(result.seed, [64])
    firsts = [o.value[0] for o in result.outcomes]
    s.check(
        "FAULT-12",
        len({f is None for f in firsts}) == 1,
        "every rank returns or every rank raises",
        firsts,
    )
    for outcome in result.outcomes:
        first, initialized, again, zero, after_reinit, digests = outcome.value
        r = outcome.rank
        s.check(
            "FRAME-5",
            first is not None,
            f"a {sizes} size mismatch fails the broadcast on every rank",
            "it returned",
            rank=r,
        )
        if first is None:
            continue
        s.check_state(
            "FRAME-12", initialized, True, "is_initialized() stays true after the failure", rank=r
        )
        s.check(
            "FRAME-12",
            again is not None and zero is not None,
            "every later broadcast raises, zero bytes included",
            (again, zero),
            rank=r,
        )
        s.check(
            "FRAME-12",
            after_reinit is not None,
            "an identical initialize does not make a failed instance broadcast again",
            "the broadcast after it returned",
            rank=r,
        )
        s.check(
            "FRAME-12",
            digests == want,
            "reset() and initialize() recover the group",
            digests,
            rank=r,
        )


@pytest.mark.clause("FRAME-5")
@pytest.mark.parametrize("fault", ["magic", "count"])
def test_peer_refuses_a_wrong_header_and_aborts(tpbcast_run, tpbcast_impl, fault):
    """The suite as rank 0 sends a frame with a wrong magic or count: the peer must raise,
    send no acknowledgement, and publish the generation's abort (so every rank fails it)."""
    data = b"\x42" * 64

    def target(ctx):
        if ctx.rank == 0:
            wrong: dict[str, Any] = {
                "magic": {"magic": wire.FRAME_MAGIC ^ 1},
                "count": {"count_delta": 1},
            }[fault]
            return framed_root(ctx.base_path, 2, payloads=[data], observe=2.0, **wrong)
        bcast = s.make(tpbcast_impl)
        _init(ctx, bcast)
        raised = s.attempt(bcast.broadcast, bytearray(len(data)))
        bcast.reset()
        return raised

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    root, raised = s.ok_values(result)
    s.precondition("FRAME-5", root.acks, f"the rogue root never sent its frame: {root.error}")
    s.check(
        "FRAME-5",
        raised is not None,
        f"a header with a wrong {fault} fails the peer",
        "it returned",
        rank=1,
    )
    s.check(
        "FRAME-5", root.acks[0].get(1) != ACK, "the peer does not acknowledge it", root.acks, rank=1
    )
    s.check(
        "FRAME-5",
        root.published == [] and root.reaction.get(1) in ("eof", "reset"),
        "the peer leaves the link (the group's broadcast fails)",
        root.reaction,
        rank=1,
    )


@pytest.mark.clause("FRAME-8", "FAULT-12")
@pytest.mark.parametrize("commit", ["never", "after_acks"])
def test_root_stopping_around_its_commit(tpbcast_run, tpbcast_impl, commit):
    """World 3: the suite as rank 0 collects both acknowledgements, then closes every link
    either before publishing the commit (``never``: every peer must raise) or right after
    it (``after_acks``: every peer must return the payload, even if it sees the closed
    link first)."""
    data = s.payload(tpbcast_run.seed, 512)

    def target(ctx):
        if ctx.rank == 0:
            return framed_root(ctx.base_path, 3, payloads=[data], commit=commit, observe=s.OBSERVE)
        bcast = s.make(tpbcast_impl, io=s.PATIENCE)
        _init(ctx, bcast)
        buf = bytearray(len(data))
        raised, took = s.timed(bcast.broadcast, buf)
        bcast.reset()
        return raised, took, bytes(buf) == data

    result = tpbcast_run(target, 3, timeout=s.GROUP_TIMEOUT)
    root, *peers = s.ok_values(result)
    s.precondition(
        "FRAME-8",
        root.acks and all(a == ACK for a in root.acks[0].values()),
        f"the rogue root did not get both acknowledgements: {root.acks} {root.error}",
    )
    for rank, (raised, took, intact) in enumerate(peers, start=1):
        if commit == "never":
            s.check(
                "FRAME-8",
                raised is not None and took < s.MARGIN + 1.0,
                "rank 0 gone without a commit: the peer raises promptly",
                (raised, f"{took:.2f} s"),
                rank=rank,
            )
        else:
            s.check(
                "FRAME-8",
                raised is None and intact,
                "rank 0 committed, then went away: the commit stands, the peer returns the payload",
                (raised, intact),
                rank=rank,
            )
    s.check(
        "FAULT-12",
        len({r is None for r, _, _ in peers}) == 1,
        "both peers return or both raise",
        peers,
    )


@pytest.mark.clause("FRAME-9")
@pytest.mark.parametrize("generation", [1, 2])
def test_an_abort_in_the_decision_word_before_entry(tpbcast_run, tpbcast_impl, generation):
    """The suite as rank 0 publishes the abort of ``generation`` before the peer enters
    its first broadcast (generation 1), then sends the frame anyway: for generation 1 the
    peer must raise without acknowledging; an abort of generation 2 must not fail it."""
    data = b"\x10" * 32

    def target(ctx):
        if ctx.rank == 0:
            return framed_root(
                ctx.base_path,
                2,
                payloads=[data],
                abort_generation=generation,
                after_bootstrap=lambda: ctx.notify("published"),
                observe=2.0,
            )
        bcast = s.make(tpbcast_impl, io=s.OBSERVE)
        _init(ctx, bcast)
        ctx.wait("published", timeout=s.GROUP_TIMEOUT)
        buf = bytearray(len(data))
        raised = s.attempt(bcast.broadcast, buf)
        bcast.reset()
        return raised, bytes(buf) == data

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    root, (raised, intact) = s.ok_values(result)
    s.precondition(
        "FRAME-9",
        root.published[:1] == [(generation, generation | wire.ABORT_BIT)],
        f"the abort was not published: {root.published} {root.error}",
    )
    if generation == 1:
        s.check(
            "FRAME-9",
            raised is not None,
            "a generation already aborted raises at entry",
            "it returned",
            rank=1,
        )
        s.check(
            "FRAME-9",
            root.acks and root.acks[0].get(1) != ACK,
            "and the peer does not acknowledge its frame",
            root.acks,
            rank=1,
        )
    else:
        s.check(
            "FRAME-9",
            raised is None and intact,
            "another generation's abort does not fail generation 1",
            raised,
            rank=1,
        )


@pytest.mark.clause("FRAME-10")
@pytest.mark.parametrize("aborter", [0, 1])
def test_abort_fails_the_next_broadcast_everywhere(tpbcast_run, tpbcast_impl, aborter):
    """World 3 after one good broadcast; rank ``aborter`` calls abort(reason); the next
    broadcast must raise on every rank (rank 0 has an I/O deadline: a rank that does not
    learn of the abort must not hang the test)."""
    require(tpbcast_impl, "abort", "deadlines")

    def target(ctx):
        bcast = s.make(tpbcast_impl, io=s.OBSERVE)
        _init(ctx, bcast)
        digests = s.group_roundtrip(ctx, bcast, [32])
        ctx.sync("idle")
        aborted = s.attempt(bcast.abort, "validation failed") if ctx.rank == aborter else None
        ctx.sync("aborted")
        raised = s.attempt(bcast.broadcast, bytearray(32))
        ctx.sync("done")
        bcast.reset()
        return digests, aborted, raised

    result = tpbcast_run(target, 3, timeout=s.GROUP_TIMEOUT)
    for outcome in result.outcomes:
        digests, aborted, raised = outcome.value
        s.precondition("FRAME-10", aborted is None, f"abort() raised: {aborted}")
        s.precondition(
            "FRAME-10",
            digests == s.expected_digests(result.seed, [32]),
            f"the broadcast before abort() failed: {digests}",
        )
        s.check(
            "FRAME-10",
            raised is not None,
            f"after rank {aborter}'s abort(), the next broadcast raises",
            "it returned",
            rank=outcome.rank,
        )


@pytest.mark.clause("FRAME-10")
def test_abort_at_world_size_one(tpbcast_run, tpbcast_impl):
    require(tpbcast_impl, "abort")

    def target(ctx):
        bcast = s.make(tpbcast_impl)
        bcast.initialize(0, 1, ctx.base_path)
        before = s.attempt(bcast.broadcast, bytearray(8))
        bcast.abort("validation failed")
        after = s.attempt(bcast.broadcast, bytearray(8))
        bcast.reset()
        return before, after

    ((before, after),) = s.ok_values(tpbcast_run(target, 1, timeout=s.GROUP_TIMEOUT))
    s.precondition("FRAME-10", before is None, f"a world-size-1 broadcast failed: {before}")
    s.check(
        "FRAME-10",
        after is not None,
        "at world size 1, the broadcast after abort() raises",
        "it returned",
        rank=0,
    )


@pytest.mark.clause("FRAME-11")
@pytest.mark.parametrize("value", ["", "invalid", "-1", "86400001", "50ms", "1" * 24])
def test_timeout_variable_out_of_range_fails_initialize(tpbcast_run, tpbcast_impl, value):
    """Rank 1 of 2 with a refused value: its initialize raises naming the variable, before
    it connects or creates anything (rank 0, short deadlines, then fails alone)."""

    def target(ctx):
        if ctx.rank == 0:
            bcast = s.short(tpbcast_impl)
            s.attempt(bcast.initialize, 0, 2, ctx.base_path)
            bcast.reset()
            return None
        os.environ[TIMEOUT_ENV] = value
        bcast = s.short(tpbcast_impl)
        before = s.fd_table(bcast)
        raised = s.attempt(bcast.initialize, 1, 2, ctx.base_path)
        fds = sorted(s.new_fds(before, bcast))
        bcast.reset()
        return raised, fds

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    _, (raised, fds) = s.ok_values(result)
    if s.check(
        "FRAME-11",
        raised is not None,
        f"{TIMEOUT_ENV}={value!r} fails initialize",
        "it returned",
        rank=1,
    ):
        s.check(
            "FRAME-11",
            TIMEOUT_ENV in raised.message and not fds,
            "the error names the variable, and nothing was opened",
            (raised, fds),
            rank=1,
        )


@pytest.mark.clause("FRAME-11")
def test_timeout_variable_bounds_the_whole_call(tpbcast_run, tpbcast_impl):
    """TIMEOUT_MS=1000 on rank 0; peers 1 and 2 are framed rogues holding their
    acknowledgements 0.7 s and 1.4 s: every single wait of rank 0 is under 1 s, the call
    is not.  Rank 0 must raise within 1 s plus a margin, and not before 0.8 s."""
    limit = 1.0

    def target(ctx):
        if ctx.rank:
            delay = 0.7 * ctx.rank
            return framed_peer(ctx.base_path, ctx.rank, ack_delays=[delay], observe=s.OBSERVE)
        os.environ[TIMEOUT_ENV] = str(int(limit * 1000))
        bcast = s.make(tpbcast_impl)
        _init(ctx, bcast)
        raised, took = s.timed(bcast.broadcast, bytearray(100))
        bcast.reset()
        return raised, took

    result = tpbcast_run(target, 3, timeout=s.GROUP_TIMEOUT)
    (raised, took), *rogues = s.ok_values(result)
    s.precondition("FRAME-11", all(r.headers for r in rogues), "the rogue peers got no frame")
    s.check(
        "FRAME-11",
        raised is not None and s.EARLY * limit <= took <= limit + s.MARGIN,
        f"rank 0's call fails within its {limit:g} s deadline (per call, not per step)",
        (raised, f"{took:.2f} s"),
        rank=0,
    )


@pytest.mark.clause("FRAME-3")
@pytest.mark.parametrize("fault", ["mode_0644", "symlink"])
def test_peer_refuses_a_careless_state_file(tpbcast_run, tpbcast_impl, fault, tmp_path):
    """The suite as rank 0 creates the state file 0644, or as a symlink to a 0600 file:
    the peer's initialize must raise and it must not send the state-ready byte."""
    target_file = str(tmp_path / "elsewhere.state")

    def target(ctx):
        if ctx.rank == 0:
            choices: dict[str, dict[str, Any]] = {
                "mode_0644": {"state_mode": 0o644},
                "symlink": {"state_symlink_to": target_file},
            }
            kwargs = choices[fault]
            return framed_root(ctx.base_path, 2, observe=2.0, timeout=s.PATIENCE, **kwargs)
        bcast = s.short(tpbcast_impl, init=s.OBSERVE)
        raised = s.attempt(bcast.initialize, 1, 2, ctx.base_path)
        bcast.reset()
        return raised

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    root, raised = s.ok_values(result)
    s.precondition("FRAME-3", 1 in root.ready, f"the rogue root's bootstrap failed: {root.error}")
    s.check(
        "FRAME-3",
        raised is not None,
        f"a {fault} state file fails the peer's initialize",
        "it returned",
        rank=1,
    )
    s.check(
        "FRAME-3",
        root.ready.get(1) != wire.STATE_READY,
        "the peer does not confirm a state file it refused",
        root.ready,
        rank=1,
    )


@pytest.mark.clause("FRAME-1", "FRAME-2")
def test_state_file_is_created_exclusively_and_never_left(tpbcast_run, tpbcast_impl, tmp_path):
    """A symlink at <base>.state to a file of ours before rank 0 initializes: rank 0 must
    neither write through it nor change it.  Then a peer that maps nothing (never sends
    0x6a) fails rank 0's initialize, which must leave no state file behind."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep me!")
    victim.chmod(0o644)

    def target(ctx):
        if ctx.rank:
            return framed_peer(
                ctx.base_path, 1, frames=0, map_state=False, send_ready=False, observe=s.OBSERVE
            )
        path = wire.state_path(ctx.base_path)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        os.symlink(str(victim), path)
        bcast = s.short(tpbcast_impl, init=1.0)
        raised = s.attempt(bcast.initialize, 0, 2, ctx.base_path)
        left = os.path.lexists(path)
        bcast.reset()
        return raised, left

    result = tpbcast_run(target, 2, timeout=s.GROUP_TIMEOUT)
    (raised, left), rogue = s.ok_values(result)
    st = victim.stat()
    s.check(
        "FRAME-1",
        victim.read_bytes() == b"keep me!" and st.st_mode & 0o777 == 0o644,
        "a symlink at the state path is never followed",
        (victim.read_bytes(), oct(st.st_mode)),
        rank=0,
    )
    s.precondition(
        "FRAME-2",
        rogue.probe == wire.PROBE or raised is not None,
        f"the silent peer never reached the probe: {rogue.error}",
    )
    s.check(
        "FRAME-2",
        raised is not None,
        "a peer that never confirms the state file fails rank 0's initialize",
        "it returned",
        rank=0,
    )
    s.check("FRAME-2", not left, "a failed initialize leaves no state file", "it is there", rank=0)


@pytest.mark.clause("FRAME-13")
def test_every_descriptor_is_close_on_exec(tpbcast_run, tpbcast_impl):
    """Every descriptor that initialize added (sockets, the state file if kept open, any
    other) must carry FD_CLOEXEC: an exec'd child then holds no link of the group."""

    def target(ctx):
        bcast = s.make(tpbcast_impl)
        before = s.fd_table(bcast)
        _init(ctx, bcast)
        added = s.new_fds(before, bcast)
        missing = sorted(
            f"{what} (fd {key[1]})" for key, what in added.items() if s.cloexec(key) is False
        )
        ctx.sync("seen")
        bcast.reset()
        return len(added), missing

    result = tpbcast_run(target, 3, timeout=s.GROUP_TIMEOUT)
    for outcome in result.outcomes:
        added, missing = outcome.value
        s.precondition("FRAME-13", added, f"rank {outcome.rank}: initialize opened no descriptor")
        s.check(
            "FRAME-13",
            not missing,
            "every descriptor held after initialize is close-on-exec",
            missing,
            rank=outcome.rank,
        )
