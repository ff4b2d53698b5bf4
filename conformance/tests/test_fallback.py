"""FALLBACK: the dispatch layer above the broadcaster.

Capability ``dispatch`` (DESIGN.md, "Adapter contract").

The capability promises ``make_dispatcher(*, engine, rank, world_size, workdir,
group_timeout, connect, init, io)`` on the broadcaster object, returning a per-rank
dispatcher that drives THAT broadcaster and runs its fallback on ``engine``:
``bootstrap(*, local_world_size, base_path, tp_rank=None, dp_rank=None) -> decision``
(``decision.path`` is "uds" or "collective", ``decision.failed_ranks``; the same arguments
again change nothing, explicit ranks must match ``rank % world_size`` / ``rank //
world_size``), ``broadcast_cpu(buffers, root=0, mode="tp") -> path``, ``calls()`` (its
own record: ``("uds", n)``, ``("collective", n)``, ``("sync_communication",)``,
``("device_sync",)``), ``clear_calls()`` and ``teardown()``.

Suite-owned observation: ``engine`` is the suite's (:mod:`._fallback_engine`), a real
gloo engine over a process group the suite created, recording every call made on it;
the group's own collective counter shows collectives that bypassed the engine.  The
FALLBACK clauses are judged from what the engine and the group saw, from the data the
ranks received and from the broadcaster's state; ``calls()`` is only compared against
that truth (FALLBACK-12: the dispatcher's report must not lie).

Every dispatch group imports torch in each rank, so the observations are gathered by ONE
group run per conformance run, shared by the xdist workers (fixture ``observed``), and
each clause's test judges its part.  Each rank keeps what it observed after every
scenario, so a run that breaks off (a rank crashed or hung) still hands the scenarios it
finished to their clauses; only a clause whose scenario never ran is ERROR.  TP=1 (rank 0
alone) runs first, the riskiest scenario (one rank's bootstrap fails, the others wait for
it) last.  Whatever one
rank observes of state the other ranks can change (the shared workdir, rank 0's socket)
is observed between two ``ctx.sync`` barriers, never raced.

The suite releases a bootstrap that blocks (:func:`_run_bootstrap`): rank 0 waiting for a
peer whose own bootstrap failed, with no init deadline, would never return and the whole
run would end ERROR although the violation (no consensus, ever) was plain to see.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import re
import time
import warnings
from dataclasses import dataclass
from typing import Any

import pytest

from tpbcast.conformance.plugin import require
from tpbcast.harness import run_ranks, wire

from . import _support as s
from . import _watch
from ._fallback_engine import COLLECTIVE, DEVICE_SYNC, SYNC_COMMUNICATION

GROUP_TIMEOUT = 10.0
# The dispatcher's broadcaster deadlines (their sum must stay below GROUP_TIMEOUT).
CONNECT = INIT = 1.0
SIZES = (5, 300, 1)
FALLBACK_SEQUENCE = [COLLECTIVE, SYNC_COMMUNICATION, DEVICE_SYNC]
# Rank 1's bootstrap fails in the consensus phase (a base path over the 107-byte limit).
FAILING_RANK = 1
# Rank 0's bootstrap waits for its peers at most its deadlines (connect + init); one still
# running this long after it began has overstayed them by the suite's margin, and the
# suite releases it (_run_bootstrap).  Well below GROUP_TIMEOUT: the ranks that already
# sit in the bootstrap's consensus collective must not time out meanwhile.
RELEASE_AFTER = CONNECT + INIT + s.MARGIN
# How often the suite connects-and-closes before it joins as the missing peer instead.
POKES = 3


def _path(value):
    """``"uds"``/``"collective"`` from a str, an enum or a decision."""
    value = getattr(value, "path", value)
    return str(getattr(value, "value", value)).lower()


def _claimed(dispatcher):
    """The dispatcher's own record (``calls()``); FALLBACK-12 compares it with the truth."""
    try:
        return [tuple(event) for event in dispatcher.calls()]
    except Exception as exc:
        return f"calls() raised {type(exc).__name__}: {exc}"


@dataclass
class _Rig:
    """One rank's dispatch stack: the suite's engine, the broadcaster, its dispatcher."""

    ctx: Any
    impl: Any
    engine: Any
    bcast: Any
    dispatcher: Any

    @classmethod
    def build(cls, ctx, impl, engine, *, rank, world_size):
        bcast = impl.create()
        bcast.reset()
        dispatcher = bcast.make_dispatcher(
            engine=engine,
            rank=rank,
            world_size=world_size,
            workdir=ctx.workdir,
            group_timeout=GROUP_TIMEOUT,
            connect=CONNECT,
            init=INIT,
            io=GROUP_TIMEOUT,
        )
        return cls(ctx, impl, engine, bcast, dispatcher)

    def clear(self):
        self.engine.clear()
        with contextlib.suppress(Exception):  # FALLBACK-12 judges a broken record, not this
            self.dispatcher.clear_calls()

    def group_delta(self, before):
        after = self.engine.group_collectives()
        return None if before is None or after is None else after - before


def _call(rig, buffers, **kwargs):
    """One ``broadcast_cpu``: its result, what the engine and the group saw, its own record."""
    rig.clear()
    before = rig.engine.group_collectives()
    box = []
    raised = s.attempt(lambda: box.append(rig.dispatcher.broadcast_cpu(buffers, **kwargs)))
    return {
        "path": _path(box[0]) if box else None,
        "error": raised,
        "group": rig.group_delta(before),
        "engine": rig.engine.events(),
        "claimed": _claimed(rig.dispatcher),
    }


def _data_call(rig, datas):
    """Broadcast ``datas`` (rank 0's bytes; the others start from their complement)."""
    bufs = [
        bytearray(data) if rig.ctx.rank == 0 else bytearray(b ^ 0xFF for b in data)
        for data in datas
    ]
    seen = _call(rig, bufs)
    seen["ok"] = [bytes(buf) for buf in bufs] == list(datas)
    return seen


def _refused(rig, label, make, **kwargs):
    """A call the dispatcher must refuse, then a data call proving nothing was left in flight."""
    buffers = make(rig.ctx.rank)
    before = [bytes(b) for b in buffers if isinstance(b, bytearray)]
    seen = _call(rig, buffers, **kwargs)
    seen["touched"] = [bytes(b) for b in buffers if isinstance(b, bytearray)] != before
    seen["tail"] = _data_call(rig, [s.payload(rig.ctx.seed, 64, (label, "tail"))])
    return seen


def _four_bytes(rank):
    return [bytearray(b"\x01\x02\x03\x04" if rank == 0 else 4)]


def _meta_tensor(rank):
    import torch

    return [torch.empty(4, device="meta")]  # not CPU memory, and needs no GPU


@contextlib.contextmanager
def _warnings_and_logs():
    """Collect the text of every warning and WARNING+ log record raised inside the block."""
    seen: list[str] = []

    class _Handler(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    handler = _Handler(logging.WARNING)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield seen
    finally:
        root.removeHandler(handler)
        seen.extend(str(w.message) for w in caught)


def _sync(ctx, name):
    """A barrier; a rank that crashed before it costs GROUP_TIMEOUT, not the group deadline."""
    ctx.sync(name, timeout=GROUP_TIMEOUT)


def _run_bootstrap(rig, **kwargs):
    """``dispatcher.bootstrap(**kwargs)``: ``(decision or None, raised, released)``.

    ``released`` is None if the call ended by itself, else how the suite ended it.  Rank
    0 may wait in ``initialize`` for a peer that never comes (its bootstrap failed); a
    conforming rank 0 gives up at its init deadline and the group agrees on the
    fallback.  So on rank 0 a watcher (:func:`_watch.watched`) releases a bootstrap still
    running :data:`RELEASE_AFTER` s after it began: it connects to rank 0's socket and
    closes at once (:func:`_watch.poke`: a peer that ends before announcing its rank),
    and if rank 0 ignores that, joins as the peers it waits for
    (:func:`_watch.join_as_peers`).  Either way ``initialize`` returns, the bootstrap
    goes on, and the clause judges the overstay (FAIL) instead of an ERROR for a hang.
    """
    box = []

    def call():
        box.append(rig.dispatcher.bootstrap(**kwargs))

    ctx = rig.ctx
    if ctx.rank != 0:  # only rank 0 waits for peers
        raised = s.attempt(call)
        return (box[0] if box else None), raised, None
    sock = wire.socket_path(kwargs["base_path"])
    done: list[str] = []
    started = time.monotonic()

    def overstayed():
        late = time.monotonic() - started
        if late < RELEASE_AFTER:
            return None
        return (
            f"rank 0's bootstrap was still running {late:.1f} s after it began (its connect "
            f"+ init deadlines: {CONNECT + INIT:g} s)"
        )

    def release():
        if len(done) < POKES:
            reached = _watch.poke(sock)
            how = "connected to its socket and closed at once"
        else:
            reached = _watch.join_as_peers(sock, range(1, ctx.world_size))
            how = f"joined as rank(s) 1..{ctx.world_size - 1} at its socket"
        if reached:
            done.append(how)
        return reached

    seen = _watch.watched(call, overstayed, release, timeout=RELEASE_AFTER + s.OBSERVE)
    released = None
    if seen.released:
        ended = "returned" if seen.raised is None else f"raised {seen.raised}"
        released = (
            f"{seen.change}; the suite released it ({'; then '.join(dict.fromkeys(done))}), "
            f"then the bootstrap {ended} after {seen.elapsed:.2f} s"
        )
    return (box[0] if box else None), seen.raised, released


def _bootstrap(rig, *, local_world_size, base_path, label, tp_size=None):
    """Bootstrap; the decision, what it warned, and the broadcaster once every rank is done.

    ``tp_size`` is given only for a group of this rank alone (TP=1): nobody to wait for.
    """
    ctx = rig.ctx
    rig.clear()
    with _warnings_and_logs() as said:
        decision, raised, released = _run_bootstrap(
            rig, local_world_size=local_world_size, base_path=base_path
        )
    if tp_size is None:
        tp_size = ctx.world_size
        _sync(ctx, f"{label}-booted")  # every rank's bootstrap is over before anyone looks
    return {
        "layout": f"tp_size {tp_size}, local_world_size {local_world_size}",
        "raised": raised,
        "released": released,
        "decision": None if decision is None else _path(decision),
        "failed_ranks": tuple(getattr(decision, "failed_ranks", None) or ()),
        "warnings": said,
        "initialized": bool(rig.bcast.is_initialized()),
        "socket": s.kind_of(wire.socket_path(base_path)) if ctx.rank == 0 else None,
        "dir": os.path.exists(os.path.dirname(base_path)),
    }


def _phase(rig, *, local_world_size, base_path, label, checks=False):
    """Bootstrap, then every observation the FALLBACK clauses need on this layout."""
    out = _bootstrap(rig, local_world_size=local_world_size, base_path=base_path, label=label)
    datas = [s.payload(rig.ctx.seed, n, (label, i)) for i, n in enumerate(SIZES)]
    out["one"] = _data_call(rig, datas[1:2])
    out["multi"] = _data_call(rig, datas)
    if checks:
        out["empty"] = _call(rig, [])
        out["root"] = _refused(rig, label, _four_bytes, root=1)
        out["mode"] = _refused(rig, label, _four_bytes, mode="dp")
        out["device"] = _refused(rig, label, _meta_tensor)
    rig.dispatcher.teardown()
    _sync(rig.ctx, f"{label}-down")
    out["after_teardown"] = {
        "initialized": bool(rig.bcast.is_initialized()),
        "socket": s.kind_of(wire.socket_path(base_path)) if rig.ctx.rank == 0 else None,
    }
    return out


def _state(rig, base_path):
    """What a bootstrap could change: fds, files of the shared workdir, the socket, generation."""
    sock = wire.socket_path(base_path)
    ident = None
    if rig.ctx.rank == 0 and s.kind_of(sock) == "socket":
        st = os.stat(sock)
        ident = (st.st_dev, st.st_ino)
    return {
        "fds": s.fd_table(rig.bcast),
        "entries": s.entries(rig.ctx.workdir),
        "socket": ident,
        "generation": rig.bcast.generation if rig.impl.supports("generation") else None,
    }


def _changes(rig, base_path, before):
    """Everything that differs from ``before`` (empty: no side effect)."""
    after = _state(rig, base_path)
    changed: dict[str, object] = {}
    opened = s.new_fds(before["fds"], rig.bcast)
    closed = sorted(set(before["fds"]) - set(after["fds"]))
    if opened or closed:
        changed["fds"] = {"opened": opened, "closed": closed}
    for key in ("entries", "socket", "generation"):
        if after[key] != before[key]:
            changed[key] = (before[key], after[key])
    return changed


def _bootstrap_observed(rig, base_path, label, **kwargs):
    """Call ``bootstrap`` between barriers; what it returned or raised, warned and changed.

    Barriers before the first snapshot, after the call and after the second snapshot
    make the snapshots of shared state (the workdir, rank 0's socket) differ only by what
    the ranks' bootstrap calls did, never by another rank's previous or next step (a
    rank 0 tearing its socket down while rank 1 still compares listings).
    """
    rig.clear()
    _sync(rig.ctx, f"{label}-before")
    before = _state(rig, base_path)
    group_before = rig.engine.group_collectives()
    with _warnings_and_logs() as said:
        decision, raised, released = _run_bootstrap(
            rig, local_world_size=2, base_path=base_path, **kwargs
        )
    group = rig.group_delta(group_before)
    _sync(rig.ctx, f"{label}-after")
    changes = _changes(rig, base_path, before)
    _sync(rig.ctx, f"{label}-observed")  # nobody moves on while another rank still looks
    return {
        "decision": decision,
        "raised": None if raised is None else (raised.type_name, raised.message),
        "released": released,
        "mentions": {} if raised is None else {v: s.mentions(raised, v) for v in range(4)},
        "warnings": said,
        "changes": changes,
        "engine": rig.engine.events(),
        "group": group,
    }


def _roundtrip(rig, label):
    return _data_call(rig, [s.payload(rig.ctx.seed, 300, label)])


def _explicit_ranks(rig, base_path, label):
    """Explicit tp_rank/dp_rank that disagree with the layout (every rank passes one)."""
    out = {}
    for which, kwargs in (
        ("tp", {"tp_rank": rig.ctx.world_size - 1 - rig.ctx.rank}),
        ("dp", {"dp_rank": 3}),
    ):
        seen = _bootstrap_observed(rig, base_path, f"{label}-{which}", **kwargs)
        decision = seen["decision"]
        seen["decision"] = None if decision is None else _path(decision)
        out[which] = seen
    return out


def _repeat(out, rig, base_path):
    """FALLBACK-15/16 on a standing bootstrap: the same call again, explicit ranks.

    Fills ``out`` step by step, so a later crash keeps the earlier observations.
    """
    first = _bootstrap_observed(rig, base_path, "rep-first")
    decision = first.pop("decision")
    out["first"] = {**first, "path": _path(decision) if decision is not None else None}
    out["first_socket"] = s.kind_of(wire.socket_path(base_path)) if rig.ctx.rank == 0 else None
    out["first_roundtrip"] = _roundtrip(rig, "rep1")
    for label, kwargs in (("again", {}), ("agreeing", {"tp_rank": rig.ctx.rank, "dp_rank": 0})):
        seen = _bootstrap_observed(rig, base_path, f"rep-{label}", **kwargs)
        again = seen.pop("decision")
        seen["same_decision"] = again is decision or (again is not None and again == decision)
        seen["path"] = _path(again) if again is not None else None
        out[label] = seen
    out["explicit"] = _explicit_ranks(rig, base_path, "rep-x")
    out["after_roundtrip"] = _roundtrip(rig, "rep2")
    rig.dispatcher.teardown()


def _guarded(scenario):
    """Run a FALLBACK-15/16 scenario; its crash is an observation for those clauses only."""
    out: dict[str, object] = {}
    try:
        scenario(out)
    except Exception as exc:
        out["crashed"] = f"{type(exc).__name__}: {exc}"
    return out


def _tp1(ctx, impl):
    """TP=1 (rank 0 alone, its own one-rank group): the broadcaster stays down."""
    from ._fallback_engine import SuiteEngine, close_group, open_group

    open_group(0, 1, os.path.join(ctx.workdir, "suite-tp1.store"), GROUP_TIMEOUT)
    try:
        rig = _Rig.build(ctx, impl, SuiteEngine(timeout=GROUP_TIMEOUT), rank=0, world_size=1)
        base = os.path.join(ctx.workdir, "tp1", "g")
        out = _bootstrap(rig, local_world_size=2, base_path=base, label="tp1", tp_size=1)
        out["one"] = _data_call(rig, [s.payload(ctx.seed, 300, "tp1")])
        rig.dispatcher.teardown()
        rig.bcast.reset()
        return out
    finally:
        close_group()


def _views_file(keep_dir, rank):
    return os.path.join(keep_dir, f"views-{rank}.pickle")


def _keep(ctx, keep_dir, results):
    """Save what this rank observed so far: the fixture reads it if the run breaks off."""
    path = _views_file(keep_dir, ctx.rank)
    with open(path + ".tmp", "wb") as fh:
        pickle.dump(results, fh)
    os.replace(path + ".tmp", path)


KILL_SWITCH = "RTP_LLM_CPU_TP_BROADCASTER_DISABLE"


def _with_env(name, value, scenario):
    """Run ``scenario`` with ``name=value`` in this rank's environment, then put it back."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        return scenario()
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


def _target(ctx, impl, keep_dir):
    import torch.distributed  # noqa: F401 (every rank, while rank 0 runs TP=1)

    from ._fallback_engine import SuiteEngine, close_group, open_group

    results = {}
    # TP=1 first, on rank 0 alone (a one-rank group of its own): nothing of the pair's
    # scenarios can keep it from being observed.  Its crash fails the run at the end.
    tp1_crash = None
    if ctx.rank == 0:
        try:
            results["tp1"] = _tp1(ctx, impl)
            _keep(ctx, keep_dir, results)
        except Exception as exc:
            tp1_crash = exc
    ctx.sync("tp1-done", timeout=2 * GROUP_TIMEOUT)
    open_group(ctx.rank, ctx.world_size, os.path.join(ctx.workdir, "suite.store"), GROUP_TIMEOUT)
    engine = SuiteEngine(timeout=GROUP_TIMEOUT)
    rig = _Rig.build(ctx, impl, engine, rank=ctx.rank, world_size=ctx.world_size)
    missing = os.path.join(ctx.workdir, "never", "p" * 120)
    # One rank's bootstrap fails (a base path over the 107-byte limit on that rank only).
    bad = os.path.join(ctx.workdir, "q" * 120) if ctx.rank == FAILING_RANK else ctx.base_path + "3"
    scenarios = {
        # FALLBACK-16 before any bootstrap (every rank passes a wrong rank: nobody waits).
        "explicit_fresh": lambda: _guarded(
            lambda out: out.update(_explicit_ranks(rig, ctx.base_path + "f", "fresh"))
        ),
        "uds": lambda: _phase(
            rig, local_world_size=2, base_path=ctx.base_path, label="uds", checks=True
        ),
        # local_world_size above tp_size is eligible too (not only equal).
        "wide": lambda: _phase(
            rig, local_world_size=3, base_path=ctx.base_path + "w", label="wide"
        ),
        "uds_after_teardown": lambda: _phase(
            rig, local_world_size=2, base_path=ctx.base_path + "2", label="re"
        ),
        "cross_node": lambda: _phase(
            rig, local_world_size=1, base_path=missing, label="x", checks=True
        ),
        "repeat": lambda: _guarded(lambda out: _repeat(out, rig, ctx.base_path + "r")),
        # FALLBACK-18: an eligible layout with the kill switch on every rank.
        "kill_switch": lambda: _with_env(
            KILL_SWITCH,
            "1",
            lambda: _phase(rig, local_world_size=2, base_path=ctx.base_path + "k", label="k"),
        ),
        # Last: the others wait for the failing rank (if rank 0 waits with no deadline,
        # only the suite's release ends its bootstrap).
        "consensus": lambda: _phase(rig, local_world_size=2, base_path=bad, label="c"),
    }
    try:
        for name, scenario in scenarios.items():
            results[name] = scenario()
            _keep(ctx, keep_dir, results)
        rig.bcast.reset()
    finally:
        close_group()
    if tp1_crash is not None:
        raise tp1_crash
    return results


def _kept_views(result, keep_dir):
    """Each rank's view: what it returned, else what it kept before the run broke off."""
    views = []
    for outcome in result.outcomes:
        if isinstance(outcome.value, dict):  # the rank returned
            views.append(outcome.value)
            continue
        try:
            with open(_views_file(keep_dir, outcome.rank), "rb") as fh:
                views.append(pickle.load(fh))
        except (OSError, EOFError, pickle.UnpicklingError):
            views.append({})
    return views


@pytest.fixture(scope="session")
def observed(tpbcast_impl, tpbcast_settings, tpbcast_path_factory, tpbcast_run_shared_dir):
    """Run the dispatch scenarios once per run (world size 2): ``(views, broke_off)``.

    ``views``: rank 0's and 1's observations by scenario; ``broke_off``: None, or why the
    run ended before every scenario was observed (then ``views`` holds those it kept).
    """
    require(tpbcast_impl, "dispatch")

    def run():
        keep_dir = str(tpbcast_path_factory.mktemp("fb-views-"))
        result = run_ranks(
            _target,
            2,
            args=(tpbcast_impl, keep_dir),
            timeout=60.0,
            seed=tpbcast_settings.seed,
            workdir=str(tpbcast_path_factory.mktemp("fb-")),
            label="fallback",
        )
        broke_off = None if result.ok else f"{result.headline()} ({result.replay_hint()})"
        return _kept_views(result, keep_dir), broke_off

    return s.once_per_run(tpbcast_run_shared_dir, "fallback", run, timeout=120.0)


def _both(observed, phase):
    views, _ = observed
    return [(rank, view[phase]) for rank, view in enumerate(views) if phase in view]


def _all_observed(observed, cid, phases):
    """ERROR for ``cid`` if one of ``phases`` was never observed (the run broke off first).

    Called after judging what was observed, so a FAIL seen there stands.
    """
    views, broke_off = observed
    lost = [
        f"{phase} (rank {rank})"
        for phase in phases
        for rank, view in enumerate(views)
        if phase not in view and (phase != "tp1" or rank == 0)
    ]
    s.precondition(
        cid,
        not lost,
        f"scenario(s) {', '.join(lost)} never observed: the run broke off: {broke_off}",
    )


def _kinds(events):
    return [event[0] for event in events] if isinstance(events, list) else events


def _took_collective(call):
    """The truth of a call: the engine's collective ran, or some collective crossed the group."""
    return COLLECTIVE in _kinds(call["engine"]) or bool(call["group"])


def _took_uds(call):
    """The truth of a data call: no collective anywhere, yet the data arrived."""
    return not _took_collective(call) and bool(call.get("ok")) and call["error"] is None


def _quiet(call):
    """Nothing of the engine ran and no collective went over the group."""
    return not call["engine"] and not call["group"]


def _engine_seen(call):
    return f"engine saw {call['engine']}, collectives on the group {call['group']}"


# The phases: bootstrapped on a layout that allows UDS (1 < tp_size <= local_world_size),
# on one that does not (FALLBACK-8), and one where rank 1's bootstrap fails (FALLBACK-9).
UDS_PHASES = ("uds", "wide", "uds_after_teardown")
INELIGIBLE_PHASES = ("cross_node", "tp1")
COLLECTIVE_PHASES = (*INELIGIBLE_PHASES, "consensus")


@pytest.mark.clause("FALLBACK-1")
def test_uds_path_exactly_when_initialized(observed):
    for phase in UDS_PHASES + COLLECTIVE_PHASES:
        for rank, view in _both(observed, phase):
            for name in ("one", "multi"):
                call = view.get(name)
                if call is None:
                    continue
                if view["initialized"]:
                    holds, want = _took_uds(call), "takes the UDS path (no collective)"
                else:
                    holds = _took_collective(call)
                    want = "takes the collective path (the engine's collective)"
                s.check(
                    "FALLBACK-1",
                    holds,
                    f"{phase} ({view['layout']}): with the broadcaster "
                    f"{'initialized' if view['initialized'] else 'not initialized'} a call {want}",
                    f"{_engine_seen(call)}, data arrived: {call['ok']}, error: {call['error']}",
                    rank=rank,
                )
    _all_observed(observed, "FALLBACK-1", UDS_PHASES + COLLECTIVE_PHASES)


@pytest.mark.clause("FALLBACK-18")
def test_kill_switch_keeps_the_collective_path(observed):
    for rank, view in _both(observed, "kill_switch"):
        s.check(
            "FALLBACK-18",
            not view["initialized"],
            f"with {KILL_SWITCH}=1 the bootstrap at {view['layout']} (an eligible layout) "
            "leaves the broadcaster down",
            f"is_initialized() {view['initialized']} (decision {view['decision']}, "
            f"raised {view['raised']})",
            rank=rank,
        )
        for name in ("one", "multi"):
            call = view.get(name)
            if call is not None:
                s.check(
                    "FALLBACK-18",
                    _took_collective(call),
                    f"with {KILL_SWITCH}=1 a call takes the collective path",
                    f"{_engine_seen(call)}, data arrived: {call['ok']}, error: {call['error']}",
                    rank=rank,
                )
    _all_observed(observed, "FALLBACK-18", ("kill_switch",))


@pytest.mark.clause("FALLBACK-8")
def test_bootstrap_only_when_tp_fits_the_node(observed):
    for phase in UDS_PHASES + INELIGIBLE_PHASES:
        eligible = phase in UDS_PHASES
        for rank, view in _both(observed, phase):
            want = "initializes the broadcaster" if eligible else "leaves the broadcaster down"
            s.check(
                "FALLBACK-8",
                view["initialized"] == eligible,
                f"{phase}: the bootstrap at {view['layout']} {want}",
                f"is_initialized() {view['initialized']} after bootstrap "
                f"(decision {view['decision']}, raised {view['raised']}"
                + (f"; {view['released']}" if view.get("released") else "")
                + ")",
                rank=rank,
            )
            if rank == 0 and phase != "tp1":
                s.check(
                    "FALLBACK-8",
                    (view["socket"] == "socket") == eligible,
                    f"{phase}: rank 0 listens at its socket iff the bootstrap at "
                    f"{view['layout']} brings the broadcaster up",
                    f"{view['socket']} at the socket path",
                    rank=rank,
                )
    _all_observed(observed, "FALLBACK-8", UDS_PHASES + INELIGIBLE_PHASES)


def _on_path(observed, phases, *, uds):
    """``(rank, phase, view)`` of every phase whose bootstrap left the broadcaster up
    (``uds``) or down: which path a call takes is FALLBACK-1's, whether the layout
    allowed it FALLBACK-8's; the path's own clauses judge the calls that took it."""
    return [
        (rank, phase, view)
        for phase in phases
        for rank, view in _both(observed, phase)
        if view["initialized"] == uds
    ]


@pytest.mark.clause("FALLBACK-2")
def test_collective_then_sync_then_device_sync(observed):
    cid = "FALLBACK-2"
    judged = _on_path(observed, COLLECTIVE_PHASES, uds=False)
    for rank, phase, view in judged:
        call = view["one"]
        if not s.check(
            cid,
            _kinds(call["engine"]) == FALLBACK_SEQUENCE,
            f"{phase}: the collective path calls the engine's collective broadcast, "
            "sync_communication, device_sync, once each, in order",
            _engine_seen(call),
            rank=rank,
        ):
            continue
        s.check(
            cid,
            call["engine"][0][2] == 0 and call["group"] in (None, 1),
            f"{phase}: exactly one collective, from root 0, goes over the TP group",
            _engine_seen(call),
            rank=rank,
        )
    _all_observed(observed, cid, COLLECTIVE_PHASES)
    s.precondition(cid, judged, "some bootstrap left the broadcaster down (collective path)")


@pytest.mark.clause("FALLBACK-3")
def test_nothing_of_the_engine_on_the_uds_path(observed):
    cid = "FALLBACK-3"
    judged = _on_path(observed, UDS_PHASES, uds=True)
    for rank, phase, view in judged:
        for name in ("one", "multi"):
            call = view[name]
            s.check(
                cid,
                _quiet(call),
                f"{phase} ({name} buffer(s)): the UDS path runs no collective, "
                "sync_communication or device_sync",
                _engine_seen(call),
                rank=rank,
            )
    _all_observed(observed, cid, UDS_PHASES)
    s.precondition(cid, judged, "some bootstrap brought the broadcaster up (UDS path)")


@pytest.mark.clause("FALLBACK-4")
def test_empty_list_triggers_nothing(observed):
    for phase in ("uds", "cross_node"):
        for rank, view in _both(observed, phase):
            call = view["empty"]
            s.check(
                "FALLBACK-4",
                call["error"] is None and _quiet(call),
                f"{phase}: an empty buffer list runs nothing (and raises nothing)",
                f"{_engine_seen(call)}, error: {call['error']}",
                rank=rank,
            )
    _all_observed(observed, "FALLBACK-4", ("uds", "cross_node"))


def _delivers(view):
    """The phase's plain data calls worked: a later failure is the refused call's doing."""
    return all(view[name]["ok"] and view[name]["error"] is None for name in ("one", "multi"))


def _error_text(call):
    error = call["error"]
    return None if error is None else (error.type_name, error.message)


def _judge_refused_on_both_paths(observed, key, cid, what):
    """``what`` raises the same error on both paths, before any communication or sync."""
    views, _ = observed
    for rank, view in enumerate(views):
        if "uds" not in view or "cross_node" not in view:
            continue  # never observed: _all_observed says so
        uds, coll = view["uds"][key], view["cross_node"][key]
        s.check(
            cid,
            uds["error"] is not None and _error_text(uds) == _error_text(coll),
            f"{what} raises the same error on both paths",
            f"UDS: {uds['error']}, collective: {coll['error']}",
            rank=rank,
        )
        for where, call in (("UDS", uds), ("collective", coll)):
            s.check(
                cid,
                _quiet(call) and not call["touched"],
                f"{what} is refused on the {where} path before any communication or sync",
                f"{_engine_seen(call)}, buffer changed: {call['touched']}",
                rank=rank,
            )
            tail = call["tail"]
            if not _delivers(view["uds" if where == "UDS" else "cross_node"]):
                continue  # the path never delivers (FALLBACK-11): the tail proves nothing
            s.check(
                cid,
                tail["ok"] and tail["error"] is None,
                f"after the refused {what} on the {where} path nothing is left in flight: "
                "the next call delivers the root's bytes",
                f"data arrived: {tail['ok']}, error: {tail['error']}",
                rank=rank,
            )
    _all_observed(observed, cid, ("uds", "cross_node"))


@pytest.mark.clause("FALLBACK-5")
def test_root_check_identical_on_both_paths(observed):
    _judge_refused_on_both_paths(observed, "root", "FALLBACK-5", "root=1")


@pytest.mark.clause("FALLBACK-6")
def test_mode_check_identical_on_both_paths(observed):
    _judge_refused_on_both_paths(observed, "mode", "FALLBACK-6", "mode=dp")


@pytest.mark.clause("FALLBACK-7")
def test_cpu_tensors_only_on_the_uds_path(observed):
    for rank, view in _both(observed, "uds"):
        call = view["device"]
        error = call["error"]
        s.check(
            "FALLBACK-7",
            error is not None and s.mentions(error, "meta"),
            "a buffer on the 'meta' device is refused on the UDS path, naming its device",
            error,
            rank=rank,
        )
        tail_ok = call["tail"]["ok"] or not _delivers(view)
        s.check(
            "FALLBACK-7",
            _quiet(call) and tail_ok,
            "the non-CPU buffer is refused before any byte is sent (the next call "
            "delivers the root's bytes)",
            f"{_engine_seen(call)}, next call's data arrived: {call['tail']['ok']}",
            rank=rank,
        )
    _all_observed(observed, "FALLBACK-7", ("uds",))


_DECIMAL = re.compile(r"\d*\.\d+")


def _names_rank(texts, rank):
    """Some text names ``rank`` as a word: outside paths, not part of a decimal number."""
    return any(s.mentions(s.Raised("", (), _DECIMAL.sub(" ", text), 0.0), rank) for text in texts)


@pytest.mark.clause("FALLBACK-9")
def test_consensus_on_one_ranks_bootstrap_failure(observed):
    views = _both(observed, "consensus")
    for rank, view in views:
        if rank == 0:
            s.check(
                "FALLBACK-9",
                view["released"] is None,
                f"rank 0 stops waiting for rank {FAILING_RANK}, whose bootstrap failed, within "
                f"its own deadlines (connect {CONNECT:g} s + init {INIT:g} s): the group "
                "reaches its consensus without help",
                "rank 0 overstayed its init deadline waiting for a peer that never came, and "
                f"the suite released it: {view['released']}",
                rank=rank,
            )
        s.check(
            "FALLBACK-9",
            view["decision"] == "collective"
            and not view["initialized"]
            and _took_collective(view["one"]),
            f"every rank agrees on the collective path when rank {FAILING_RANK}'s bootstrap "
            "fails (broadcaster down, the engine's collective runs)",
            f"decision {view['decision']}, is_initialized() {view['initialized']}, "
            f"{_engine_seen(view['one'])}",
            rank=rank,
        )
        s.check(
            "FALLBACK-9",
            FAILING_RANK in view["failed_ranks"],
            f"the decision's failed_ranks holds rank {FAILING_RANK}",
            view["failed_ranks"],
            rank=rank,
        )
        s.check(
            "FALLBACK-9",
            _names_rank(view["warnings"], FAILING_RANK),
            f"a warning names the failing rank {FAILING_RANK} (a word of its own, not a "
            "digit of a path or of a number)",
            view["warnings"],
            rank=rank,
        )
    _all_observed(observed, "FALLBACK-9", ("consensus",))


@pytest.mark.clause("FALLBACK-10")
def test_teardown_resets_both_sides(observed):
    for rank, view in _both(observed, "uds"):
        down = view["after_teardown"]
        s.check(
            "FALLBACK-10",
            not down["initialized"] and down["socket"] in (None, "missing"),
            "teardown resets the broadcaster (not initialized, rank 0's socket gone)",
            down,
            rank=rank,
        )
    for rank, view in _both(observed, "uds_after_teardown"):
        s.check(
            "FALLBACK-10",
            view["initialized"] and view["one"]["ok"] and view["multi"]["ok"],
            "a bootstrap after teardown starts clean: UDS comes up again and delivers",
            f"decision {view['decision']}, raised {view['raised']}, is_initialized() "
            f"{view['initialized']}, data {view['one']['ok']}/{view['multi']['ok']}",
            rank=rank,
        )
    _all_observed(observed, "FALLBACK-10", ("uds", "uds_after_teardown"))


@pytest.mark.clause("FALLBACK-11")
def test_data_correct_on_both_paths_and_cross_node(observed):
    phases = ("uds", "wide", "cross_node", "uds_after_teardown", "consensus")
    for phase in phases:
        for rank, view in _both(observed, phase):
            for name in ("one", "multi"):
                call = view[name]
                s.check(
                    "FALLBACK-11",
                    call["ok"] and call["error"] is None,
                    f"{phase} ({view['layout']}, {name} buffer(s)): every rank receives the "
                    "root's bytes",
                    f"data arrived: {call['ok']}, error: {call['error']}",
                    rank=rank,
                )
    _all_observed(observed, "FALLBACK-11", phases)


def _calls_of(view):
    for name in ("one", "multi", "empty"):
        if name in view:
            yield name, view[name]
    for name in ("root", "mode", "device"):
        if name in view:
            yield name, view[name]
            yield f"{name} (next call)", view[name]["tail"]


@pytest.mark.clause("FALLBACK-12")
def test_the_dispatch_layer_reports_paths_and_syncs_truly(observed):
    for phase in UDS_PHASES + COLLECTIVE_PHASES:
        for rank, view in _both(observed, phase):
            for name, call in _calls_of(view):
                engine = _kinds(call["engine"])
                claimed = _kinds(call["claimed"])
                if "ok" in call:  # a data call: it took one path or the other
                    if call["error"] is None:
                        s.check(
                            "FALLBACK-12",
                            call["path"] == ("collective" if _took_collective(call) else "uds"),
                            f"{phase} ({name}): broadcast_cpu reports the path it took",
                            f"reported {call['path']}; {_engine_seen(call)}",
                            rank=rank,
                        )
                    truth = (["uds"] if _took_uds(call) else []) + engine
                elif isinstance(claimed, list):
                    # nothing to deliver: a zero-byte UDS call would leave no trace to check
                    claimed, truth = [k for k in claimed if k != "uds"], engine
                else:
                    truth = engine
                s.check(
                    "FALLBACK-12",
                    claimed == truth,
                    f"{phase} ({name}): calls() records the path and every engine call "
                    "that really ran, in order",
                    f"calls() {call['claimed']}, but the engine saw {call['engine']}",
                    rank=rank,
                )
    _all_observed(observed, "FALLBACK-12", UDS_PHASES + COLLECTIVE_PHASES)


@pytest.mark.clause("FALLBACK-13")
def test_several_buffers_in_one_collective(observed, tpbcast_impl):
    require(tpbcast_impl, "multi_buffer")
    judged = [
        (rank, phase, view)
        for rank, phase, view in _on_path(observed, COLLECTIVE_PHASES, uds=False)
        if "multi" in view
    ]
    for rank, phase, view in judged:
        call = view["multi"]
        s.check(
            "FALLBACK-13",
            _kinds(call["engine"]) == FALLBACK_SEQUENCE and call["group"] in (None, 1),
            f"{phase}: one collective and one sync sequence for {len(SIZES)} buffers",
            _engine_seen(call),
            rank=rank,
        )
    _all_observed(observed, "FALLBACK-13", COLLECTIVE_PHASES)
    s.precondition("FALLBACK-13", judged, "some bootstrap left the broadcaster down")


@pytest.mark.clause("FALLBACK-14")
def test_no_broadcaster_side_effects_when_ineligible(observed):
    for rank, cross in _both(observed, "cross_node"):
        s.check(
            "FALLBACK-14",
            not cross["dir"],
            "no socket dir is created for a cross-node layout",
            "the base path's directory exists",
            rank=rank,
        )
        s.check(
            "FALLBACK-14",
            cross["raised"] is None and not cross["failed_ranks"],
            "a too-long, missing base path is not checked when the broadcaster is unused",
            f"raised {cross['raised']}, failed ranks {cross['failed_ranks']}, "
            f"warnings {cross['warnings']}",
            rank=rank,
        )
    for rank, view in _both(observed, "tp1"):
        s.check(
            "FALLBACK-14",
            not view["dir"],
            "no socket dir is created at TP=1",
            "the base path's directory exists",
            rank=rank,
        )
    _all_observed(observed, "FALLBACK-14", INELIGIBLE_PHASES)


def _step(view, key, cid):
    """One step's observation; a scenario that crashed before it fails the clause."""
    assert key in view, s.clause(
        cid, f"the scenario gets to step {key!r}", view.get("crashed", "no crash recorded")
    )
    return view[key]


@pytest.mark.clause("FALLBACK-15")
def test_repeated_bootstrap_has_no_side_effects(observed):
    cid = "FALLBACK-15"
    for rank, view in _both(observed, "repeat"):
        first = _step(view, "first", cid)
        s.precondition(
            cid,
            first["raised"] is None and first["path"] == "uds",
            f"rank {rank}: the first bootstrap brought UDS up ({first['raised']}, {first['path']})",
        )
        s.precondition(cid, first["changes"], f"rank {rank}: the first bootstrap changed something")
        if rank == 0:
            s.precondition(cid, view["first_socket"] == "socket", "rank 0 listens after bootstrap")
        trip = _step(view, "first_roundtrip", cid)
        s.precondition(cid, trip["ok"], f"rank {rank}: data flows over UDS ({trip})")
        for label, how in (("again", "the same call"), ("agreeing", "agreeing explicit ranks")):
            seen = _step(view, label, cid)
            s.check(cid, seen["raised"] is None, f"{how} again succeeds", seen["raised"], rank=rank)
            s.check(
                cid,
                seen["same_decision"] and seen["path"] == "uds",
                f"{how} again returns the standing decision",
                (seen["same_decision"], seen["path"]),
                rank=rank,
            )
            s.check(
                cid,
                seen["changes"] == {},
                f"{how} again creates no process group, socket, fd or file and resets nothing",
                seen["changes"],
                rank=rank,
            )
            s.check(
                cid,
                _quiet(seen) and seen["warnings"] == [],
                f"{how} again communicates and warns nothing",
                f"{_engine_seen(seen)}, warnings {seen['warnings']}",
                rank=rank,
            )
        trip = _step(view, "after_roundtrip", cid)
        s.check(
            cid,
            trip["ok"] and _took_uds(trip),
            "the group keeps working on UDS",
            f"data arrived: {trip['ok']}, {_engine_seen(trip)}",
            rank=rank,
        )
    _all_observed(observed, cid, ("repeat",))


def _warned(warnings_seen, name, *values):
    pattern = [re.compile(rf"(?<![\w.-]){v}(?![\w])") for v in values]
    return any(name in w and all(p.search(w) for p in pattern) for w in warnings_seen)


def _judge_explicit(rank, seen, which, given, derived, *, where):
    name = f"{which}_rank"
    what = f"{where}: explicit {name}={given} where the layout derives {derived}"
    raised = seen["raised"]
    if raised is None:
        s.check(
            "FALLBACK-16",
            _warned(seen["warnings"], name, given, derived),
            f"{what} raises, or warns naming both values",
            seen["warnings"],
            rank=rank,
        )
        return
    named = name in raised[1] and seen["mentions"][given] and seen["mentions"][derived]
    s.check(
        "FALLBACK-16",
        named,
        f"{what}: the error names {name} and both values",
        raised,
        rank=rank,
    )
    s.check(
        "FALLBACK-16",
        seen["changes"] == {} and _quiet(seen),
        f"{what}: the refused call changes nothing and communicates nothing",
        f"{seen['changes']}, {_engine_seen(seen)}",
        rank=rank,
    )


@pytest.mark.clause("FALLBACK-16")
def test_explicit_ranks_are_not_silently_overwritten(observed):
    views, _ = observed
    cid = "FALLBACK-16"
    for rank, view in enumerate(views):
        if "explicit_fresh" not in view or "repeat" not in view:
            continue  # never observed: _all_observed says so
        fresh, repeat = view["explicit_fresh"], view["repeat"]
        wrong_tp = len(views) - 1 - rank
        first = _step(repeat, "first", cid)
        s.precondition(
            cid, first["path"] == "uds", f"rank {rank}: a bootstrap stands before the check"
        )
        for where, explicit in (
            ("before bootstrap", fresh),
            ("standing bootstrap", _step(repeat, "explicit", cid)),
        ):
            _judge_explicit(rank, _step(explicit, "tp", cid), "tp", wrong_tp, rank, where=where)
            _judge_explicit(rank, _step(explicit, "dp", cid), "dp", 3, 0, where=where)
        trip = _step(repeat, "after_roundtrip", cid)
        s.check(
            cid,
            trip["ok"] and _took_uds(trip),
            "the group still works on UDS after the refused calls",
            f"data arrived: {trip['ok']}, {_engine_seen(trip)}",
            rank=rank,
        )
    _all_observed(observed, cid, ("explicit_fresh", "repeat"))
