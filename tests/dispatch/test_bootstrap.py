"""Bootstrap policy: consensus through the process group, and a clean teardown."""

from __future__ import annotations

import os
import warnings

import pytest

from tpbcast.harness import RankContext, Status, run_ranks
from tpbcast.reference_impl import (
    BootstrapConsensusError,
    BootstrapFallbackWarning,
    ConfigurationError,
    CpuBroadcastDispatcher,
    CpuTpBroadcaster,
    DispatchPath,
    NotInitializedError,
    bootstrap,
    is_uds_eligible,
)

from . import _stack

FAILING_RANK = 2


def _bootstrap_recording_warnings(stack, ctx, *, local_world_size, base_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        decision = _stack.boot(stack, ctx, local_world_size=local_world_size, base_path=base_path)
    texts = [str(w.message) for w in caught if issubclass(w.category, BootstrapFallbackWarning)]
    return decision, texts


def _after_fallback(stack, ctx) -> tuple[bool, tuple]:
    stack.recorder.clear()
    buffers = _stack.payload(ctx.rank, 9)
    path = stack.dispatcher.broadcast_cpu(buffers)
    ok = path is DispatchPath.COLLECTIVE and _stack.payload_bytes(buffers) == _stack.expected(9)
    return ok, stack.recorder.events


def _init_failure_rank(ctx: RankContext) -> dict[str, object]:
    stack = _stack.make_stack(ctx)
    base_path = ctx.base_path
    if ctx.rank == FAILING_RANK:  # the fault: a socket path over the 107-byte sun_path limit
        base_path = ctx.base_path + "x" * 120
    try:
        decision, texts = _bootstrap_recording_warnings(
            stack, ctx, local_world_size=ctx.world_size, base_path=base_path
        )
        ok, events = _after_fallback(stack, ctx)
        return {
            "path": str(decision.path),
            "attempted": decision.attempted,
            "failed": decision.failed_ranks,
            "first": decision.first_failed_rank,
            "errors": dict(decision.errors),
            "local_error": decision.local_error,
            "warnings": texts,
            "initialized": stack.broadcaster.is_initialized(),
            "socket_left": _stack.exists(_stack.socket_file(ctx)),
            "fallback_ok": ok,
            "events": events,
        }
    finally:
        stack.dispatcher.teardown()


def test_one_rank_init_failure_sends_every_rank_to_the_fallback():
    results = run_ranks(_init_failure_rank, 4, **_stack.RUN).values()
    # the fault happened: rank 2's own initialize refused its path at once
    fault = results[FAILING_RANK]["local_error"]
    assert fault is not None and fault.startswith("ConfigurationError"), fault
    assert "107" in fault, fault
    for rank, res in enumerate(results):
        assert res["path"] == "collective", f"rank {rank} is not on the fallback"
        assert res["attempted"] is True
        assert FAILING_RANK in res["failed"], res["failed"]
        assert res["errors"][FAILING_RANK] == fault, "every rank sees rank 2's own error"
        assert len(res["warnings"]) == 1, res["warnings"]
        assert res["first"] == FAILING_RANK, "the cause is named first"
        assert f"first failure: rank {FAILING_RANK} after " in res["warnings"][0]
        assert f"s: {fault}" in res["warnings"][0]
        assert res["initialized"] is False
        assert res["socket_left"] is False
        assert res["fallback_ok"] is True
        assert [e[0] for e in res["events"]] == ["collective", "sync_communication", "device_sync"]


class _FaultAfterHandshake:
    """The real broadcaster, but ``initialize`` raises AFTER the wire bootstrap succeeded.

    The other ranks' initialize then succeeds too, so only the consensus can keep
    them off the UDS path: the case where "some on UDS, some on the collective"
    would otherwise happen.
    """

    def __init__(self, inner):
        self.inner = inner
        self.wire_up = False

    def initialize(self, rank, world_size, base_path, **kwargs):
        self.inner.initialize(rank, world_size, base_path, **kwargs)
        self.wire_up = self.inner.is_initialized()
        raise RuntimeError(f"injected fault on rank {rank} after a successful handshake")

    def broadcast(self, buffers, root=0):
        return self.inner.broadcast(buffers, root)

    def reset(self):
        self.inner.reset()

    def is_initialized(self):
        return self.inner.is_initialized()


def _late_fault_rank(ctx: RankContext) -> dict[str, object]:
    real = CpuTpBroadcaster(_stack.FAST)
    faulty = _FaultAfterHandshake(real)
    bcast = faulty if ctx.rank == FAILING_RANK else real
    stack = _stack.make_stack(ctx)
    stack.dispatcher = CpuBroadcastDispatcher(
        bcast, stack.engine, recorder=stack.recorder, rank=ctx.rank
    )
    try:
        generation = real.generation
        decision, texts = _bootstrap_recording_warnings(
            stack, ctx, local_world_size=ctx.world_size, base_path=ctx.base_path
        )
        ok, events = _after_fallback(stack, ctx)
        return {
            "wire_up": faulty.wire_up if ctx.rank == FAILING_RANK else None,
            "path": str(decision.path),
            "failed": decision.failed_ranks,
            "first": decision.first_failed_rank,
            "warnings": texts,
            "initialized": real.is_initialized(),
            "reset_count": real.generation - generation,
            "socket_left": _stack.exists(_stack.socket_file(ctx)),
            "fallback_ok": ok,
            "events": events,
        }
    finally:
        stack.dispatcher.teardown()


def test_late_fault_on_one_rank_resets_the_ranks_that_succeeded():
    results = run_ranks(_late_fault_rank, 4, **_stack.RUN).values()
    assert results[FAILING_RANK]["wire_up"] is True, "the fault must hit after the handshake"
    for rank, res in enumerate(results):
        assert res["path"] == "collective", f"rank {rank} stayed on UDS"
        assert res["failed"] == (FAILING_RANK,) and res["first"] == FAILING_RANK
        assert len(res["warnings"]) == 1
        assert "rank 2 after" in res["warnings"][0]
        assert "RuntimeError: injected fault on rank 2" in res["warnings"][0]
        assert res["initialized"] is False
        assert res["reset_count"] >= 1, "bootstrap must reset a broadcaster that came up"
        assert res["socket_left"] is False
        assert res["fallback_ok"] is True
        assert [e[0] for e in res["events"]] == ["collective", "sync_communication", "device_sync"]


class _DieAfterHandshake(_FaultAfterHandshake):
    """The real broadcaster; the process exits right after a successful handshake."""

    def initialize(self, rank, world_size, base_path, **kwargs):
        self.inner.initialize(rank, world_size, base_path, **kwargs)
        os._exit(DEATH_CODE if self.inner.is_initialized() else DEATH_CODE + 1)


DEATH_CODE = 7


def _death_rank(ctx: RankContext) -> dict[str, object]:
    real = CpuTpBroadcaster(_stack.FAST)
    bcast = _DieAfterHandshake(real) if ctx.rank == FAILING_RANK else real
    stack = _stack.make_stack(ctx)
    stack.dispatcher = CpuBroadcastDispatcher(bcast, stack.engine, rank=ctx.rank)
    try:
        _stack.boot(stack, ctx)
    except BootstrapConsensusError as exc:
        return {"error": str(exc), "initialized": real.is_initialized(), "phase": exc.phase}
    finally:
        stack.dispatcher.teardown()
    return {"error": None, "initialized": real.is_initialized(), "phase": None}


def test_rank_death_during_consensus_leaves_no_rank_on_uds():
    """A rank dies after its handshake: the others raise, with their broadcaster reset."""
    # Python ignores SIGPIPE, as the engines this layer runs in do: the consensus's gloo
    # sends to the dead rank must fail with EPIPE, not kill a survivor (it did, 1 run in
    # many, under the harness's default SIG_DFL, which exists to judge broadcasters).
    results = run_ranks(_death_rank, 3, **_stack.RUN, sigpipe="inherit").outcomes
    dead = results[FAILING_RANK]
    # the fault happened, and only after the wire bootstrap had succeeded
    assert (dead.status, dead.exit_code) == (Status.EXITED, DEATH_CODE), dead.report()
    for rank in (0, 1):
        assert results[rank].ok, results[rank].report()
        res = results[rank].value
        assert res["phase"] == "bootstrap-consensus", res
        assert "consensus collective (init) failed" in res["error"]
        assert res["initialized"] is False, f"rank {rank} left on UDS"


def _death_before_rebootstrap_rank(ctx: RankContext) -> dict[str, object]:
    stack = _stack.make_stack(ctx)
    try:
        first = _stack.boot(stack, ctx)
        if ctx.rank == FAILING_RANK:
            os._exit(DEATH_CODE if first.uses_uds else DEATH_CODE + 1)
        up_before = stack.broadcaster.is_initialized()
        try:  # bootstrap again without teardown: the layout consensus meets a dead rank
            _stack.boot(stack, ctx)
        except BootstrapConsensusError as exc:
            error = str(exc)
        else:
            error = None
        return {
            "up_before": up_before,
            "error": error,
            "up_after": stack.broadcaster.is_initialized(),
        }
    finally:
        stack.dispatcher.teardown()


def test_failed_layout_consensus_takes_down_a_broadcaster_left_up():
    results = run_ranks(_death_before_rebootstrap_rank, 3, **_stack.RUN).outcomes
    dead = results[FAILING_RANK]
    # the fault happened: rank 2 left after a first bootstrap that brought UDS up
    assert (dead.status, dead.exit_code) == (Status.EXITED, DEATH_CODE), dead.report()
    for rank in (0, 1):
        assert results[rank].ok, results[rank].report()
        res = results[rank].value
        assert res["up_before"] is True
        assert res["error"] is not None and "consensus collective (layout) failed" in res["error"]
        assert res["up_after"] is False, f"rank {rank} left on UDS after a failed consensus"


def _layout_disagreement_rank(ctx: RankContext) -> dict[str, object]:
    stack = _stack.make_stack(ctx)
    lws = 2 if ctx.rank == FAILING_RANK else ctx.world_size  # rank 2 thinks TP spans nodes
    try:
        decision, texts = _bootstrap_recording_warnings(
            stack, ctx, local_world_size=lws, base_path=ctx.base_path
        )
        ok, _ = _after_fallback(stack, ctx)
        return {
            "path": str(decision.path),
            "attempted": decision.attempted,
            "failed": decision.failed_ranks,
            "warnings": texts,
            "socket_left": _stack.exists(_stack.socket_file(ctx)),
            "elapsed": decision.elapsed,
            "fallback_ok": ok,
        }
    finally:
        stack.dispatcher.teardown()


def test_layout_disagreement_is_agreed_before_anyone_tries_uds():
    results = run_ranks(_layout_disagreement_rank, 4, **_stack.RUN).values()
    for rank, res in enumerate(results):
        assert res["path"] == "collective", rank
        assert res["attempted"] is False, "nobody may start a UDS bootstrap"
        assert res["failed"] == (FAILING_RANK,)
        assert len(res["warnings"]) == 1
        assert "rank 2: tp_size 4 > local_world_size 2" in res["warnings"][0]
        assert res["socket_left"] is False
        assert res["fallback_ok"] is True
        # no connect/init deadline was waited out (those are 3 s each)
        assert res["elapsed"] < _stack.FAST.init_timeout


def _reinit_rank(ctx: RankContext) -> dict[str, object]:
    import torch.distributed as dist

    rounds = []
    broadcaster = None
    old = None
    for round_no, lws in enumerate([ctx.world_size, ctx.world_size, 1]):
        stack = _stack.make_stack(ctx, store_name=f"pg{round_no}.store", broadcaster=broadcaster)
        broadcaster = stack.broadcaster
        decision = _stack.boot(stack, ctx, local_world_size=lws)
        buffers = _stack.payload(ctx.rank, round_no)
        path = stack.dispatcher.broadcast_cpu(buffers)
        generation = broadcaster.generation
        stack.dispatcher.teardown()
        rounds.append(
            {
                "decision": str(decision.path),
                "path": str(path),
                "data_ok": _stack.payload_bytes(buffers) == _stack.expected(round_no),
                "generation_bump": broadcaster.generation - generation,
                "initialized_after": broadcaster.is_initialized(),
                "group_after": dist.is_initialized(),
                "socket_after": _stack.exists(_stack.socket_file(ctx)),
            }
        )
        old = stack.dispatcher
    try:
        old.broadcast_cpu([bytearray(4)])
    except NotInitializedError as exc:
        stale = str(exc)
    else:
        stale = "no error"
    return {"rounds": rounds, "stale": stale}


def test_reinit_after_teardown_starts_clean():
    results = run_ranks(_reinit_rank, 2, **_stack.RUN).values()
    for res in results:
        paths = [(r["decision"], r["path"]) for r in res["rounds"]]
        assert paths == [("uds", "uds"), ("uds", "uds"), ("collective", "collective")]
        for r in res["rounds"]:
            assert r["data_ok"]
            assert r["generation_bump"] == 1, "teardown resets the broadcaster"
            assert r["initialized_after"] is False
            assert r["group_after"] is False, "teardown destroys the group it created"
            assert r["socket_after"] is False
        assert "after teardown()" in res["stale"]


def _rebootstrap_rank(ctx: RankContext) -> list[tuple[str, str, bool]]:
    stack = _stack.make_stack(ctx)
    seen = []
    try:
        for lws in (ctx.world_size, 1, ctx.world_size):
            decision = _stack.boot(stack, ctx, local_world_size=lws)
            buffers = _stack.payload(ctx.rank, lws)
            path = stack.dispatcher.broadcast_cpu(buffers)
            ok = _stack.payload_bytes(buffers) == _stack.expected(lws)
            seen.append((str(decision.path), str(path), ok))
    finally:
        stack.dispatcher.teardown()
    return seen


def test_a_collective_decision_takes_down_a_broadcaster_left_up():
    """Bootstrap again without teardown: the decision and the path taken always agree."""
    for seen in run_ranks(_rebootstrap_rank, 2, **_stack.RUN).values():
        uds, collective = ("uds", "uds", True), ("collective", "collective", True)
        assert seen == [uds, collective, uds]


def _mismatch_rank(ctx: RankContext) -> str:
    stack = _stack.make_stack(ctx)
    try:
        stack.dispatcher.bootstrap(
            tp_rank=(ctx.rank + 1) % ctx.world_size,
            tp_size=ctx.world_size,
            local_world_size=ctx.world_size,
            base_path=ctx.base_path,
            config=_stack.FAST,
        )
    except ConfigurationError as exc:
        return str(exc)
    finally:
        # The refusal needs no collective, so without this barrier one rank could tear
        # its group down while gloo still connects the other (connectFullMesh: "closed
        # by peer", seen under load).
        ctx.sync("checked")
        stack.dispatcher.teardown()
    return "no error"


def test_tp_rank_must_match_the_process_group():
    for rank, text in enumerate(run_ranks(_mismatch_rank, 2, **_stack.RUN).values()):
        assert f"the process group says rank {rank} of 2" in text


# -- pure checks (no torch op in the pytest process) ----------------------------------


@pytest.mark.parametrize(
    ("tp_size", "local_world_size", "eligible"),
    [(1, 1, False), (1, 8, False), (2, 2, True), (4, 8, True), (4, 2, False), (8, 1, False)],
)
def test_uds_only_when_tp_is_intra_node_and_above_one(tp_size, local_world_size, eligible):
    assert is_uds_eligible(tp_size, local_world_size) is eligible


class _IdleBroadcaster:
    def initialize(self, *args, **kwargs):
        raise AssertionError("bootstrap must refuse before initialize")

    def broadcast(self, buffers, root=0):
        raise AssertionError("unexpected")

    def reset(self):
        pass

    def is_initialized(self):
        return False


def test_group_timeout_must_cover_the_bootstrap_budget():
    dispatcher = CpuBroadcastDispatcher(_IdleBroadcaster(), _stack.UnusedEngine(timeout=5.0))
    with pytest.raises(ConfigurationError, match=r"timeout 5 s must exceed .* = 6 s"):
        dispatcher.bootstrap(
            tp_rank=0,
            tp_size=2,
            local_world_size=2,
            base_path="/nonexistent/g",
            config=_stack.FAST,
        )


@pytest.mark.parametrize(
    ("tp_rank", "tp_size", "local_world_size"), [(2, 2, 2), (-1, 2, 2), (0, 0, 1), (0, 2, 0)]
)
def test_bad_layout_refused(tp_rank, tp_size, local_world_size):
    with pytest.raises(ConfigurationError, match="invalid layout"):
        bootstrap(
            _IdleBroadcaster(),
            tp_rank=tp_rank,
            tp_size=tp_size,
            local_world_size=local_world_size,
            base_path="/nonexistent/g",
        )
