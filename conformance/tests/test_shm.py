"""SHM: shared-memory transports, judged from outside (scope ``shm``).

Every fault is staged by the harness or by the suite's own code in a rank (SIGKILL of a
rank or of its process group, a reader that stops reading, reset() from another thread)
and first proven to have happened; the reaction is observed from outside the
implementation (:mod:`tpbcast.harness.observe`: the names each process holds, open,
mapped or bound, directory listings, ``os.stat``, its descendants).  A call a wrong implementation
blocks in runs in a daemon thread (``_watch.Call``): at the clause's bound the rank stops
waiting and the test judges FAIL, so a hang is judged, not waited out.  Dead-peer tests
keep broadcasting past what the transport buffers (``_support.dead_peer_rounds``).  A
dead writer or reader on a ring is FAULT-2 and FAULT-1 (``test_bounded.py``, every
transport), not a clause of its own here.

Optional adapter members read here, never required: ``chunk_size()`` (bytes per ring
slot: payloads of several chunks) and ``buffered_broadcasts`` (how many broadcasts, one
chunk each at most, the writer may run ahead of its slowest reader: the ring's slots).
With the ``deadlines`` capability the I/O deadline is set to 60 s, far above every bound
here: a detection must come from the implementation seeing the death, not from a timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tpbcast.harness import Kill, observe
from tpbcast.harness.runtime import claim

from . import _support as s
from . import _watch

DETECT = 10.0  # SHM-9, SHM-11: a dead peer or a lost payload is an error by then
RELEASE = 5.0  # SHM-7, SHM-8: reset releases a blocked call by then
HELPER_GRACE = 5.0  # SHM-12
IO = 60.0  # the I/O deadline set when the implementation has ``deadlines``
STUCK_WINDOW = 0.5  # a call that made no progress for this long is blocked (observation)
GROUP = 25.0
SPREAD_TOP = 24  # without chunk_size(): sizes around 2**k up to 16 MiB


def _make(impl):
    return s.make(impl, connect=10.0, init=10.0, io=IO)


def _member(bcast, name, default):
    """The optional adapter member ``chunk_size()``, or ``default``."""
    get = getattr(bcast, name, None)
    if callable(get):
        try:
            return int(get())
        except Exception:
            return default
    return default


def _slots(bcast):
    """Ring slots: the broadcasts the adapter declares its transport buffers
    (``buffered_broadcasts``), each one chunk at most; 0 if undeclared."""
    declared = getattr(bcast, "buffered_broadcasts", None)
    return declared if isinstance(declared, int) and declared > 0 else 0


def _chunk(bcast):
    return _member(bcast, "chunk_size", 64 * 1024)


def _above_chunk(bcast):
    """A payload of several chunks: twice the declared chunk size plus one byte, or without
    ``chunk_size()`` 16 MiB + 1 (above any slot size an engine plausibly uses, so a
    transport with a second path for large messages takes it)."""
    chunk = _member(bcast, "chunk_size", 0)
    return 2 * chunk + 1 if chunk else (16 << 20) + 1


def _loop(bcast, count, size, progress, root):
    """``count`` broadcasts of ``size`` bytes; ``progress`` gets each finished index."""
    for index in range(count):
        buf = bytearray(b"\x5a" * size) if root else bytearray(size)
        bcast.broadcast(buf)
        progress.append(index)
    return len(progress)


def _stuck(call, progress, timeout=10.0):
    """True once ``call`` made no progress for STUCK_WINDOW s (proving a call does not
    move needs an observation window); False if it ended or ``timeout`` passed first."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        if call.done:
            return False
        now, seen = time.monotonic(), len(progress)
        if seen != last:
            last, since = seen, now
        elif now - since >= STUCK_WINDOW:
            return True
        time.sleep(0.01)  # polling interval of the observation, not a synchronisation
    return False


def _await_death(ctx, rank, timeout=15.0):
    """Poll until ``rank``'s process has exited; the monotonic time then, or None."""
    pid = observe.published_pid(ctx.workdir, rank, timeout)
    return None if pid is None else observe.wait_dead(pid, timeout)


def _kill_own_group(ctx):
    """The fault of the process-group variants: SIGKILL to this rank's process group."""
    ctx.record("fault", action="SIGKILL to the rank's process group")
    observe.kill(os.getpid(), group=True)


def _reset_bounded(bcast, bound=RELEASE):
    """reset() in a daemon thread: (returned within ``bound``, what it raised)."""
    call = _watch.Call(bcast.reset)
    call.wait(bound)
    end = call.ended()
    return end.done, end.raised


# ------------------------------------------------------------------ SHM-1, SHM-4, SHM-12


def _observed_life(impl, obs, *, watch_root=False, victim=None, how="kill"):
    """init, broadcasts, observe what each rank holds; then the victim dies (``how``:
    ``kill`` by the harness plan, ``killpg`` by the rank itself) and the others reset."""

    def target(ctx):
        observe.private_tmpdir(ctx.workdir)
        s.publish_pid(ctx)
        me = os.path.join(obs, f"r{ctx.rank}")
        observe.save_observation(me + ".pgrp", os.getpgrp())
        ctx.sync("ready")
        before, kids = observe.held(), observe.descendants()
        early: dict[str, observe.Held] = {}
        if watch_root and ctx.rank == 1:
            base_dir = os.path.dirname(ctx.base_path)
            listed = set(s.entries(base_dir))
            ctx.notify("listed")
            ctx.wait("initializing", timeout=15)
            pid0 = observe.load_observation(os.path.join(obs, "r0.pid"))
            root_before = observe.load_observation(os.path.join(obs, "r0.before"), {})

            def appeared():
                return set(s.entries(base_dir)) - listed or observe.new_held(
                    root_before, observe.held(pid0)
                )

            s.wait_for(appeared, 5.0)
            early = observe.new_held(root_before, observe.held(pid0))
            loose = observe.modes_in(base_dir, sorted(set(s.entries(base_dir)) - listed))
            observe.save_observation(me + ".early", (early, loose))
        if watch_root and ctx.rank == 0:
            observe.save_observation(os.path.join(obs, "r0.pid"), os.getpid())
            observe.save_observation(os.path.join(obs, "r0.before"), before)
            ctx.wait("listed", timeout=15)
            ctx.notify("initializing")
        bcast = _make(impl)
        bcast.initialize(ctx.rank, ctx.world_size, ctx.base_path)
        seen = observe.new_held(before, observe.held())
        s.group_roundtrip(ctx, bcast, [100, 3 * _chunk(bcast) + 1, 1])
        seen.update(observe.new_held(before, observe.held()))
        helpers = observe.descendants() - kids
        observe.save_observation(me, {"held": seen, "helpers": helpers})
        ctx.sync("observed")
        if victim in (ctx.rank, "all"):
            if how == "killpg":
                _kill_own_group(ctx)
            ctx.point("die")
        if victim is not None:
            _await_death(ctx, 0 if victim == "all" else victim)
        returned, raised = _reset_bounded(bcast)
        left = observe.alive(helpers)
        return returned, raised, left

    return target


def _gather(obs, world_size):
    held, helpers = {}, set()
    for rank in range(world_size):
        seen = observe.load_observation(
            os.path.join(obs, f"r{rank}"), {"held": {}, "helpers": set()}
        )
        held.update(seen["held"])
        helpers |= seen["helpers"]
    return held, helpers


def _judge_left(cid, result, obs, when):
    """Held names still named anywhere, and anything new in the group's workdir (the base
    path's directory and the ranks' TMPDIR: the harness's leftover check).  What is still
    named is handed to the suite's cleanup (removed after the test, listed in its report),
    with the pid of the rank whose processes held it."""
    left = []
    for rank, outcome in enumerate(result.outcomes):
        seen = observe.load_observation(os.path.join(obs, f"r{rank}"), {"held": {}})
        named = observe.still_named(seen["held"], [observe.SHM_DIR, "/tmp"])
        for text, path, key in sorted(named, key=lambda n: n[0]):
            left.append(text)
            if key is not None and not path.startswith(result.workdir + "/"):
                claim(path, key, outcome.pid, result.label)
    left = sorted(set(left))
    s.check(
        cid,
        not left,
        f"no name the implementation created is left ({when})",
        f"still there: {left}",
    )
    left = [
        p
        for p in result.leftover_files
        if not os.path.basename(p).startswith(observe.PID_FILE_PREFIX)
    ]
    s.check(
        cid,
        not left,
        f"nothing is left in the base path's directory, which is also TMPDIR ({when})",
        f"left: {left}",
    )


def _judge_helpers(result, obs, when):
    _, helpers = _gather(obs, result.world_size)
    for outcome in result.outcomes:
        if s.status_of(outcome) == "OK" and outcome.value is not None:
            _, _, left = outcome.value
            s.check(
                "SHM-12",
                not left,
                f"no process the implementation started is alive when reset returns ({when})",
                observe.describe(left),
                rank=outcome.rank,
            )
    still = observe.wait_gone(helpers, HELPER_GRACE)
    s.check(
        "SHM-12",
        not still,
        f"no process the implementation started is alive {HELPER_GRACE:g} s after its "
        f"rank ended ({when})",
        observe.describe(still),
    )


def _obs_dir(tmp_path):
    """Where ranks leave their observations (outside the group's workdir, which is judged)."""
    obs = tmp_path / "obs"
    obs.mkdir()
    return str(obs)


@pytest.mark.clause("SHM-1", "SHM-4", "SHM-12")
@pytest.mark.world_size(2, 3)
def test_reset_leaves_no_name_and_names_are_private(
    tpbcast_run, tpbcast_impl, tmp_path, world_size
):
    obs = _obs_dir(tmp_path)
    result = tpbcast_run(_observed_life(tpbcast_impl, obs, watch_root=True), timeout=GROUP)
    s.precondition(
        "SHM-1",
        all(o.value[0] for o in result.outcomes),
        "a rank's reset() did not return",
    )
    _judge_left("SHM-1", result, obs, "every rank reset")
    held, _ = _gather(obs, world_size)
    early, loose_files = observe.load_observation(os.path.join(obs, "r1.early"), ({}, []))
    loose = sorted(set(observe.loose(held) + observe.loose(early) + loose_files))
    s.check(
        "SHM-4",
        held or early,
        "the suite saw the names the implementation holds (segment, socket, file)",
        "no name at all: nothing to judge the modes of",
    )
    s.check(
        "SHM-4",
        not loose,
        "every segment, IPC socket and rendezvous file is 0600 or stricter",
        loose,
    )
    _judge_helpers(result, obs, "after reset")


_EXIT_SCRIPT = """
import os, sys
from tpbcast.harness import load_implementation, observe
spec, rank, world, base, out = sys.argv[1:6]
rank, world = int(rank), int(world)
impl = load_implementation(spec)
before, kids = observe.held(), observe.descendants()
bcast = impl.create()
bcast.reset()
if impl.supports("deadlines"):
    bcast.set_deadlines(connect=20.0, init=20.0, io=20.0)
bcast.initialize(rank, world, base)
seen = observe.new_held(before, observe.held())
buf = bytearray(b"x" * 100) if rank == 0 else bytearray(100)
bcast.broadcast(buf)
seen.update(observe.new_held(before, observe.held()))
helpers = observe.descendants() - kids
observe.save_observation(out, {"held": seen, "helpers": helpers, "ok": bytes(buf) == b"x" * 100})
print("broadcast done", flush=True)
# no reset(): the interpreter exits normally (atexit handlers run)
"""


@pytest.mark.clause("SHM-2", "SHM-12")
def test_normal_exit_leaves_no_name(tpbcast_run, tpbcast_impl, tmp_path):
    obs = _obs_dir(tmp_path)
    path = os.pathsep.join(p for p in sys.path if p)

    def target(ctx):
        env = dict(os.environ, TMPDIR=ctx.workdir, PYTHONPATH=path)
        out = os.path.join(obs, f"r{ctx.rank}")
        argv = [sys.executable, "-c", _EXIT_SCRIPT, tpbcast_impl.spec]
        argv += [str(ctx.rank), "2", ctx.base_path, out]
        try:
            proc = subprocess.run(argv, capture_output=True, timeout=30, check=False, env=env)
        except subprocess.TimeoutExpired:
            return False, None, "the interpreter did not end within 30 s"
        ran = b"broadcast done" in proc.stdout
        return ran, proc.returncode, proc.stderr.decode(errors="replace")[-1500:]

    # Fresh interpreters importing the engine (torch, vLLM) may take 15 s each on 2 busy cores.
    result = tpbcast_run(target, 2, timeout=40)
    for outcome in result.outcomes:
        ran, code, err = outcome.value
        s.precondition(
            "SHM-2",
            ran and code == 0,
            f"rank {outcome.rank}'s interpreter did not broadcast and exit normally "
            f"(exit status {code}): {err}",
        )
    _judge_left("SHM-2", result, obs, "every rank's interpreter exited without reset")
    _, helpers = _gather(obs, 2)
    still = observe.wait_gone(helpers, HELPER_GRACE)
    s.check(
        "SHM-12",
        not still,
        f"no process the implementation started is alive {HELPER_GRACE:g} s after its "
        "rank's interpreter exited",
        observe.describe(still),
    )


# ------------------------------------------------------------------ SHM-3, SHM-12


@pytest.mark.clause("SHM-3", "SHM-12")
@pytest.mark.parametrize(
    "case",
    [(0, "kill"), (0, "killpg"), (1, "kill"), ("all", "kill")],
    ids=["root-sigkill", "root-group-sigkill", "reader-sigkill", "every-rank-sigkill"],
)
def test_sigkill_leaves_no_name(tpbcast_run, tpbcast_impl, tpbcast_faults, tmp_path, case):
    victim, how = case
    obs = _obs_dir(tmp_path)
    victims = [0, 1] if victim == "all" else [victim]
    if how == "kill":
        for rank in victims:
            tpbcast_faults.at(rank, "die", Kill(signal.SIGKILL))
    result = tpbcast_run(
        _observed_life(tpbcast_impl, obs, victim=victim, how=how),
        2,
        faults=tpbcast_faults,
        fail_fast=False,
        expect_failure=True,
        timeout=GROUP,
    )
    test_pgrp = os.getpgrp()
    for rank in victims:
        outcome = result.outcomes[rank]
        s.fault_happened(
            "SHM-3", outcome.signal_name == "SIGKILL", f"rank {rank}: {outcome.summary()}"
        )
        s.precondition(
            "SHM-3",
            observe.load_observation(os.path.join(obs, f"r{rank}.pgrp")) != test_pgrp,
            "the rank shares the test's process group",
        )
    what = {
        "kill": f"rank {victim} SIGKILLed",
        "killpg": f"rank {victim}'s process group SIGKILLed",
    }[how]
    if victim == "all":
        what = "every rank SIGKILLed"
    _judge_left("SHM-3", result, obs, what)
    _judge_helpers(result, obs, what)


# ------------------------------------------------------------------ SHM-7, SHM-8


@pytest.mark.idle_wait
@pytest.mark.clause("SHM-7")
def test_reset_releases_a_blocked_writer(tpbcast_run, tpbcast_impl):
    def target(ctx):
        bcast = _make(tpbcast_impl)
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        s.group_roundtrip(ctx, bcast, [100])
        if ctx.rank == 1:
            ctx.wait("writer_done", timeout=15)  # the reader stops reading: the ring fills
            _reset_bounded(bcast)
            return None
        progress: list[int] = []
        count = s.dead_peer_rounds(bcast)
        call = _watch.Call(_loop, bcast, count, min(_chunk(bcast), 64 * 1024), progress, True)
        stuck = _stuck(call, progress)
        if not stuck:
            ctx.notify("writer_done")
            return False, call.ended(), None, None
        start = time.monotonic()
        returned, raised = _reset_bounded(bcast)
        call.wait(max(0.0, start + RELEASE - time.monotonic()))
        end = call.ended()
        ctx.notify("writer_done")
        return True, end, returned, raised

    result = tpbcast_run(target, 2, timeout=GROUP)
    stuck, end, returned, raised = result.outcomes[0].value
    s.precondition("SHM-7", stuck, f"rank 0 never blocked on a full ring: its broadcasts {end}")
    s.check(
        "SHM-7",
        returned,
        f"reset() returns within {RELEASE:g} s while a broadcast waits for room",
        "it was still running" if not returned else raised,
        rank=0,
    )
    s.check(
        "SHM-7",
        end.failed,
        f"the waiting broadcast raises within {RELEASE:g} s of reset()",
        end,
        rank=0,
    )


@pytest.mark.idle_wait
@pytest.mark.clause("SHM-8")
@pytest.mark.parametrize("by", ["own-reset", "root-reset"])
def test_reset_releases_a_blocked_reader(tpbcast_run, tpbcast_impl, by):
    def target(ctx):
        bcast = _make(tpbcast_impl)
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        s.group_roundtrip(ctx, bcast, [100])
        if ctx.rank == 0:
            ctx.wait("reader_blocked", timeout=15)
            if by == "root-reset":
                _reset_bounded(bcast)
                ctx.notify("root_reset")
            ctx.wait("reader_done", timeout=15)
            if by != "root-reset":
                _reset_bounded(bcast)
            return None
        progress: list[int] = []
        call = _watch.Call(_loop, bcast, 1, 100, progress, False)
        stuck = _stuck(call, progress)
        ctx.notify("reader_blocked")
        returned = raised = None
        if not stuck:
            ctx.notify("reader_done")
            return False, call.ended(), None, None
        if by == "root-reset":
            _watch.notified(ctx, "root_reset", 15)
            start = time.monotonic()
        else:
            start = time.monotonic()
            returned, raised = _reset_bounded(bcast)
        call.wait(max(0.0, start + RELEASE - time.monotonic()))
        end = call.ended()
        ctx.notify("reader_done")
        if by == "root-reset" and end.done:
            _reset_bounded(bcast)
        return True, end, returned, raised

    result = tpbcast_run(target, 2, timeout=GROUP)
    stuck, end, returned, raised = result.outcomes[1].value
    s.precondition("SHM-8", stuck, f"the reader never blocked: its broadcast {end}")
    who = "its own reset() from another thread" if by == "own-reset" else "rank 0's reset()"
    if by == "own-reset":
        s.check(
            "SHM-8",
            returned,
            f"the reader's reset() returns within {RELEASE:g} s while its broadcast waits",
            "it was still running" if not returned else raised,
            rank=1,
        )
    s.check(
        "SHM-8",
        end.failed,
        f"a reader's broadcast waiting for data raises within {RELEASE:g} s of {who}",
        end,
        rank=1,
    )


# ------------------------------------------------------------------ SHM-9


@pytest.mark.idle_wait
@pytest.mark.clause("SHM-9")
@pytest.mark.parametrize("how", ["reset", "exit", "kill"])
@pytest.mark.parametrize("when", ["queued", "in-flight"])
def test_payload_before_teardown_is_delivered_or_reported(
    tpbcast_run, tpbcast_impl, tpbcast_faults, how, when
):
    """Rank 0's broadcast returns, then rank 0 resets, exits without reset or is
    SIGKILLed.  ``queued``: a small payload the reader only asks for after the teardown;
    ``in-flight``: the reader is already waiting and the payload is above the chunk size
    (several chunks; vLLM's overflow path)."""
    if how == "kill":
        tpbcast_faults.at(0, "teardown", Kill(signal.SIGKILL))

    def target(ctx):
        s.publish_pid(ctx)
        bcast = _make(tpbcast_impl)
        bcast.initialize(ctx.rank, 2, ctx.base_path)
        s.group_roundtrip(ctx, bcast, [100])
        size = 100 if when == "queued" else _above_chunk(bcast)
        data = s.payload(ctx.seed, size, ("shm9", how, when))
        if ctx.rank == 0:
            if when == "in-flight":
                ctx.wait("reader_waiting", timeout=15)
            bcast.broadcast(bytearray(data))
            ctx.notify("sent")
            if how == "reset":
                _reset_bounded(bcast)
            ctx.point("teardown")
            return "sent"
        buf = bytearray(b"\xa5" * size)
        call = None
        if when == "in-flight":
            call = _watch.Call(bcast.broadcast, buf)
            _stuck(call, [], timeout=5.0)
            ctx.notify("reader_waiting")
        sent = _watch.notified(ctx, "sent", 30)
        gone = _await_death(ctx, 0)
        if call is None:
            call = _watch.Call(bcast.broadcast, buf)
        start = time.monotonic() if gone is None else gone
        call.wait(max(0.0, start + DETECT - time.monotonic()))
        end = call.ended()
        got = s.digest(buf) if end.done else None
        return sent, gone is not None, end, got, s.digest(data)

    result = tpbcast_run(
        target, 2, faults=tpbcast_faults, fail_fast=False, expect_failure=True, timeout=GROUP
    )
    root, reader = result.outcomes
    if how == "kill":
        s.killed("SHM-9", root)
    else:
        s.precondition("SHM-9", s.status_of(root) == "OK", f"rank 0 failed: {root.summary()}")
    if not s.check(
        "SHM-9", s.status_of(reader) == "OK", "the reader lives on", reader.summary(), rank=1
    ):
        return
    sent, gone, end, got, want = reader.value
    s.precondition("SHM-9", sent and gone, "rank 0's broadcast did not return before it ended")
    teardown = {"reset": "reset()", "exit": "exit without reset", "kill": "SIGKILL"}[how]
    s.check(
        "SHM-9",
        end.done and (end.failed or got == want),
        f"a {when} payload rank 0 sent before its {teardown} reaches the reader intact, or "
        f"the reader's broadcast raises within {DETECT:g} s",
        end if not end.done or end.failed else "it returned other bytes than rank 0 sent",
        rank=1,
    )


# ------------------------------------------------------------------ SHM-10


def _sizes(chunk, slots):
    if chunk:
        sizes = {n + d for n in (chunk, 2 * chunk, 3 * chunk) for d in (-1, 0, 1)}
        if slots:
            sizes |= {slots * chunk + d for d in (-1, 0, 1)}
            sizes.add((slots + 2) * chunk + 7)
        return sorted(n for n in sizes if n > 0)
    return sorted({(1 << k) + d for k in range(10, SPREAD_TOP + 1, 2) for d in (-1, 0, 1)})


@pytest.mark.clause("SHM-10")
@pytest.mark.world_size(2, 3)
def test_payloads_around_the_chunk_size(tpbcast_run, tpbcast_impl, world_size):
    def target(ctx):
        bcast = _make(tpbcast_impl)
        bcast.initialize(ctx.rank, ctx.world_size, ctx.base_path)
        chunk = _member(bcast, "chunk_size", 0)
        sizes = _sizes(chunk, _slots(bcast))
        got = s.group_roundtrip(ctx, bcast, sizes, salt="shm10")
        ctx.sync("received")  # sizes only: a payload lost at the root's teardown is SHM-9's
        bcast.reset()
        return sizes, got

    result = tpbcast_run(target, timeout=GROUP)
    sizes, _ = result.outcomes[0].value
    want = s.expected_digests(result.seed, sizes, salt="shm10")
    for outcome in result.outcomes[1:]:
        _, got = outcome.value
        wrong = [n for n, a, b in zip(sizes, got, want, strict=True) if a != b]
        s.check(
            "SHM-10",
            not wrong,
            f"payloads around the chunk size arrive intact at world size {world_size}",
            f"wrong bytes for sizes {wrong}",
            rank=outcome.rank,
        )


# ------------------------------------------------------------------ SHM-11


def _stale_target(tpbcast_impl, earlier, world):
    """The ranks of :func:`test_stale_segment_is_refused`."""

    def target(ctx):
        s.publish_pid(ctx)
        if ctx.rank == 2:
            ctx.wait("reader_done", timeout=15)  # never joins: rank 0 stays in its bootstrap
            return None
        bcast = _make(tpbcast_impl)
        if ctx.rank == 0:
            bcast.initialize(0, world, ctx.base_path)
            s.group_roundtrip(ctx, bcast, [100])
            if earlier == "root-reset":
                bcast.reset()
                ctx.notify("root_gone")
                ctx.wait("reader_done", timeout=15)
                return "reset"
            ctx.point("gone")
            return None
        first = _watch.Call(bcast.initialize, 1, world, ctx.base_path)
        if earlier == "root-killed-in-bootstrap":
            first.wait(5.0)  # rank 0 is still waiting for rank 2: its names are published
            observe.kill(s.published_pid(ctx, 0, "SHM-11"))
            ctx.record("fault", action="SIGKILL rank 0 during its bootstrap")
            gone = _await_death(ctx, 0) is not None
        else:
            first.wait(15.0)
            joined = first.ended()
            if not joined.done or joined.failed:
                ctx.notify("reader_done")
                return None, joined, None
            s.group_roundtrip(ctx, bcast, [100])
            if earlier == "root-reset":
                gone = _watch.notified(ctx, "root_gone", 15)
            else:
                gone = _await_death(ctx, 0) is not None
        _reset_bounded(bcast)
        again = s.make(tpbcast_impl, connect=s.SHORT, init=s.SHORT, io=s.SHORT)
        call = _watch.Call(again.initialize, 1, world, ctx.base_path)
        call.wait(DETECT)
        end = call.ended()
        late = None
        if end.done and not end.failed:
            late = s.attempt(again.broadcast, bytearray(100))
        ctx.notify("reader_done")
        return gone, end, late

    return target


@pytest.mark.idle_wait
@pytest.mark.clause("SHM-11")
@pytest.mark.parametrize("earlier", ["root-killed", "root-reset", "root-killed-in-bootstrap"])
def test_stale_segment_is_refused(tpbcast_run, tpbcast_impl, tpbcast_faults, earlier):
    """A reader joined a group whose rank 0 was then SIGKILLed (after the bootstrap, or
    during it: rank 2 never came, so whatever rank 0 published for its readers is still
    there) or reset and stays away.  The reader resets and initializes again at the same
    base path: there is no rank 0 to join, so initialize must raise (within its short
    deadlines, or DETECT s without them), never join what the earlier group left."""
    world = 3 if earlier == "root-killed-in-bootstrap" else 2
    if earlier == "root-killed":
        tpbcast_faults.at(0, "gone", Kill(signal.SIGKILL))

    target = _stale_target(tpbcast_impl, earlier, world)

    result = tpbcast_run(
        target, world, faults=tpbcast_faults, fail_fast=False, expect_failure=True, timeout=GROUP
    )
    root, reader = result.outcomes[0], result.outcomes[1]
    if earlier != "root-reset":
        s.killed("SHM-11", root)
    s.precondition("SHM-11", s.status_of(reader) == "OK", f"the reader failed: {reader.summary()}")
    gone, end, late = reader.value
    # The group the stale names come from never formed: the implementation's own bootstrap
    # denies the staging (judged by INIT/TIME clauses), not the suite.
    if not s.stageable(
        "SHM-11", gone is not None, f"the reader's first initialize did not succeed: {end}"
    ):
        return
    s.precondition("SHM-11", gone, "the earlier rank 0 was not seen gone")
    s.check(
        "SHM-11",
        end.failed,
        f"a reader's initialize against what a group whose {earlier.replace('-', ' ')} left "
        f"raises within its deadlines ({DETECT:g} s at most), never joins",
        end if not end.done or end.failed else f"it joined; a broadcast then {late or 'returned'}",
        rank=1,
    )
