"""The conformance hook of the fallback dispatch (adapter capability ``dispatch``).

One :class:`DispatchAdapter` per forked rank, driving the collective engine the
caller lends it (the conformance suite's recording engine over its own gloo
group: the suite judges the fallback from what that engine saw, DESIGN.md).
Plain types at the boundary, so a suite that never imports
``tpbcast.reference_impl`` can drive the dispatcher.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ._config import BroadcasterConfig
from ._dispatch import CpuBroadcastDispatcher, DispatchPath, ParallelMode, UdsBroadcaster
from ._dispatch_bootstrap import BootstrapDecision, derive_ranks
from ._engines import CollectiveEngine, EngineRecorder
from ._errors import NotInitializedError

__all__ = ["DispatchAdapter", "make_dispatch_adapter"]


class DispatchAdapter:
    """The duck-typed ``dispatch`` capability for the conformance suite.

    One per rank, inside a forked rank.  Plain types only at this boundary (mode
    as ``"tp"``/``"dp"`` or a :class:`ParallelMode`, paths as strings, events as
    tuples), so a suite that never imports ``tpbcast.reference_impl`` can drive
    it.  ``engine`` is the caller's: its process group already exists (``engine.group``,
    None = the default group) and outlives every bootstrap; this adapter never
    closes it.  Each :meth:`bootstrap` with new arguments builds a fresh
    :class:`CpuBroadcastDispatcher` over that engine and runs :func:`bootstrap`;
    the same arguments again change nothing (FALLBACK-15); :meth:`teardown`
    resets the broadcaster and drops the dispatcher.
    """

    def __init__(
        self,
        broadcaster: UdsBroadcaster,
        *,
        engine: CollectiveEngine,
        rank: int,
        world_size: int,
        workdir: str,
        group_timeout: float = 10.0,
        connect: float | None = None,
        init: float | None = None,
        io: float | None = None,
    ) -> None:
        self._broadcaster = broadcaster
        self._engine = engine
        self.rank = rank
        self.world_size = world_size
        self._workdir = workdir
        self._group_timeout = group_timeout
        quarter = group_timeout / 4
        self._config = BroadcasterConfig(
            connect_timeout=connect if connect is not None else quarter,
            init_timeout=init if init is not None else quarter,
            # as the adapter contract's set_deadlines: math.inf = wait forever
            io_timeout=None if io == math.inf else io if io is not None else group_timeout,
        )
        self._recorder = EngineRecorder()
        self._dispatcher: CpuBroadcastDispatcher | None = None
        self._incarnation = 0
        # (local_world_size, base_path, tp_rank, dp_rank) of the standing bootstrap
        self._bootstrapped: tuple[tuple[int, str, int, int], BootstrapDecision] | None = None

    @property
    def config(self) -> BroadcasterConfig:
        """The broadcaster settings every :meth:`bootstrap` initializes with."""
        return self._config

    @property
    def engine(self) -> CollectiveEngine:
        """The caller's engine (never closed by this adapter)."""
        return self._engine

    @property
    def incarnation(self) -> int:
        """How many bootstraps (each with a fresh dispatcher) have run so far."""
        return self._incarnation

    def bootstrap(
        self,
        *,
        local_world_size: int,
        base_path: str,
        tp_rank: int | None = None,
        dp_rank: int | None = None,
    ) -> BootstrapDecision:
        """Run the bootstrap policy on the engine's group (all ranks call it).

        ``tp_rank``/``dp_rank``, when given, must equal what the layout derives
        (``rank % world_size``, ``rank // world_size``): a disagreeing value
        raises :class:`ConfigurationError` naming both, before anything changes
        (FALLBACK-16).  A repeated call with the same arguments while that
        bootstrap still stands returns the same decision and touches nothing: no
        collective, no re-init, no socket (FALLBACK-15).  Different arguments
        tear the standing bootstrap down and start over.
        """
        ranks = derive_ranks(self.rank, self.world_size, tp_rank=tp_rank, dp_rank=dp_rank)
        key = (local_world_size, base_path, *ranks)
        standing = self._bootstrapped
        if (
            standing is not None
            and self._dispatcher is not None
            and standing[0] == key
            and standing[1].uses_uds == self._broadcaster.is_initialized()
        ):
            return standing[1]
        if self._dispatcher is not None:
            self.teardown()
        self._incarnation += 1
        self._dispatcher = CpuBroadcastDispatcher(
            self._broadcaster,
            self._engine,
            recorder=self._recorder,
            rank=self.rank,
            owns_engine=False,
        )
        try:
            decision = self._dispatcher.bootstrap(
                tp_rank=ranks[0],
                tp_size=self.world_size,
                local_world_size=local_world_size,
                base_path=base_path,
                config=self._config,
            )
        except BaseException:
            self.teardown()
            raise
        self._bootstrapped = (key, decision)
        return decision

    def broadcast_cpu(self, buffers: Sequence[Any], root: int = 0, mode: Any = "tp") -> str:
        """``broadcast_cpu`` of the current dispatcher; returns the path as a string."""
        if self._dispatcher is None:
            raise NotInitializedError(
                "call bootstrap() before broadcast_cpu()", rank=self.rank, phase="dispatch"
            )
        return self._dispatcher.broadcast_cpu(buffers, root, _parse_mode(mode)).value

    @property
    def path(self) -> str:
        """``"uds"`` or ``"collective"``: where a non-empty call would go now."""
        return self._dispatcher.path.value if self._dispatcher else DispatchPath.COLLECTIVE.value

    def calls(self) -> tuple[tuple[Any, ...], ...]:
        """Recorded events since the last :meth:`clear_calls`, in order."""
        return self._recorder.events

    def clear_calls(self) -> None:
        self._recorder.clear()

    def teardown(self) -> None:
        """Reset the broadcaster and drop the dispatcher (the engine stays); idempotent."""
        dispatcher, self._dispatcher = self._dispatcher, None
        self._bootstrapped = None
        if dispatcher is not None:
            dispatcher.teardown()
        else:
            self._broadcaster.reset()


def _parse_mode(mode: Any) -> Any:
    """``"tp"``/``"TP"`` -> ``ParallelMode.TP``; unknown text is passed on (and refused)."""
    if isinstance(mode, str):
        for member in ParallelMode:
            if mode.lower() in (member.value, member.name.lower()):
                return member
    return mode


def make_dispatch_adapter(
    broadcaster: UdsBroadcaster,
    *,
    engine: CollectiveEngine,
    rank: int,
    world_size: int,
    workdir: str,
    group_timeout: float = 10.0,
    connect: float | None = None,
    init: float | None = None,
    io: float | None = None,
) -> DispatchAdapter:
    """Build the ``dispatch`` capability object for ``broadcaster`` on one rank.

    ``engine`` is the caller's collective engine over an existing process group
    of ``world_size`` ranks (see :class:`DispatchAdapter`); ``group_timeout``
    is that group's per-collective deadline.

    ``connect``/``init`` default to a quarter of ``group_timeout`` each, so the
    bootstrap budget always fits inside the group's collective deadline; ``io``
    defaults to ``group_timeout``, and ``math.inf`` means no broadcast deadline
    (as in the adapter contract's ``set_deadlines``).
    """
    return DispatchAdapter(
        broadcaster,
        engine=engine,
        rank=rank,
        world_size=world_size,
        workdir=workdir,
        group_timeout=group_timeout,
        connect=connect,
        init=init,
        io=io,
    )
