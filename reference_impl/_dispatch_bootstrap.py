"""Bootstrap policy of the fallback dispatch: bring UDS up on every TP rank, or on none.

UDS only when ``1 < tp_size <= local_world_size``; every rank tries, then all
ranks agree through the process group, and if any rank failed (or saw a
different layout) every rank resets its broadcaster and uses the fallback, with
a warning naming the failing ranks and their errors.  Never some ranks on UDS
and others on the collective: upstream HEAD has no consensus and raised out of
init instead (reference §5).
"""

from __future__ import annotations

import enum
import logging
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from ._engines import CollectiveError, all_gather_status
from ._errors import ConfigurationError

__all__ = [
    "BootstrapConsensusError",
    "BootstrapDecision",
    "BootstrapFallbackWarning",
    "DispatchPath",
    "bootstrap",
    "derive_ranks",
    "is_uds_eligible",
    "kill_switch",
]

_log = logging.getLogger("tpbcast.reference_impl.dispatch")

#: Status codes exchanged by the bootstrap consensus (one int64 per rank).
STATUS_OK: Final = 0
STATUS_INELIGIBLE: Final = 1
STATUS_FAILED: Final = 2


class DispatchPath(enum.StrEnum):
    """Which path a ``broadcast_cpu`` call (or a bootstrap decision) took."""

    UDS = "uds"
    COLLECTIVE = "collective"
    SKIPPED = "skipped"  # nothing to send: no path ran at all


class _Broadcaster(Protocol):
    """What the policy needs of a broadcaster: bring it up, ask, take it down."""

    def initialize(
        self, rank: int, world_size: int, base_path: str, *, config: Any = None
    ) -> None: ...

    def is_initialized(self) -> bool: ...

    def reset(self) -> None: ...


class BootstrapConsensusError(CollectiveError):
    """The bootstrap's agreement collective itself failed; the broadcaster was reset."""


class BootstrapFallbackWarning(UserWarning):
    """UDS bootstrap failed (or layouts disagreed) on some rank: all ranks fall back."""


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


KILL_SWITCH_VARIABLES: Final = (
    "TPBCAST_CPU_TP_BROADCASTER_DISABLE",
    "RTP_LLM_CPU_TP_BROADCASTER_DISABLE",
)
"""Set to 1/true/yes/on (any case, surrounding blanks ignored) on a rank: that rank reports
itself ineligible, so the group's layout consensus keeps every rank on the collective path
(an operator's way out when the UDS path misbehaves, as RTP-LLM's redesign offers)."""
_KILL_SWITCH_ON: Final = frozenset({"1", "true", "yes", "on"})


def kill_switch(environ: Mapping[str, str] | None = None) -> str | None:
    """The kill-switch variable that is set on, as ``NAME=value``; None if none is.

    Blanks around the value are ignored (``"TRUE "`` from a shell script means on: upstream
    reads it as off and keeps UDS, which an operator who set it would not expect)."""
    env = os.environ if environ is None else environ
    for name in KILL_SWITCH_VARIABLES:
        value = env.get(name)
        if value is not None and value.strip().lower() in _KILL_SWITCH_ON:
            return f"{name}={value}"
    return None


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


def derive_ranks(
    rank: int, tp_size: int, *, tp_rank: int | None = None, dp_rank: int | None = None
) -> tuple[int, int]:
    """``(tp_rank, dp_rank)`` of global ``rank``: ``rank % tp_size``, ``rank // tp_size``.

    Explicit ranks from the caller are checked, never overwritten: upstream's
    ``_normalize_parallelism_ranks`` silently replaced a disagreeing tp_rank or
    dp_rank (PR #960 review rounds 5 and 6, FALLBACK-16).  Pure, and called
    before any process group or socket work, so a refused call changes nothing.

    :raises ConfigurationError: a non-int or negative value, or an explicit rank
        that disagrees with the derived one (naming both values).
    """
    for name, value in (("rank", rank), ("tp_size", tp_size)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigurationError(f"{name} must be an int, got {value!r}", phase="bootstrap")
    if tp_size < 1 or rank < 0:
        raise ConfigurationError(
            f"invalid layout: rank={rank}, tp_size={tp_size}", rank=rank, phase="bootstrap"
        )
    derived = {"tp_rank": rank % tp_size, "dp_rank": rank // tp_size}
    how = {
        "tp_rank": f"rank {rank} % tp_size {tp_size}",
        "dp_rank": f"rank {rank} // tp_size {tp_size}",
    }
    problems = []
    for name, given in (("tp_rank", tp_rank), ("dp_rank", dp_rank)):
        if given is None:
            continue
        if isinstance(given, bool) or not isinstance(given, int):
            raise ConfigurationError(
                f"{name} must be an int or None, got {given!r}", rank=rank, phase="bootstrap"
            )
        if given != derived[name]:
            problems.append(
                f"explicit {name}={given} disagrees with {name}={derived[name]} derived from "
                f"the layout ({how[name]})"
            )
    if problems:
        raise ConfigurationError(
            "; ".join(problems) + "; refusing to overwrite either value: pass the derived "
            "rank or none (a mismatch means the caller and the process group disagree on "
            "the layout)",
            rank=rank,
            phase="bootstrap",
        )
    return derived["tp_rank"], derived["dp_rank"]


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


def _check_deadline_budget(
    group_timeout: float | None, config: Any, broadcaster: Any, tp_rank: int
) -> None:
    """Refuse a group timeout shorter than the broadcaster's bootstrap deadlines.

    A rank whose initialize fails at once waits in the consensus collective while
    the others run into their connect/init deadlines; if the group's timeout is
    shorter, that rank's collective would time out first and the group would
    split into raisers and waiters.  The check is pure arithmetic on values every
    rank shares, so every rank raises or none does.
    """
    if config is None:
        config = getattr(broadcaster, "config", None)
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


def _agree(
    broadcaster: Any, status: int, detail: object, *, group: Any, tp_rank: int, step: str
) -> Any:
    """All-gather ``(status, detail)``; if the collective itself fails, reset first.

    A broadcaster that is up (this bootstrap's, or one left up by an earlier
    bootstrap) must not outlive a failed agreement: no rank may stay on UDS
    while the group cannot agree.
    """
    try:
        return all_gather_status(status, detail, group)
    except Exception as exc:
        broadcaster.reset()
        raise BootstrapConsensusError(
            f"consensus collective ({step}) failed: {_describe(exc)}",
            rank=tp_rank,
            phase="bootstrap-consensus",
        ) from exc


def _warn_fallback(message: str) -> None:
    _log.warning("%s", message)
    warnings.warn(message, BootstrapFallbackWarning, stacklevel=3)


def bootstrap(
    broadcaster: _Broadcaster,
    *,
    tp_rank: int,
    tp_size: int,
    local_world_size: int,
    base_path: str,
    group: Any = None,
    group_timeout: float | None = None,
    config: Any = None,
) -> BootstrapDecision:
    """Set up ``broadcaster`` on every TP rank, or agree that all fall back.

    Call on every rank of the TP group, after the process group exists (``group``:
    ``None`` is the default group; ``group_timeout``: its per-collective deadline, which
    must exceed the broadcaster's bootstrap budget).  A dispatcher calls this from
    ``CpuBroadcastDispatcher.bootstrap``, which also keeps the decision.  Steps:

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
    _check_layout(tp_rank, tp_size, local_world_size)
    _check_deadline_budget(group_timeout, config, broadcaster, tp_rank)
    _check_group(tp_rank, tp_size, group)

    def decide(**fields: Any) -> BootstrapDecision:
        if fields["path"] is DispatchPath.COLLECTIVE and broadcaster.is_initialized():
            # e.g. a second bootstrap that now sees a cross-node layout: the
            # dispatcher picks the path from is_initialized(), so the decision
            # only holds if a broadcaster left up from before goes down (on
            # every rank: they all reach the same decision)
            broadcaster.reset()
        return BootstrapDecision(
            tp_rank=tp_rank,
            tp_size=tp_size,
            local_world_size=local_world_size,
            elapsed=time.monotonic() - started,
            **fields,
        )

    switched_off = kill_switch()
    eligible = is_uds_eligible(tp_size, local_world_size) and switched_off is None
    if tp_size == 1:
        return decide(
            path=DispatchPath.COLLECTIVE,
            eligible=False,
            attempted=False,
            reason="tp_size 1: nobody to broadcast to, UDS not set up",
        )
    layout_note = (
        f"tp_size {tp_size} > local_world_size {local_world_size} (TP spans nodes)"
        if switched_off is None
        else f"{switched_off}: CPU TP broadcasts stay on the collective path"
    )
    views = _agree(
        broadcaster,
        STATUS_OK if eligible else STATUS_INELIGIBLE,
        layout_note,
        group=group,
        tp_rank=tp_rank,
        step="layout",
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
    status = STATUS_FAILED if local_error else STATUS_OK
    outcomes = _agree(broadcaster, status, mine, group=group, tp_rank=tp_rank, step="init")
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
