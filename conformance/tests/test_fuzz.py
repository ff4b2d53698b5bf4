"""Fuzzing: a rogue peer and a rogue root follow scripts hypothesis draws.

The rogue peer sends arbitrary handshake bytes (a valid announcement, any int32, garbage
or a truncated prefix), cut into arbitrary chunks with pauses, and then closes,
half-closes, stalls, or, after a valid announcement, reads the probe and some or all of
the payload and closes, stalls or waits.  The rogue root accepts the implementation's
peers and sends each one a probe byte (0x5a, another byte, or none) and some or all of
the payload, cut into arbitrary chunks, then closes or stalls.  Every case is a fresh
group of ranks.  Whatever the script, the implementation never crashes its process,
never hangs past its deadline, never accepts a bad peer or probe, and never loses a good
peer's bytes; each of these is a check of the clause that promises it.

Deadlines: a case with a stall runs the implementation with the deadline of the stage it
stalls in at :data:`STALL_DEADLINE` (:data:`STALL_IO_DEADLINE` for a rogue peer that stops
reading mid-payload; a stall then costs about that much) and every other one at
:data:`CALM_DEADLINE`, so a slow-but-valid script is never cut short on a loaded machine.
A rogue watches a stall for ``STALL_DEADLINE + MARGIN`` and then hangs up itself, so an
implementation without a deadline ends FAIL (too late), not ERROR.  Profiles, seed and
replay: ``_fuzz`` and conformance/tests/README.md ("Fuzz tests").
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import pytest
from hypothesis import example
from hypothesis import strategies as st

from tpbcast.harness import Status, run_ranks
from tpbcast.harness.wire import PROBE, pack_rank, unpack_rank

from . import _fuzz, _watch
from . import _support as s
from ._fuzz import Judged, Tally
from ._fuzz_players import (
    Chunked,
    LinkScript,
    PeerScript,
    PeerSeen,
    RootSeen,
    play_peer,
    play_root,
    play_twin,
    probe_and,
)

STALL_DEADLINE: Final = 0.25
STALL_IO_DEADLINE: Final = 1.0
"""Rank 0's I/O deadline when the rogue peer stalls mid-payload: the whole broadcast,
including peer 1's share (up to :data:`BIG`) before the rogue's, must fit in it."""
CALM_DEADLINE: Final = 5.0
OBSERVE: Final = max(STALL_DEADLINE, STALL_IO_DEADLINE) + s.MARGIN + 0.5
"""How long a rogue watches a stall before it hangs up itself: past every stall deadline
plus its margin, so an implementation that only fails once the rogue hangs up is late."""
BOUND: Final = OBSERVE + s.MARGIN
"""How long a rank waits for one implementation call before judging it hung."""
PROMPT: Final = CALM_DEADLINE / 2
"""'Promptly, well before the deadline' for a failure that needs no deadline (a close)."""
BIG: Final = s.MiB + 7
"""A payload far beyond a socket's buffers: a root writing it must see a stalled or
closed reader."""
SIZES: Final = (0, 1, 4097, BIG)
GROUP_TIMEOUT: Final = 4 * BOUND
TWIN_READ: Final = "twin-read"
"""A file the rogue creates once rank 0 read its second (duplicate) announcement: peer 1
starts its initialize only then (a twin case)."""
RETRY_GRACE: Final = 0.2
"""How long a peer still waits for its initialize once rank 0's failed (its EOF)."""


@dataclass(frozen=True)
class ImplSeen:
    """What an implementation rank saw of its own calls (picklable)."""

    init: _watch.Ended
    initialized: object = None  # s.initialized: a bool, or s.NotAsked
    bcast: _watch.Ended | None = None
    digest: str | None = None
    leaked: tuple[str, ...] | None = None


ROOT_FAILED: Final = "root-init-failed"
"""A file rank 0 (the implementation) creates in the group's workdir when its initialize
failed (a flag the peers poll; a sync point name could be waited for only once)."""


def _impl_rank(ctx, impl, rank, *, world, deadlines, size, gate=None):
    """Initialize, broadcast ``size`` bytes if that worked, reset; each call bounded.

    ``deadlines`` is ``(init, io)``: short only for the stage the case stalls in.  Rank 0
    flags :data:`ROOT_FAILED` when its initialize failed; a peer then stops waiting for
    its own initialize shortly after (it may not have connected before rank 0 gave up, and
    would otherwise retry connect until its deadline: INIT-6, not what is judged here).
    """
    before = s.fd_table()
    init_deadline, io_deadline = deadlines
    bcast = s.make(impl, connect=CALM_DEADLINE, init=init_deadline, io=io_deadline)
    flag = os.path.join(ctx.workdir, ROOT_FAILED)
    if gate is not None:  # the rogue says when this rank may start (a twin case)
        opened = os.path.join(ctx.workdir, gate)
        s.wait_for(lambda: os.path.exists(opened) or os.path.exists(flag), BOUND)
    init = _watch.Call(bcast.initialize, rank, world, ctx.base_path)
    if rank == 0:
        init.wait(BOUND)
        if init.done and init.ended().raised is not None:
            with open(flag, "w"):
                pass
    elif not init.wait(BOUND, until=lambda: os.path.exists(flag)):
        init.wait(RETRY_GRACE)
    if not init.done:
        return ImplSeen(init.ended())  # still inside: never touch it again
    initialized = s.initialized(bcast)
    ended = init.ended()
    bcast_ended, digest = None, None
    if ended.raised is None:
        data = s.payload(ctx.seed, size, "fuzz")
        buf = bytearray(data) if rank == 0 else bytearray(b"\xa5" * size)
        call = _watch.Call(bcast.broadcast, buf)
        done = call.wait(BOUND)
        bcast_ended = call.ended()
        if not done:
            return ImplSeen(ended, initialized, bcast_ended)
        digest = s.digest(buf)
    bcast.reset()
    leaked = tuple(sorted(s.new_fds(before, bcast).values()))
    return ImplSeen(ended, initialized, bcast_ended, digest, leaked)


def _took(ended: _watch.Ended | None) -> float:
    """Seconds until the call raised (infinite if it did not raise)."""
    raised = None if ended is None else ended.raised
    return float("inf") if raised is None else raised.elapsed


def _rogue(play, *args):
    """Run a player; an exception of the suite's own is returned as text (unstaged)."""
    try:
        return play(*args)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def _group(targets, world, seed):
    return run_ranks(targets, world, timeout=GROUP_TIMEOUT, seed=seed, fail_fast=False)


def _alive(result, impl_ranks, checks):
    """FAULT-6 per implementation rank; returns {rank: ImplSeen} of those that returned."""
    seen = {}
    for rank in impl_ranks:
        outcome = result.outcomes[rank]
        ok = outcome.status is Status.OK and isinstance(outcome.value, ImplSeen)
        checks.append(
            Judged(
                "FAULT-6",
                ok,
                "a rogue's bytes never abort, exit or kill the implementation's process",
                outcome.summary(),
                rank,
            )
        )
        if ok:
            seen[rank] = outcome.value
    return seen


def _hygiene(seen, checks):
    for rank, impl in seen.items():
        if impl.leaked is not None:
            checks.append(
                Judged(
                    "HYG-3",
                    not impl.leaked,
                    "after reset the fds are those before initialize, also after a failure",
                    impl.leaked,
                    rank,
                )
            )


# ------------------------------------------------------------------ rogue peer


@dataclass(frozen=True)
class PeerCase:
    """Rank 0 (and, at world 3, peer 1) is the implementation; the last rank is the rogue."""

    world: int
    handshake: bytes
    cuts: tuple[int, ...]
    slow: tuple[bool, ...]
    ending: str
    size: int = 0
    read: int = 0
    after: str = "eof"
    twin: bool = False
    """The rogue first announces its own rank on another connection, which rank 0 reads
    before this one's handshake: a valid rank, already taken (a duplicate).  Peer 1 joins
    only then, so a rank 0 that let the second take the slot completes the group with it."""

    @property
    def rogue(self) -> int:
        return self.world - 1

    @property
    def kind(self) -> str:
        """valid, truncated (INIT-9), out_of_range (INIT-7) or duplicate (INIT-8)."""
        if self.twin:
            return "duplicate"
        if len(self.handshake) != 4:
            return "truncated"
        rank = unpack_rank(self.handshake)
        if rank == self.rogue:
            return "valid"
        return "duplicate" if 0 < rank < self.world else "out_of_range"

    @property
    def deadlines(self) -> tuple[float, float]:
        """Rank 0's (init, io) deadlines: short for the stage the rogue stalls in."""
        stalls = self.ending in ("stall", "half_close") and not self.twin
        init = STALL_DEADLINE if stalls else CALM_DEADLINE
        io = STALL_IO_DEADLINE if self.after == "stall" else CALM_DEADLINE
        return init, io

    def script(self) -> PeerScript:
        return PeerScript(
            Chunked(self.handshake, self.cuts, self.slow),
            self.ending,  # type: ignore[arg-type]
            self.read,
            self.after,  # type: ignore[arg-type]
        )


_BAD_CLAUSE: Final = {"truncated": "INIT-9", "out_of_range": "INIT-7", "duplicate": "INIT-8"}


@st.composite
def _peer_cases(draw: Any) -> PeerCase:
    """A rogue peer's case."""
    world = draw(st.sampled_from((2, 3)))
    rogue = world - 1
    handshake = draw(
        st.one_of(
            st.just(pack_rank(rogue)),
            st.sampled_from((-1, 0, 1, world, 2**31 - 1, -(2**31))).map(pack_rank),
            st.integers(-(2**31), 2**31 - 1).map(pack_rank),
            st.binary(max_size=12).filter(lambda b: not (len(b) > 4 and b[:4] == pack_rank(rogue))),
        )
    )
    cuts = draw(st.lists(st.integers(1, max(1, len(handshake) - 1)), max_size=4))
    slow = draw(st.lists(st.booleans(), min_size=len(cuts) + 1, max_size=len(cuts) + 1))
    endings = ("close", "half_close", "stall")
    valid = handshake == pack_rank(rogue)
    twin = world == 3 and valid and draw(st.booleans())
    if twin:
        ending = draw(st.sampled_from(("stall", "half_close")))
    else:
        ending = draw(st.sampled_from(("proceed", "proceed", "close") if valid else endings))
    size, read, after = 0, 0, "eof"
    if ending == "proceed":
        size = draw(st.sampled_from(SIZES))
        after = draw(st.sampled_from(("eof", "eof", "close", "stall")))
        read = size if after == "eof" else draw(st.integers(0, max(0, size - 1)))
    return PeerCase(world, handshake, tuple(cuts), tuple(slow), ending, size, read, after, twin)


_PEER_EXAMPLES: Final = (
    PeerCase(2, pack_rank(1), (1, 2, 3), (True, False, True, False), "proceed", 4097, 4097),
    PeerCase(3, pack_rank(7), (2,), (True, False), "stall"),
    PeerCase(2, pack_rank(-1), (1,), (False, False), "half_close"),
    PeerCase(3, pack_rank(0), (), (False,), "stall"),
    PeerCase(3, pack_rank(1), (), (False,), "close"),
    PeerCase(3, pack_rank(2), (1,), (False, False), "stall", twin=True),
    PeerCase(2, pack_rank(1)[:2], (1,), (False, True), "stall"),
    PeerCase(3, pack_rank(2), (3,), (False, False), "proceed", BIG, 5, "close"),
    PeerCase(2, pack_rank(1), (), (False,), "proceed", BIG, 0, "stall"),
)
_PEER_CLAUSES: Final = (
    "FAULT-6",
    "INIT-7",
    "INIT-8",
    "INIT-9",
    "WIRE-4",
    "WIRE-12",
    "FAULT-1",
    "BCAST-1",
    "TIME-5",
    "HYG-3",
)


def _run_peer_case(impl, seed, case: PeerCase) -> tuple[list[Judged], bool]:
    impl_ranks = list(range(case.world - 1))
    calm = (CALM_DEADLINE, CALM_DEADLINE)
    deadlines = {r: case.deadlines if r == 0 else calm for r in impl_ranks}
    gate = TWIN_READ if case.twin else None
    targets: dict[int, Callable[..., object]] = {
        r: (
            lambda ctx, r=r: _impl_rank(
                ctx,
                impl,
                r,
                world=case.world,
                deadlines=deadlines[r],
                size=case.size,
                gate=gate if r else None,
            )
        )
        for r in impl_ranks
    }

    def play(ctx):
        flag = os.path.join(ctx.workdir, ROOT_FAILED)

        def give_up():
            return os.path.exists(flag)

        if not case.twin:
            return _rogue(play_peer, ctx.base_path, case.script(), OBSERVE, give_up)

        def read():
            with open(os.path.join(ctx.workdir, TWIN_READ), "w"):
                pass

        def twin():
            script = case.script()
            return play_twin(
                ctx.base_path, case.rogue, script, observe=OBSERVE, give_up=give_up, on_read=read
            )

        return _rogue(twin)

    targets[case.rogue] = play
    result = _group(targets, case.world, seed)
    checks: list[Judged] = []
    seen = _alive(result, impl_ranks, checks)
    rogue = result.outcomes[case.rogue].value
    first_probe = None
    if case.twin and isinstance(rogue, tuple):
        rogue, first_probe = rogue
    root = seen.get(0)
    if first_probe == PROBE:
        checks.append(
            Judged(
                "INIT-8",
                False,
                "the first connection of a rank that announced itself twice never gets the probe",
                "it got 0x5a",
                0,
            )
        )
    if root is None and (case.ending in ("close", "half_close") or case.after == "close"):
        checks.append(
            Judged(
                "FAULT-1",
                False,
                "rank 0 survives a peer that closed (SIGPIPE at its default action)",
                result.outcomes[0].summary(),
                0,
            )
        )
    if not isinstance(rogue, PeerSeen) or not rogue.connected:
        if case.kind == "valid" and root is not None and root.init.failed:
            checks.append(
                Judged("WIRE-12", False, "a byte-level peer can connect", f"{rogue}; {root}", 0)
            )
        # Rank 0 gave up before the rogue got in (its init deadline passed while the ranks
        # were still starting, on a loaded machine): its bytes were never judged.
        return checks, root is None
    timed = impl.supports("deadlines")
    if case.kind != "valid":
        _judge_bad_peer(case, root, seen.get(1), rogue, timed=timed, checks=checks)
    elif root is not None:
        _judge_valid_peer(case, root, seen.get(1), rogue, timed=timed, seed=seed, checks=checks)
    _hygiene(seen, checks)
    return checks, True


def _judge_bad_peer(case, root, peer1, rogue: PeerSeen, *, timed, checks):
    cid = _BAD_CLAUSE[case.kind]
    what = f"announcement {case.handshake.hex() or '(no byte)'} ({case.kind.replace('_', ' ')})"
    checks.append(
        Judged(cid, rogue.probe != PROBE, f"a peer sending {what} never gets the probe", rogue, 0)
    )
    if root is not None:
        checks.append(
            Judged(
                cid,
                root.init.failed and s.says_uninitialized(root.initialized),
                f"{what} makes rank 0's initialize fail",
                f"{root.init}; is_initialized() {root.initialized}",
                0,
            )
        )
        if case.kind != "truncated" and root.init.failed:
            announced = unpack_rank(case.handshake)
            checks.append(
                Judged(
                    cid,
                    s.mentions(root.init.raised, announced),
                    f"rank 0's error names the {case.kind.replace('_', '-')} rank {announced}",
                    root.init,
                    0,
                )
            )
        if timed and case.deadlines[0] == STALL_DEADLINE and root.init.failed:
            checks.append(
                Judged(
                    cid,
                    _took(root.init) <= STALL_DEADLINE + s.MARGIN,
                    f"{what}, then a stall, fails rank 0 within its init deadline "
                    f"({STALL_DEADLINE:g} s + {s.MARGIN:g} s)",
                    root.init,
                    0,
                )
            )
    if peer1 is not None:
        checks.append(
            Judged(
                "WIRE-4",
                not (peer1.init.done and peer1.init.raised is None),
                "no peer gets the probe while another announced an invalid rank",
                f"peer 1's initialize {peer1.init}",
                0,
            )
        )


def _judge_valid_peer(case, root, peer1, rogue: PeerSeen, *, timed, seed, checks):
    want = s.payload(seed, case.size, "fuzz")
    if case.ending == "close":
        # It may close before or after the probe went out: only survival is judged.
        calls_ended = root.init.done and (root.bcast is None or root.bcast.done)
        checks.append(
            Judged(
                "FAULT-1",
                calls_ended,
                "a peer that closes after a valid announcement never hangs rank 0",
                f"initialize {root.init}, broadcast {root.bcast}",
                0,
            )
        )
        return
    checks.append(
        Judged(
            "WIRE-12",
            root.init.done and root.init.raised is None and rogue.probe == PROBE,
            "a byte-level peer whose valid announcement comes in chunks joins the group",
            f"initialize {root.init}; the peer saw {rogue}",
            0,
        )
    )
    if peer1 is not None and root.bcast is not None:
        checks.append(
            Judged(
                "BCAST-1",
                peer1.digest == s.digest(want),
                "peer 1, served before the rogue, receives exactly the root's bytes",
                f"peer 1 {peer1}",
                1,
            )
        )
    if case.after == "eof":
        checks.append(
            Judged(
                "WIRE-12",
                root.bcast is not None
                and root.bcast.done
                and root.bcast.raised is None
                and rogue.received == want,
                "the byte-level peer receives exactly the root's payload",
                f"broadcast {root.bcast}; {len(rogue.received)} of {len(want)} byte(s)",
                0,
            )
        )
        return
    if root.bcast is None:
        return
    unread = case.size - case.read
    if case.after == "close":
        checks.append(
            Judged(
                "FAULT-1",
                root.bcast.done and (unread < BIG // 2 or root.bcast.raised is not None),
                "a peer that closes mid-payload makes rank 0's broadcast raise, never hang",
                f"broadcast {root.bcast} with {unread} byte(s) unread",
                0,
            )
        )
    elif timed and unread >= BIG // 2:
        checks.append(
            Judged(
                "TIME-5",
                root.bcast.done
                and root.bcast.raised is not None
                and _took(root.bcast) <= STALL_IO_DEADLINE + s.MARGIN,
                f"a peer that stops reading fails rank 0's broadcast within its I/O deadline "
                f"({STALL_IO_DEADLINE:g} s + {s.MARGIN:g} s)",
                f"broadcast {root.bcast} with {unread} byte(s) unread",
                0,
            )
        )


@pytest.mark.clause(*_PEER_CLAUSES)
@pytest.mark.staged_via("uds-v1")
def test_fuzz_rogue_peer_handshake(tpbcast_run, tpbcast_impl):
    """Arbitrary handshake bytes, chunks and endings from a rogue peer against rank 0."""
    seed = tpbcast_run.seed

    def one(case: PeerCase, tally: Tally) -> None:
        checks, staged = _run_peer_case(tpbcast_impl, seed, case)
        tally.judge(case, checks, staged=staged)

    strategy = _peer_cases()
    _fuzz.run(
        "test_fuzz_rogue_peer_handshake",
        session_seed=seed,
        strategy=strategy,
        case_fn=one,
        clauses=_PEER_CLAUSES,
        what="a rogue peer's scripts against rank 0",
        examples=[example(c) for c in _PEER_EXAMPLES],
    )


# ------------------------------------------------------------------ rogue root


@dataclass(frozen=True)
class LinkCase:
    """What the rogue root sends one peer: probe (None: none), ``sent`` payload bytes."""

    probe: int | None
    sent: int
    cuts: tuple[int, ...]
    slow: tuple[bool, ...]
    ending: str

    def deadlines(self, size: int) -> tuple[float, float]:
        """The peer's (init, io) deadlines: short for the stage the root stalls in (none
        once the whole payload of ``size`` bytes went out)."""
        if self.ending != "stall" or (self.probe is not None and self.sent >= size):
            return CALM_DEADLINE, CALM_DEADLINE
        if self.probe is None:
            return STALL_DEADLINE, CALM_DEADLINE
        return CALM_DEADLINE, STALL_DEADLINE


@dataclass(frozen=True)
class RootCase:
    """The rogue is rank 0; ranks 1.. are the implementation, each with its own link."""

    world: int
    size: int
    links: tuple[LinkCase, ...]


@st.composite
def _link_cases(draw: Any, size: int) -> LinkCase:
    """What the rogue root sends one peer."""
    probe = draw(st.one_of(st.just(PROBE), st.just(PROBE), st.none(), st.integers(0, 255)))
    sent = 0
    if probe is not None:
        sent = draw(st.one_of(st.just(size), st.integers(0, size)))
    length = (probe is not None) + sent
    cuts = draw(st.lists(st.integers(1, max(1, length - 1)), max_size=6))
    slow = draw(st.lists(st.booleans(), min_size=len(cuts) + 1, max_size=len(cuts) + 1))
    ending = draw(st.sampled_from(("close", "stall")))
    return LinkCase(probe, sent, tuple(cuts), tuple(slow), ending)


@st.composite
def _root_cases(draw: Any) -> RootCase:
    """A rogue root's case."""
    world = draw(st.sampled_from((2, 3)))
    size = draw(st.sampled_from(SIZES))
    links = tuple(draw(_link_cases(size)) for _ in range(world - 1))
    return RootCase(world, size, links)


_ROOT_EXAMPLES: Final = (
    RootCase(2, 4097, (LinkCase(PROBE, 4097, (1, 2, 100, 4000), (True,) * 5, "close"),)),
    RootCase(3, 1, (LinkCase(0x13, 1, (), (False,), "close"), LinkCase(0, 0, (), (), "stall"))),
    RootCase(2, 1, (LinkCase(None, 0, (), (), "stall"),)),
    RootCase(2, 4097, (LinkCase(PROBE, 10, (3,), (False, True), "close"),)),
    RootCase(
        3,
        BIG,
        (
            LinkCase(PROBE, 5, (1,), (False, False), "stall"),
            LinkCase(PROBE, BIG, (2, 70000), (False, True, False), "close"),
        ),
    ),
)
_ROOT_CLAUSES: Final = (
    "FAULT-6",
    "WIRE-5",
    "TIME-4",
    "INIT-10",
    "WIRE-12",
    "BCAST-12",
    "FAULT-2",
    "TIME-5",
    "HYG-3",
)


def _link_script(seed, size, link: LinkCase) -> LinkScript:
    payload = s.payload(seed, size, "fuzz")[: link.sent]
    stream = probe_and(payload, link.probe)
    return LinkScript(Chunked(stream, link.cuts, link.slow), link.ending)  # type: ignore[arg-type]


def _run_root_case(impl, seed, case: RootCase) -> tuple[list[Judged], bool]:
    peers = list(range(1, case.world))
    deadlines = {r: case.links[r - 1].deadlines(case.size) for r in peers}

    def rogue(ctx):
        links = {r: _link_script(ctx.seed, case.size, case.links[r - 1]) for r in peers}
        return _rogue(play_root, ctx.base_path, len(peers), links, OBSERVE)

    targets: dict[int, Callable[..., object]] = {
        r: (
            lambda ctx, r=r: _impl_rank(
                ctx, impl, r, world=case.world, deadlines=deadlines[r], size=case.size
            )
        )
        for r in peers
    }
    targets[0] = rogue
    result = _group(targets, case.world, seed)
    checks: list[Judged] = []
    seen = _alive(result, peers, checks)
    root = result.outcomes[0].value
    staged = isinstance(root, RootSeen) and not root.error
    if not staged:
        return checks, len(seen) < len(peers) or any(p.init.failed for p in seen.values())
    timed = impl.supports("deadlines")
    want = s.payload(seed, case.size, "fuzz")
    for rank, peer in seen.items():
        _judge_link(rank, case.links[rank - 1], peer, want=want, timed=timed, checks=checks)
    _hygiene(seen, checks)
    return checks, True


def _judge_link(rank, link: LinkCase, peer: ImplSeen, *, want, timed, checks):
    init = peer.init
    init_deadline, deadline = link.deadlines(len(want))
    stall = link.ending == "stall"
    if link.probe is None:
        checks.append(
            Judged(
                "WIRE-5",
                init.failed and s.says_uninitialized(peer.initialized),
                f"without a probe (the root then {'stalls' if stall else 'closes'}), a peer's "
                "initialize fails",
                f"{init}; is_initialized() {peer.initialized}",
                rank,
            )
        )
        if stall and timed:
            checks.append(
                Judged(
                    "TIME-4",
                    init.failed and _took(init) <= init_deadline + s.MARGIN,
                    f"a probe that never comes fails the peer within its init deadline "
                    f"({init_deadline:g} s + {s.MARGIN:g} s)",
                    init,
                    rank,
                )
            )
        return
    if link.probe != PROBE:
        checks.append(
            Judged(
                "INIT-10",
                init.failed and s.says_uninitialized(peer.initialized),
                f"probe 0x{link.probe:02x} fails the peer's initialize",
                f"{init}; is_initialized() {peer.initialized}",
                rank,
            )
        )
        return
    checks.append(
        Judged(
            "WIRE-12",
            init.done and init.raised is None,
            "a peer bootstraps with a byte-level root whose probe comes in chunks",
            init,
            rank,
        )
    )
    bcast = peer.bcast
    if bcast is None:
        return
    if link.sent == len(want):
        checks.append(
            Judged(
                "BCAST-12",
                bcast.done and bcast.raised is None and peer.digest == s.digest(want),
                f"a payload of {len(want)} byte(s) arriving in arbitrary chunks is received intact",
                f"broadcast {bcast}",
                rank,
            )
        )
    elif not stall:
        checks.append(
            Judged(
                "FAULT-2",
                bcast.failed and _took(bcast) < PROMPT,
                f"a root that closes after {link.sent} of {len(want)} byte(s) fails the "
                f"peer's broadcast promptly (under {PROMPT:g} s, deadline {deadline:g} s)",
                bcast,
                rank,
            )
        )
    elif timed:
        checks.append(
            Judged(
                "TIME-5",
                bcast.failed and _took(bcast) <= deadline + s.MARGIN,
                f"a root that stalls after {link.sent} of {len(want)} byte(s) fails the peer's "
                f"broadcast within its I/O deadline ({deadline:g} s + {s.MARGIN:g} s)",
                bcast,
                rank,
            )
        )


@pytest.mark.clause(*_ROOT_CLAUSES)
@pytest.mark.staged_via("uds-v1")
def test_fuzz_rogue_root_stream(tpbcast_run, tpbcast_impl):
    """Arbitrary probe bytes, payload prefixes, chunks and endings from a rogue root."""
    seed = tpbcast_run.seed

    def one(case: RootCase, tally: Tally) -> None:
        checks, staged = _run_root_case(tpbcast_impl, seed, case)
        tally.judge(case, checks, staged=staged)

    _fuzz.run(
        "test_fuzz_rogue_root_stream",
        session_seed=seed,
        strategy=_root_cases(),
        case_fn=one,
        clauses=_ROOT_CLAUSES,
        what="a rogue root's scripts against the peers",
        examples=[example(c) for c in _ROOT_EXAMPLES],
    )
