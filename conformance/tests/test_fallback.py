"""FALLBACK: the dispatch layer above the broadcaster (capability ``dispatch``, issue 6).

The capability promises ``make_dispatcher(*, rank, world_size, workdir, group_timeout,
connect, init, io)`` on the broadcaster object, returning a per-rank dispatcher with:
``bootstrap(*, local_world_size, base_path, tp_rank=None, dp_rank=None) -> decision``
(``decision.path`` is "uds" or "collective", ``decision.failed_ranks``; the same arguments
again change nothing, explicit ranks must match ``rank % world_size`` / ``rank //
world_size``), ``broadcast_cpu(buffers, root=0, mode="tp") ->
path``, ``calls()`` (the recorder's events in order: ``("uds", n)``, ``("collective",
n)``, ``("sync_communication",)``, ``("device_sync",)``), ``clear_calls()`` and
``teardown()``.

Every dispatch group imports torch in each rank (a real gloo process group), so the
observations are gathered by ONE group run per conformance run, shared by the xdist workers
(fixture ``observed``), and each clause's test judges its part: a failure of that run is an
ERROR of every FALLBACK test.
"""

from __future__ import annotations

import os
import re
import warnings

import pytest

from tpbcast.conformance.plugin import require
from tpbcast.harness import run_ranks

from . import _support as s

GROUP_TIMEOUT = 10.0
SIZES = (5, 300, 1)


def _path(value):
    """``"uds"``/``"collective"`` from a str, an enum or a decision."""
    value = getattr(value, "path", value)
    return str(getattr(value, "value", value)).lower()


def _events(dispatcher):
    return [tuple(event) for event in dispatcher.calls()]


def _error(fn):
    raised = s.attempt(fn)
    return None if raised is None else (raised.type_name, raised.message)


def _phase(ctx, dispatcher, *, local_world_size, base_path, label, seed):
    """Bootstrap, then every observation the FALLBACK clauses need on this layout."""
    out = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        decision = dispatcher.bootstrap(local_world_size=local_world_size, base_path=base_path)
    out["decision"] = _path(decision)
    out["failed_ranks"] = tuple(getattr(decision, "failed_ranks", ()))
    out["warnings"] = [str(w.message) for w in caught]
    datas = [s.payload(seed, n, (label, i)) for i, n in enumerate(SIZES)]
    # One buffer per call: data and the exact event sequence.
    dispatcher.clear_calls()
    buf = bytearray(datas[1]) if ctx.rank == 0 else bytearray(len(datas[1]))
    out["one_path"] = _path(dispatcher.broadcast_cpu([buf]))
    out["one_events"] = _events(dispatcher)
    out["one_ok"] = bytes(buf) == datas[1]
    # Several buffers in one call.
    dispatcher.clear_calls()
    bufs = [bytearray(d) if ctx.rank == 0 else bytearray(len(d)) for d in datas]
    dispatcher.broadcast_cpu(bufs)
    out["multi_events"] = _events(dispatcher)
    out["multi_ok"] = [bytes(b) for b in bufs] == datas
    # The empty-list guard.
    dispatcher.clear_calls()
    out["empty_error"] = _error(lambda: dispatcher.broadcast_cpu([]))
    out["empty_events"] = _events(dispatcher)
    # Argument checks, before any communication.
    dispatcher.clear_calls()
    out["root_error"] = _error(lambda: dispatcher.broadcast_cpu([bytearray(4)], root=1))
    out["mode_error"] = _error(lambda: dispatcher.broadcast_cpu([bytearray(4)], mode="dp"))
    out["check_events"] = _events(dispatcher)
    # A buffer that is not in CPU memory (torch's "meta" device needs no GPU).
    import torch

    dispatcher.clear_calls()
    out["device_error"] = _error(lambda: dispatcher.broadcast_cpu([torch.empty(4, device="meta")]))
    out["device_events"] = _events(dispatcher)
    dispatcher.teardown()
    return out


def _state(ctx, bcast, impl, base_path):
    """What a bootstrap could change: fds, files of the shared workdir, the socket, generation."""
    sock = s.sock_path(base_path)
    ident = None
    if ctx.rank == 0 and s.kind_of(sock) == "socket":
        st = os.stat(sock)
        ident = (st.st_dev, st.st_ino)
    return {
        "fds": s.fd_table(),
        "entries": s.entries(ctx.workdir),
        "socket": ident,
        "generation": bcast.generation if impl.supports("generation") else None,
    }


def _changes(ctx, bcast, impl, base_path, before):
    """Everything that differs from ``before`` (empty: no side effect)."""
    after = _state(ctx, bcast, impl, base_path)
    changed: dict[str, object] = {}
    opened = s.new_fds(before["fds"])
    closed = sorted(set(before["fds"]) - set(after["fds"]))
    if opened or closed:
        changed["fds"] = {"opened": opened, "closed": closed}
    for key in ("entries", "socket", "generation"):
        if after[key] != before[key]:
            changed[key] = (before[key], after[key])
    return changed


def _bootstrap_observed(ctx, dispatcher, bcast, impl, base_path, **kwargs):
    """Call ``bootstrap``; what it returned or raised, warned and changed."""
    before = _state(ctx, bcast, impl, base_path)
    box = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        raised = s.attempt(
            lambda: box.append(
                dispatcher.bootstrap(local_world_size=2, base_path=base_path, **kwargs)
            )
        )
    return {
        "decision": box[0] if box else None,
        "raised": None if raised is None else (raised.type_name, raised.message),
        "mentions": {} if raised is None else {v: s.mentions(raised, v) for v in range(4)},
        "warnings": [str(w.message) for w in caught],
        "changes": _changes(ctx, bcast, impl, base_path, before),
    }


def _roundtrip(ctx, dispatcher, seed, label):
    data = s.payload(seed, 300, label)
    buf = bytearray(data) if ctx.rank == 0 else bytearray(len(data))
    dispatcher.clear_calls()
    path = _path(dispatcher.broadcast_cpu([buf]))
    return path, bytes(buf) == data, _events(dispatcher)


def _explicit_ranks(ctx, dispatcher, bcast, impl, base_path):
    """Explicit tp_rank/dp_rank that disagree with the layout (every rank passes one)."""
    return {
        "tp": _bootstrap_observed(
            ctx, dispatcher, bcast, impl, base_path, tp_rank=ctx.world_size - 1 - ctx.rank
        ),
        "dp": _bootstrap_observed(ctx, dispatcher, bcast, impl, base_path, dp_rank=3),
    }


def _repeat(out, ctx, dispatcher, bcast, impl, *, base_path, seed):
    """FALLBACK-15/16 on a standing bootstrap: the same call again, explicit ranks.

    Fills ``out`` step by step, so a later crash keeps the earlier observations.
    """
    first = _bootstrap_observed(ctx, dispatcher, bcast, impl, base_path)
    decision = first.pop("decision")
    out["first"] = {**first, "path": _path(decision) if decision is not None else None}
    out["first_socket"] = s.kind_of(s.sock_path(base_path)) if ctx.rank == 0 else None
    out["first_roundtrip"] = _roundtrip(ctx, dispatcher, seed, "rep1")
    for label, kwargs in (("again", {}), ("agreeing", {"tp_rank": ctx.rank, "dp_rank": 0})):
        dispatcher.clear_calls()
        seen = _bootstrap_observed(ctx, dispatcher, bcast, impl, base_path, **kwargs)
        again = seen.pop("decision")
        seen["same_decision"] = again is decision or (again is not None and again == decision)
        seen["path"] = _path(again) if again is not None else None
        seen["calls"] = _events(dispatcher)
        out[label] = seen
    explicit = _explicit_ranks(ctx, dispatcher, bcast, impl, base_path)
    for view in explicit.values():
        view["decision"] = None if view["decision"] is None else _path(view["decision"])
    out["explicit"] = explicit
    out["after_roundtrip"] = _roundtrip(ctx, dispatcher, seed, "rep2")
    dispatcher.teardown()


def _guarded(scenario):
    """Run a FALLBACK-15/16 scenario; its crash is an observation for those clauses only."""
    out: dict[str, object] = {}
    try:
        scenario(out)
    except Exception as exc:
        out["crashed"] = f"{type(exc).__name__}: {exc}"
    return out


def _target(ctx, impl):
    bcast = impl.create()
    dispatcher = bcast.make_dispatcher(
        rank=ctx.rank,
        world_size=ctx.world_size,
        workdir=ctx.workdir,
        group_timeout=GROUP_TIMEOUT,
        connect=1.0,
        init=1.0,
        io=GROUP_TIMEOUT,
    )
    seed = ctx.seed
    results = {}

    def fresh(out):
        out.update(_explicit_ranks(ctx, dispatcher, bcast, impl, ctx.base_path + "f"))
        for label in ("tp", "dp"):
            decision = out[label]["decision"]
            out[label]["decision"] = None if decision is None else _path(decision)

    # FALLBACK-16 before any bootstrap (every rank passes a wrong rank: nobody waits).
    results["explicit_fresh"] = _guarded(fresh)
    results["uds"] = _phase(
        ctx, dispatcher, local_world_size=2, base_path=ctx.base_path, label="uds", seed=seed
    )
    results["uds_after_teardown"] = _phase(
        ctx, dispatcher, local_world_size=2, base_path=ctx.base_path + "2", label="re", seed=seed
    )
    missing = os.path.join(ctx.workdir, "never", "p" * 120)
    results["cross_node"] = _phase(
        ctx, dispatcher, local_world_size=1, base_path=missing, label="x", seed=seed
    )
    results["cross_node_dir"] = os.path.exists(os.path.dirname(missing))
    # One rank's bootstrap fails (a base path over the 107-byte limit on rank 1 only).
    bad = ctx.base_path + "3" if ctx.rank == 0 else os.path.join(ctx.workdir, "q" * 120)
    results["consensus"] = _phase(
        ctx, dispatcher, local_world_size=2, base_path=bad, label="c", seed=seed
    )
    results["repeat"] = _guarded(
        lambda out: _repeat(
            out, ctx, dispatcher, bcast, impl, base_path=ctx.base_path + "r", seed=seed
        )
    )
    bcast.reset()
    return results


@pytest.fixture(scope="session")
def observed(tpbcast_impl, tpbcast_settings, tpbcast_path_factory, tpbcast_run_shared_dir):
    """Run the dispatch scenarios once per run (world size 2): rank 0's and 1's views."""
    require(tpbcast_impl, "dispatch")

    def run():
        result = run_ranks(
            _target,
            2,
            args=(tpbcast_impl,),
            timeout=60.0,
            seed=tpbcast_settings.seed,
            workdir=str(tpbcast_path_factory.mktemp("fb-")),
            label="fallback",
        )
        result.raise_for_failure()
        return [o.value for o in result.outcomes], result.seed

    return s.once_per_run(tpbcast_run_shared_dir, "fallback", run, timeout=120.0)


def _both(observed, phase):
    views, _ = observed
    return [(rank, view[phase]) for rank, view in enumerate(views)]


@pytest.mark.clause("FALLBACK-1", "FALLBACK-8")
def test_uds_path_exactly_when_initialized(observed):
    for rank, view in _both(observed, "uds") + _both(observed, "uds_after_teardown"):
        assert view["decision"] == "uds" and view["one_path"] == "uds", s.clause(
            "FALLBACK-1/8",
            f"rank {rank}: 1 < tp_size <= local_world_size bootstraps UDS and uses it",
            (view["decision"], view["one_path"]),
        )
    for rank, view in _both(observed, "cross_node"):
        assert view["decision"] == "collective" and view["one_path"] == "collective", s.clause(
            "FALLBACK-1/8",
            f"rank {rank}: local_world_size < tp_size leaves it uninitialized: collective",
            (view["decision"], view["one_path"]),
        )


@pytest.mark.clause("FALLBACK-2", "FALLBACK-12")
def test_collective_then_sync_then_device_sync(observed):
    for rank, view in _both(observed, "cross_node"):
        kinds = [event[0] for event in view["one_events"]]
        assert kinds == ["collective", "sync_communication", "device_sync"], s.clause(
            "FALLBACK-2",
            f"rank {rank}: the collective path runs collective, sync_communication, "
            "device_sync, once each, in order",
            view["one_events"],
        )


@pytest.mark.clause("FALLBACK-3", "FALLBACK-12")
def test_nothing_of_the_engine_on_the_uds_path(observed):
    for rank, view in _both(observed, "uds"):
        kinds = [event[0] for event in view["one_events"] + view["multi_events"]]
        assert kinds and set(kinds) == {"uds"}, s.clause(
            "FALLBACK-3",
            f"rank {rank}: the UDS path reports itself and runs no collective or sync",
            kinds,
        )


@pytest.mark.clause("FALLBACK-4")
def test_empty_list_triggers_nothing(observed):
    for phase in ("uds", "cross_node"):
        for rank, view in _both(observed, phase):
            assert view["empty_error"] is None and view["empty_events"] == [], s.clause(
                "FALLBACK-4",
                f"rank {rank} ({phase}): an empty buffer list runs nothing",
                (view["empty_error"], view["empty_events"]),
            )


def _assert_same_error_on_both_paths(observed, key, cid, what):
    """Each rank's ``key`` error is raised, and identical, on the UDS and collective paths."""
    for rank, uds in _both(observed, "uds"):
        coll = observed[0][rank]["cross_node"]
        assert uds[key] is not None and uds[key] == coll[key], s.clause(
            cid,
            f"{what} raises the same error on both paths",
            f"UDS: {uds[key]}, collective: {coll[key]}",
            rank=rank,
        )


@pytest.mark.clause("FALLBACK-5")
def test_root_check_identical_on_both_paths(observed):
    _assert_same_error_on_both_paths(observed, "root_error", "FALLBACK-5", "root=1")
    for rank, uds in _both(observed, "uds"):
        coll = observed[0][rank]["cross_node"]
        assert uds["check_events"] == coll["check_events"] == [], s.clause(
            "FALLBACK-5",
            "the root check comes before any communication or sync",
            f"UDS: {uds['check_events']}, collective: {coll['check_events']}",
            rank=rank,
        )


@pytest.mark.clause("FALLBACK-6")
def test_mode_check_identical_on_both_paths(observed):
    _assert_same_error_on_both_paths(observed, "mode_error", "FALLBACK-6", "mode=dp")


@pytest.mark.clause("FALLBACK-7")
def test_cpu_tensors_only_on_the_uds_path(observed):
    for rank, view in _both(observed, "uds"):
        error = view["device_error"]
        assert error is not None and "meta" in error[1], s.clause(
            "FALLBACK-7", f"rank {rank}: a non-CPU buffer is refused naming its device", error
        )
        assert view["device_events"] == [], s.clause(
            "FALLBACK-7", "refused before any byte is sent", view["device_events"]
        )


@pytest.mark.clause("FALLBACK-9")
def test_consensus_on_one_ranks_bootstrap_failure(observed):
    views = _both(observed, "consensus")
    paths = {view["decision"] for _, view in views}
    assert paths == {"collective"}, s.clause(
        "FALLBACK-9", "all ranks agree on the collective path when rank 1 fails", paths
    )
    for rank, view in views:
        assert 1 in view["failed_ranks"], s.clause(
            "FALLBACK-9", f"rank {rank} knows rank 1 failed", view["failed_ranks"]
        )
        assert any("1" in w for w in view["warnings"]), s.clause(
            "FALLBACK-9", f"rank {rank} warns naming the failing rank", view["warnings"]
        )
        assert view["one_ok"] and view["multi_ok"], s.clause(
            "FALLBACK-9", "the agreed collective path delivers the data", rank
        )


@pytest.mark.clause("FALLBACK-10")
def test_teardown_resets_both_sides(observed):
    for rank, view in _both(observed, "uds_after_teardown"):
        assert view["decision"] == "uds" and view["one_ok"] and view["multi_ok"], s.clause(
            "FALLBACK-10", f"rank {rank}: a bootstrap after teardown starts clean", view["decision"]
        )


@pytest.mark.clause("FALLBACK-11")
def test_data_correct_on_both_paths_and_cross_node(observed):
    for phase in ("uds", "cross_node", "uds_after_teardown"):
        for rank, view in _both(observed, phase):
            assert view["one_ok"] and view["multi_ok"], s.clause(
                "FALLBACK-11", f"rank {rank} ({phase}) receives the root's bytes", phase
            )


@pytest.mark.clause("FALLBACK-13")
def test_several_buffers_in_one_collective(observed, tpbcast_impl):
    require(tpbcast_impl, "multi_buffer")
    for rank, view in _both(observed, "cross_node"):
        kinds = [event[0] for event in view["multi_events"]]
        assert kinds == ["collective", "sync_communication", "device_sync"], s.clause(
            "FALLBACK-13", f"rank {rank}: one collective and one sync sequence for 3 buffers", kinds
        )


@pytest.mark.clause("FALLBACK-14")
def test_no_broadcaster_side_effects_when_ineligible(observed):
    views, _ = observed
    for rank, view in enumerate(views):
        assert not view["cross_node_dir"], s.clause(
            "FALLBACK-14", f"rank {rank}: no socket dir is created for a cross-node layout", rank
        )
        assert view["cross_node"]["decision"] == "collective", s.clause(
            "FALLBACK-14", "a too-long path is not checked when the broadcaster is unused", view
        )


def _step(view, key, cid):
    """One step's observation; a scenario that crashed before it fails the clause."""
    assert key in view, s.clause(
        cid, f"the scenario gets to step {key!r}", view.get("crashed", "no crash recorded")
    )
    return view[key]


@pytest.mark.clause("FALLBACK-15")
def test_repeated_bootstrap_has_no_side_effects(observed):
    for rank, view in _both(observed, "repeat"):
        first = _step(view, "first", "FALLBACK-15")
        s.precondition(
            "FALLBACK-15",
            first["raised"] is None and first["path"] == "uds",
            f"rank {rank}: the first bootstrap brought UDS up ({first['raised']}, {first['path']})",
        )
        s.precondition(
            "FALLBACK-15", first["changes"], f"rank {rank}: the first bootstrap changed something"
        )
        if rank == 0:
            s.precondition(
                "FALLBACK-15", view["first_socket"] == "socket", "rank 0 listens after bootstrap"
            )
        path, ok, _ = _step(view, "first_roundtrip", "FALLBACK-15")
        s.precondition(
            "FALLBACK-15", path == "uds" and ok, f"rank {rank}: data flows over UDS ({path}, {ok})"
        )
        for label, how in (("again", "the same call"), ("agreeing", "agreeing explicit ranks")):
            seen = _step(view, label, "FALLBACK-15")
            assert seen["raised"] is None, s.clause(
                "FALLBACK-15", f"rank {rank}: {how} again succeeds", seen["raised"]
            )
            assert seen["same_decision"] and seen["path"] == "uds", s.clause(
                "FALLBACK-15",
                f"rank {rank}: {how} again returns the standing decision",
                (seen["same_decision"], seen["path"]),
            )
            assert seen["changes"] == {}, s.clause(
                "FALLBACK-15",
                f"rank {rank}: {how} again creates no process group, socket, fd or file "
                "and resets nothing",
                seen["changes"],
            )
            assert seen["calls"] == [] and seen["warnings"] == [], s.clause(
                "FALLBACK-15",
                f"rank {rank}: {how} again communicates and warns nothing",
                (seen["calls"], seen["warnings"]),
            )
        path, ok, _ = _step(view, "after_roundtrip", "FALLBACK-15")
        assert path == "uds" and ok, s.clause(
            "FALLBACK-15", f"rank {rank}: the group keeps working on UDS", (path, ok)
        )


def _warned(warnings_seen, name, *values):
    pattern = [re.compile(rf"(?<![\w.-]){v}(?![\w])") for v in values]
    return any(name in w and all(p.search(w) for p in pattern) for w in warnings_seen)


def _judge_explicit(rank, seen, which, given, derived, *, where):
    name = f"{which}_rank"
    what = f"rank {rank} ({where}): explicit {name}={given} where the layout derives {derived}"
    raised = seen["raised"]
    if raised is None:
        assert _warned(seen["warnings"], name, given, derived), s.clause(
            "FALLBACK-16", f"{what} raises, or warns naming both values", seen["warnings"]
        )
        return
    named = name in raised[1] and seen["mentions"][given] and seen["mentions"][derived]
    assert named, s.clause("FALLBACK-16", f"{what}: the error names {name} and both values", raised)
    assert seen["changes"] == {}, s.clause(
        "FALLBACK-16", f"{what}: the refused call changes nothing", seen["changes"]
    )


@pytest.mark.clause("FALLBACK-16")
def test_explicit_ranks_are_not_silently_overwritten(observed):
    views, _ = observed
    for rank, view in enumerate(views):
        fresh, repeat = view["explicit_fresh"], view["repeat"]
        wrong_tp = len(views) - 1 - rank
        cid = "FALLBACK-16"
        first = _step(repeat, "first", cid)
        s.precondition(
            "FALLBACK-16",
            first["path"] == "uds",
            f"rank {rank}: a bootstrap stands before the check",
        )
        for where, explicit in (
            ("before bootstrap", fresh),
            ("standing bootstrap", _step(repeat, "explicit", cid)),
        ):
            _judge_explicit(rank, _step(explicit, "tp", cid), "tp", wrong_tp, rank, where=where)
            _judge_explicit(rank, _step(explicit, "dp", cid), "dp", 3, 0, where=where)
        path, ok, _ = _step(repeat, "after_roundtrip", cid)
        assert path == "uds" and ok, s.clause(
            cid, f"rank {rank}: the group still works after the refused calls", (path, ok)
        )
