"""``broadcast_cpu``: the UDS broadcaster when it is up, else the collective fallback.

Modelled on upstream's ``execBroadcastCpu`` (reference §6) with the PR #960
review findings fixed on purpose:

- ``root`` and ``mode`` are checked FIRST, before the path is chosen, so both
  paths raise the same exception type with the same message (the review found
  a root check that existed only on the UDS path and a mode silently ignored).
- An empty buffer list -- or a list whose buffers hold 0 bytes in total -- does
  nothing at all on either path: no collective, no sync, no device sync (the
  review's "packed_buffers empty guard").
- UDS path (broadcaster initialized): CPU buffers only, checked before any byte
  moves; nothing of the engine runs (no collective, no sync, no device sync).
- Collective path (broadcaster not initialized): ONE collective broadcast of all
  buffers on the TP group, then ``sync_communication``, then ``device_sync``,
  exactly once each per call (the review caught a fallback that lost its sync).
  How several buffers become one collective is the engine's job; see
  :mod:`._engines` (packed back to back into one staging tensor).
- The path is picked per call from ``broadcaster.is_initialized()``, as upstream
  does.  A broadcaster that broke mid-stream stays initialized, so the call
  raises ``BrokenBroadcasterError`` instead of quietly switching to the
  collective on this rank alone (which would desynchronise the group).

Bootstrap policy (:func:`bootstrap`): UDS only when ``1 < tp_size <=
local_world_size``; every rank tries, then all ranks agree through the process
group, and if any rank failed (or saw a different layout) every rank resets its
broadcaster and uses the fallback, with a warning naming the failing ranks and
their errors.  Never some ranks on UDS and others on the collective: upstream
HEAD has no consensus and raised out of init instead (reference §5).
"""

from __future__ import annotations

import enum
import logging
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from ._engines import (
    CollectiveEngine,
    CollectiveError,
    EngineRecorder,
    all_gather_status,
)
from ._errors import ConfigurationError, NotInitializedError

__all__ = [
    "BootstrapConsensusError",
    "BootstrapDecision",
    "BootstrapFallbackWarning",
    "CpuBroadcastDispatcher",
    "DispatchAdapter",
    "DispatchPath",
    "ParallelMode",
    "UnsupportedDeviceError",
    "UnsupportedModeError",
    "UnsupportedRootError",
    "bootstrap",
    "is_uds_eligible",
    "make_dispatch_adapter",
]

_log = logging.getLogger("tpbcast.reference_impl.dispatch")

#: Status codes exchanged by the bootstrap consensus (one int64 per rank).
STATUS_OK: Final = 0
STATUS_INELIGIBLE: Final = 1
STATUS_FAILED: Final = 2


class ParallelMode(enum.Enum):
    """Which process group a collective targets (upstream's ``ParallelMode``).

    ``broadcast_cpu`` supports only :attr:`TP`; the others exist so a caller
    passing them gets a clear error instead of silently using the TP group.
    """

    TP = "tp"
    DP = "dp"
    DP_AND_TP = "dp_and_tp"
    FFN_TP = "ffn_tp"
    EP = "ep"


class DispatchPath(enum.StrEnum):
    """Which path a ``broadcast_cpu`` call (or a bootstrap decision) took."""

    UDS = "uds"
    COLLECTIVE = "collective"
    SKIPPED = "skipped"  # nothing to send: no path ran at all


class UnsupportedRootError(ConfigurationError):
    """``broadcast_cpu`` was asked for a root other than 0 (either path)."""


class UnsupportedModeError(ConfigurationError):
    """``broadcast_cpu`` was asked for a mode other than ``ParallelMode.TP`` (either path)."""


class UnsupportedDeviceError(ConfigurationError):
    """The UDS path got a tensor that is not on the CPU."""


class BootstrapConsensusError(CollectiveError):
    """The bootstrap's agreement collective itself failed; the broadcaster was reset."""


class BootstrapFallbackWarning(UserWarning):
    """UDS bootstrap failed (or layouts disagreed) on some rank: all ranks fall back."""


class UdsBroadcaster(Protocol):
    """The slice of the broadcaster API the dispatcher uses (DESIGN.md)."""

    def initialize(self, rank: int, world_size: int, base_path: str, **kwargs: Any) -> None: ...

    def broadcast(self, buffers: Any, root: int = 0) -> None: ...

    def reset(self) -> None: ...

    def is_initialized(self) -> bool: ...


@dataclass(frozen=True)
class _Item:
    """One validated buffer: the object itself, its size, and whether it is a tensor."""

    buffer: Any
    nbytes: int
    is_tensor: bool


def _torch_tensor_type() -> type | None:
    """``torch.Tensor`` if torch is already imported, else None (never imports it)."""
    torch = sys.modules.get("torch")
    tensor_type = getattr(torch, "Tensor", None)
    return tensor_type if isinstance(tensor_type, type) else None


class CpuBroadcastDispatcher:
    """Route ``broadcast_cpu`` to the UDS broadcaster or the collective engine.

    :param broadcaster: a ``CpuTpBroadcaster`` (or any object with
        ``initialize/broadcast/reset/is_initialized``); its ``is_initialized()``
        at call time decides the path, as upstream's singleton check does.
    :param engine: the collective engine of the fallback path.
    :param recorder: optional :class:`EngineRecorder`; the engine is then
        wrapped so every engine call is recorded, and UDS calls are noted as
        ``("uds", nbytes)``.
    :param group: the TP process group for the collective (None = the
        engine's own group, else the default group).
    :param rank: this rank, used only to name it in error messages.

    Not thread-safe, like the engine loop it models: one caller at a time.
    """

    def __init__(
        self,
        broadcaster: UdsBroadcaster,
        engine: CollectiveEngine,
        *,
        recorder: EngineRecorder | None = None,
        group: Any = None,
        rank: int | None = None,
    ) -> None:
        self._broadcaster = broadcaster
        self._raw_engine = engine
        self._recorder = recorder
        self._engine: CollectiveEngine = recorder.wrap(engine) if recorder else engine
        self._group = group if group is not None else getattr(engine, "group", None)
        self._rank = rank
        self._closed = False
        self.last_bootstrap: BootstrapDecision | None = None

    @property
    def broadcaster(self) -> UdsBroadcaster:
        return self._broadcaster

    @property
    def engine(self) -> CollectiveEngine:
        """The real engine (not the recording wrapper)."""
        return self._raw_engine

    @property
    def recorder(self) -> EngineRecorder | None:
        return self._recorder

    @property
    def group(self) -> Any:
        return self._group

    @property
    def path(self) -> DispatchPath:
        """The path a non-empty call would take right now."""
        if self._broadcaster.is_initialized():
            return DispatchPath.UDS
        return DispatchPath.COLLECTIVE

    def broadcast_cpu(
        self,
        buffers: Sequence[Any],
        root: int = 0,
        mode: ParallelMode = ParallelMode.TP,
    ) -> DispatchPath:
        """Broadcast ``buffers`` from rank 0 to every TP rank, in place on the others.

        Returns the path taken (``SKIPPED`` when there was nothing to send).
        Check order: root, mode, the buffer list (each one a tensor or a
        writable buffer), then the empty guard, then the path.
        """
        self._check_root(root)
        self._check_mode(mode)
        items = self._validate(buffers)
        if self._closed:
            raise NotInitializedError(
                "broadcast_cpu after teardown(): build a new dispatcher with a new engine",
                rank=self._rank,
                phase="dispatch",
            )
        total = sum(item.nbytes for item in items)
        if total == 0:
            return DispatchPath.SKIPPED
        if self._broadcaster.is_initialized():
            self._broadcast_uds(items, total)
            return DispatchPath.UDS
        self._broadcast_collective(items)
        return DispatchPath.COLLECTIVE

    def teardown(self) -> None:
        """Reset the broadcaster and close the engine (destroying a group it created).

        Idempotent.  Afterwards ``broadcast_cpu`` raises; a later bootstrap uses a
        new engine and dispatcher and may reuse the (now reset) broadcaster.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self._broadcaster.reset()
        finally:
            close = getattr(self._raw_engine, "close", None)
            if callable(close):
                close()

    # -- checks shared by both paths ------------------------------------------------

    def _check_root(self, root: object) -> None:
        if isinstance(root, bool) or not isinstance(root, int) or root != 0:
            raise UnsupportedRootError(
                f"broadcast_cpu supports only root=0; got root={root!r}",
                rank=self._rank,
                phase="dispatch",
            )

    def _check_mode(self, mode: object) -> None:
        if mode is not ParallelMode.TP:
            shown = f"ParallelMode.{mode.name}" if isinstance(mode, ParallelMode) else repr(mode)
            raise UnsupportedModeError(
                f"broadcast_cpu supports only ParallelMode.TP; got mode={shown}",
                rank=self._rank,
                phase="dispatch",
            )

    def _validate(self, buffers: object) -> tuple[_Item, ...]:
        tensor_type = _torch_tensor_type()
        single = (bytes, bytearray, memoryview) + ((tensor_type,) if tensor_type else ())
        if isinstance(buffers, single) or hasattr(buffers, "__array_interface__"):
            raise ConfigurationError(
                f"broadcast_cpu takes a list of buffers, got a single {type(buffers).__name__}; "
                "wrap it in a list",
                rank=self._rank,
                phase="dispatch",
            )
        if not isinstance(buffers, Sequence):
            raise ConfigurationError(
                f"broadcast_cpu takes a list of buffers, got {type(buffers).__name__}",
                rank=self._rank,
                phase="dispatch",
            )
        items: list[_Item] = []
        for index, buffer in enumerate(buffers):
            if tensor_type is not None and isinstance(buffer, tensor_type):
                tensor: Any = buffer
                nbytes = int(tensor.numel()) * int(tensor.element_size())
                items.append(_Item(buffer, nbytes, True))
                continue
            try:
                view = memoryview(buffer)
            except TypeError:
                raise ConfigurationError(
                    f"buffer {index} ({type(buffer).__name__}) is neither a torch tensor nor "
                    "a buffer-protocol object",
                    rank=self._rank,
                    phase="dispatch",
                ) from None
            with view:
                if view.readonly:
                    raise ConfigurationError(
                        f"buffer {index} ({type(buffer).__name__}) is read-only; non-root "
                        "ranks receive into it, so every rank must pass writable buffers",
                        rank=self._rank,
                        phase="dispatch",
                    )
                items.append(_Item(buffer, view.nbytes, False))
        return tuple(items)

    # -- the two paths -----------------------------------------------------------------

    def _broadcast_uds(self, items: Sequence[_Item], total: int) -> None:
        for index, item in enumerate(items):
            device = getattr(item.buffer, "device", None) if item.is_tensor else None
            if device is not None and getattr(device, "type", "cpu") != "cpu":
                raise UnsupportedDeviceError(
                    f"broadcast_cpu over UDS requires CPU tensors; buffer {index} is on "
                    f"device {device} ({item.nbytes} bytes)",
                    rank=self._rank,
                    phase="dispatch",
                    bytes_total=total,
                )
        if self._recorder is not None:
            self._recorder.note(DispatchPath.UDS.value, total)
        self._broadcaster.broadcast([item.buffer for item in items], 0)

    def _broadcast_collective(self, items: Sequence[_Item]) -> None:
        tensors = [self._as_tensor(index, item) for index, item in enumerate(items)]
        self._engine.broadcast(tensors, 0, self._group)
        self._engine.sync_communication()
        self._engine.device_sync()

    def _as_tensor(self, index: int, item: _Item) -> Any:
        """A tensor sharing memory with the caller's buffer (no copy)."""
        if item.is_tensor:
            return item.buffer
        import torch

        if item.nbytes == 0:
            # torch.frombuffer refuses an empty buffer, and there is nothing to share;
            # the UDS path takes it, so the collective path must too.
            return torch.empty(0, dtype=torch.uint8)
        try:
            if hasattr(item.buffer, "__array_interface__"):
                return torch.from_numpy(item.buffer)
            view = memoryview(item.buffer)
            if not view.c_contiguous:
                # A strided buffer (memoryview(buf)[::2]) works on the UDS path;
                # torch.frombuffer needs a flat one, numpy shares the strided one.
                import numpy

                return torch.from_numpy(numpy.asarray(view))
            return torch.frombuffer(view.cast("B"), dtype=torch.uint8)
        except (TypeError, ValueError, RuntimeError, ImportError) as exc:
            raise ConfigurationError(
                f"buffer {index} ({type(item.buffer).__name__}, {item.nbytes} bytes) cannot "
                f"be shared with torch for the collective path: {exc}",
                rank=self._rank,
                phase="dispatch",
            ) from exc


# -- bootstrap --------------------------------------------------------------------------


@dataclass(frozen=True)
class BootstrapDecision:
    """What :func:`bootstrap` decided, identical on every rank except ``local_*``.

    :param path: ``UDS`` or ``COLLECTIVE`` -- the same on every rank.
    :param eligible: the agreed layout allows UDS (every rank saw
        ``1 < tp_size <= local_world_size``).
    :param attempted: this rank called ``initialize``.
    :param failed_ranks: ranks whose layout disagreed or whose initialize failed.
    :param first_failed_rank: of those, the one whose initialize failed soonest
        (usually the cause: the others tend to wait for it until a deadline).
    :param errors: ``(rank, "Type: message")`` for each of ``failed_ranks``.
    :param local_error: this rank's own error text, if it had one.
    """

    path: DispatchPath
    tp_rank: int
    tp_size: int
    local_world_size: int
    eligible: bool
    attempted: bool
    reason: str
    failed_ranks: tuple[int, ...] = ()
    first_failed_rank: int | None = None
    errors: tuple[tuple[int, str], ...] = ()
    local_error: str | None = None
    elapsed: float = 0.0

    @property
    def uses_uds(self) -> bool:
        return self.path is DispatchPath.UDS


def is_uds_eligible(tp_size: int, local_world_size: int) -> bool:
    """Upstream's intra-node heuristic: UDS only when ``1 < tp_size <= local_world_size``."""
    return 1 < tp_size <= local_world_size


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _check_layout(tp_rank: int, tp_size: int, local_world_size: int) -> None:
    for name, value in (
        ("tp_rank", tp_rank),
        ("tp_size", tp_size),
        ("local_world_size", local_world_size),
    ):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigurationError(f"{name} must be an int, got {value!r}", phase="bootstrap")
    if tp_size < 1 or not 0 <= tp_rank < tp_size or local_world_size < 1:
        raise ConfigurationError(
            f"invalid layout: tp_rank={tp_rank}, tp_size={tp_size}, "
            f"local_world_size={local_world_size}",
            rank=tp_rank,
            phase="bootstrap",
        )


def _check_group(tp_rank: int, tp_size: int, group: Any) -> None:
    import torch.distributed as dist

    if not dist.is_initialized():
        raise ConfigurationError(
            "bootstrap needs an initialized process group for the consensus step",
            rank=tp_rank,
            phase="bootstrap",
        )
    group_size, group_rank = dist.get_world_size(group), dist.get_rank(group)
    if (group_size, group_rank) != (tp_size, tp_rank):
        raise ConfigurationError(
            f"the process group says rank {group_rank} of {group_size}, but bootstrap was "
            f"given tp_rank={tp_rank}, tp_size={tp_size}",
            rank=tp_rank,
            phase="bootstrap",
        )


def _check_deadline_budget(target: Any, config: Any, tp_rank: int) -> None:
    """Refuse a group timeout shorter than the broadcaster's bootstrap deadlines.

    A rank whose initialize fails at once waits in the consensus collective while
    the others run into their connect/init deadlines; if the group's timeout is
    shorter, that rank's collective would time out first and the group would
    split into raisers and waiters.  The check is pure arithmetic on values every
    rank shares, so every rank raises or none does.
    """
    engine = getattr(target, "engine", None)
    group_timeout = getattr(engine, "timeout", None)
    if config is None:
        config = getattr(getattr(target, "broadcaster", target), "config", None)
    connect = getattr(config, "connect_timeout", None)
    init = getattr(config, "init_timeout", None)
    if not isinstance(group_timeout, int | float) or connect is None or init is None:
        return
    budget = float(connect) + float(init)
    if group_timeout <= budget:
        raise ConfigurationError(
            f"process-group timeout {group_timeout:g} s must exceed the broadcaster's "
            f"bootstrap budget connect_timeout + init_timeout = {budget:g} s; shorten the "
            "broadcaster deadlines (BroadcasterConfig) or lengthen the group timeout",
            rank=tp_rank,
            phase="bootstrap",
        )


def _agree(status: int, detail: object, group: Any, tp_rank: int, step: str) -> Any:
    try:
        return all_gather_status(status, detail, group)
    except Exception as exc:
        raise BootstrapConsensusError(
            f"consensus collective ({step}) failed: {_describe(exc)}",
            rank=tp_rank,
            phase="bootstrap-consensus",
        ) from exc


def _warn_fallback(message: str) -> None:
    _log.warning("%s", message)
    warnings.warn(message, BootstrapFallbackWarning, stacklevel=3)


def bootstrap(
    target: Any,
    *,
    tp_rank: int,
    tp_size: int,
    local_world_size: int,
    base_path: str,
    group: Any = None,
    config: Any = None,
) -> BootstrapDecision:
    """Set up the UDS broadcaster on every TP rank, or agree that all fall back.

    Call on every rank of the TP group, after the process group exists.
    ``target`` is a :class:`CpuBroadcastDispatcher` (the decision is also kept
    as its ``last_bootstrap``) or a bare broadcaster.  Steps:

    1. argument and layout checks (the group must say ``tp_rank`` of ``tp_size``);
    2. layout consensus: each rank reports whether ``1 < tp_size <=
       local_world_size`` holds for it, so ranks on differently sized nodes never
       split; if every rank is ineligible this is the normal cross-node/TP=1
       case (no warning), if only some are, every rank falls back with a warning;
    3. each rank calls ``initialize``; a second all-gather shares the outcome; if
       any rank failed, every rank resets its broadcaster, warns (naming the
       failing ranks and their errors) and uses the collective fallback.

    Raises :class:`BootstrapConsensusError` if a consensus collective itself
    fails (the broadcaster is reset first, so no rank is left on UDS).
    """
    started = time.monotonic()
    broadcaster = getattr(target, "broadcaster", target)
    if group is None:
        group = getattr(target, "group", None)
    _check_layout(tp_rank, tp_size, local_world_size)
    _check_deadline_budget(target, config, tp_rank)
    _check_group(tp_rank, tp_size, group)

    def decide(**fields: Any) -> BootstrapDecision:
        if fields["path"] is DispatchPath.COLLECTIVE and broadcaster.is_initialized():
            # e.g. a second bootstrap that now sees a cross-node layout: the
            # dispatcher picks the path from is_initialized(), so the decision
            # only holds if a broadcaster left up from before goes down (on
            # every rank: they all reach the same decision)
            broadcaster.reset()
        decision = BootstrapDecision(
            tp_rank=tp_rank,
            tp_size=tp_size,
            local_world_size=local_world_size,
            elapsed=time.monotonic() - started,
            **fields,
        )
        if isinstance(target, CpuBroadcastDispatcher):
            target.last_bootstrap = decision
        return decision

    eligible = is_uds_eligible(tp_size, local_world_size)
    if tp_size == 1:
        return decide(
            path=DispatchPath.COLLECTIVE,
            eligible=False,
            attempted=False,
            reason="tp_size 1: nobody to broadcast to, UDS not set up",
        )
    layout_note = f"tp_size {tp_size} > local_world_size {local_world_size} (TP spans nodes)"
    views = _agree(
        STATUS_OK if eligible else STATUS_INELIGIBLE, layout_note, group, tp_rank, "layout"
    )
    ineligible = tuple(rank for rank, (code, _) in enumerate(views) if code != STATUS_OK)
    if len(ineligible) == tp_size:
        return decide(
            path=DispatchPath.COLLECTIVE, eligible=False, attempted=False, reason=layout_note
        )
    if ineligible:
        errors = tuple((rank, str(views[rank][1])) for rank in ineligible)
        reason = (
            f"layouts disagree: rank(s) {_ranks(ineligible)} of {tp_size} report "
            + "; ".join(f"rank {rank}: {text}" for rank, text in errors)
            + f"; all {tp_size} ranks use the collective fallback"
        )
        _warn_fallback(f"tpbcast UDS bootstrap skipped: {reason}")
        return decide(
            path=DispatchPath.COLLECTIVE,
            eligible=False,
            attempted=False,
            reason=reason,
            failed_ranks=ineligible,
            errors=errors,
            local_error=None if eligible else layout_note,
        )

    local_error: str | None = None
    init_started = time.monotonic()
    try:
        if config is None:
            broadcaster.initialize(tp_rank, tp_size, base_path)
        else:
            broadcaster.initialize(tp_rank, tp_size, base_path, config=config)
    except Exception as exc:
        local_error = _describe(exc)
    mine = (local_error or "", time.monotonic() - init_started)
    try:
        outcomes = _agree(STATUS_FAILED if local_error else STATUS_OK, mine, group, tp_rank, "init")
    except BootstrapConsensusError:
        broadcaster.reset()
        raise
    failed = tuple(rank for rank, (code, _) in enumerate(outcomes) if code != STATUS_OK)
    if not failed:
        return decide(
            path=DispatchPath.UDS,
            eligible=True,
            attempted=True,
            reason=f"1 < tp_size {tp_size} <= local_world_size {local_world_size}: UDS is up",
        )
    broadcaster.reset()
    # the rank that failed first is usually the cause; the others mostly waited
    # for it until their connect/init deadline
    by_time = sorted(failed, key=lambda rank: (float(outcomes[rank][1][1]), rank))
    first = by_time[0]
    errors = tuple((rank, str(outcomes[rank][1][0])) for rank in failed)
    reason = (
        f"UDS initialize failed on rank(s) {_ranks(failed)} of {tp_size}; first failure: "
        + "; then ".join(
            f"rank {rank} after {float(outcomes[rank][1][1]):.2f} s: {outcomes[rank][1][0]}"
            for rank in by_time
        )
        + f"; all {tp_size} ranks reset the broadcaster and use the collective fallback"
    )
    _warn_fallback(f"tpbcast UDS bootstrap failed: {reason}")
    return decide(
        path=DispatchPath.COLLECTIVE,
        eligible=True,
        attempted=True,
        reason=reason,
        failed_ranks=failed,
        first_failed_rank=first,
        errors=errors,
        local_error=local_error,
    )


def _ranks(ranks: Sequence[int]) -> str:
    return ", ".join(str(rank) for rank in ranks)


# -- the conformance hook (adapter capability "dispatch") -------------------------------


class DispatchAdapter:
    """The duck-typed ``dispatch`` capability for the conformance suite.

    One per rank, inside a forked rank.  Plain types only at this boundary (mode
    as ``"tp"``/``"dp"`` or a :class:`ParallelMode`, paths as strings, events as
    tuples), so a suite that never imports ``tpbcast.reference_impl`` can drive
    it.  Each :meth:`bootstrap` creates a fresh gloo process group over a
    ``FileStore`` in ``workdir`` (a new store file per incarnation) and runs
    :func:`bootstrap`; :meth:`teardown` resets the broadcaster and destroys it.
    """

    def __init__(
        self,
        broadcaster: UdsBroadcaster,
        *,
        rank: int,
        world_size: int,
        workdir: str,
        group_timeout: float = 10.0,
        connect: float | None = None,
        init: float | None = None,
        io: float | None = None,
    ) -> None:
        from ._config import BroadcasterConfig

        self._broadcaster = broadcaster
        self.rank = rank
        self.world_size = world_size
        self._workdir = workdir
        self._group_timeout = group_timeout
        quarter = group_timeout / 4
        self._config = BroadcasterConfig(
            connect_timeout=connect if connect is not None else quarter,
            init_timeout=init if init is not None else quarter,
            io_timeout=io if io is not None else group_timeout,
        )
        self._recorder = EngineRecorder()
        self._dispatcher: CpuBroadcastDispatcher | None = None
        self._incarnation = 0

    def bootstrap(self, *, local_world_size: int, base_path: str) -> BootstrapDecision:
        """Create the process group, then run the bootstrap policy (all ranks call it)."""
        from ._engines import TorchDistributedEngine

        if self._dispatcher is not None:
            self.teardown()
        self._incarnation += 1
        engine = TorchDistributedEngine.create(
            self.rank,
            self.world_size,
            self._workdir,
            store_name=f"dispatch{self._incarnation}.store",
            timeout=self._group_timeout,
        )
        self._dispatcher = CpuBroadcastDispatcher(
            self._broadcaster, engine, recorder=self._recorder, rank=self.rank
        )
        try:
            return bootstrap(
                self._dispatcher,
                tp_rank=self.rank,
                tp_size=self.world_size,
                local_world_size=local_world_size,
                base_path=base_path,
                config=self._config,
            )
        except BaseException:
            self.teardown()
            raise

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
        """Reset the broadcaster and destroy the process group; idempotent."""
        dispatcher, self._dispatcher = self._dispatcher, None
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
    rank: int,
    world_size: int,
    workdir: str,
    group_timeout: float = 10.0,
    connect: float | None = None,
    init: float | None = None,
    io: float | None = None,
) -> DispatchAdapter:
    """Build the ``dispatch`` capability object for ``broadcaster`` on one rank.

    ``connect``/``init`` default to a quarter of ``group_timeout`` each, so the
    bootstrap budget always fits inside the group's collective deadline.
    """
    return DispatchAdapter(
        broadcaster,
        rank=rank,
        world_size=world_size,
        workdir=workdir,
        group_timeout=group_timeout,
        connect=connect,
        init=init,
        io=io,
    )
