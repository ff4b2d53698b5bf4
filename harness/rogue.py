"""Rogue peers and rogue roots: wire-v1 speakers that misbehave on purpose.

``rogue_peer("garbage_handshake", ...)`` and ``rogue_root("wrong_probe", ...)`` return a
:class:`RogueTarget` to hand to ``run_ranks`` for one rank; the rank's value is a
:class:`RogueReport` (every byte sent and received, how each link closed), which is the
proof a fault test needs that the fault really happened.

Each behaviour is a plain function that runs in the calling process (a rank
target, a thread, or a test) and returns a frozen :class:`RogueReport` of what it
did (every action with its byte count and time) and what it saw the other side
do (probe byte, EOF, reset, stayed open).  A test first checks the report to
prove the fault was delivered, then judges the implementation's reaction.

Two time budgets, both explicit:

- ``timeout`` bounds the rogue's own set-up (connect/accept, handshake, payload
  it must read or write to reach the fault).  If set-up fails the fault was never
  delivered, so the rogue raises :class:`RogueError` (with the partial report)
  rather than returning a report a test could mistake for proof.
- ``observe`` bounds how long the rogue watches for the other side's reaction
  after the fault; watching ends early when the other side closes.

Closing a socket here is, for the other side, indistinguishable from the rogue
process dying: the kernel closes a dead process's fds the same way.

Behaviours (``rogue_peer(name, **kw)`` / ``rogue_root(name, **kw)`` make rank
targets of them; the functions can also be called directly):

- peer ``announce``: any int32 rank (bad, 0, duplicate); ``probe``/``reaction``
- peer ``send_raw``: arbitrary bytes as the handshake, then close/half_close/stall
- peer ``truncated_handshake``: 1-3 bytes of a rank, then close/half_close/stall
- peer ``garbage_handshake``: non-rank bytes, then close/half_close/stall
- peer ``silent``: connects, never sends; watches for rank 0 to drop it
- peer ``absent``: never connects (holds still)
- peer ``handshake``: well-behaved; reports the probe byte (or none)
- peer ``close_mid_payload``: reads N payload bytes, then closes
- peer ``stall_mid_payload``: reads N payload bytes, then stops reading
- peer ``read_payload``: well-behaved; returns probe + payload for byte-exact checks
- root ``never_accepts``: binds and listens, never accepts
- root ``never_probes``: accepts and reads ranks, never sends the probe
- root ``wrong_probe``: sends a probe byte other than 0x5a
- root ``dies_mid_broadcast``: probe, then N payload bytes in wire order, then closes
- root ``recording``: well-behaved; records raw handshakes, sends given payloads

The framed wire's rogues (``framed_peer``, ``framed_root``: a peer that never
acknowledges, acknowledges twice or wrongly, maps nothing; a root with a wrong magic or
count, a commit before the acknowledgements, a death between the acknowledgements and the
commit, an abort for a generation, a careless state file) are functions with hooks, called
from a rank target; see :mod:`._rogue_framed`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from ._rogue_framed import ACK_BEHAVIOURS, FramedReport, framed_peer, framed_root
from ._rogue_peer import (
    peer_absent,
    peer_announce,
    peer_close_mid_payload,
    peer_garbage_handshake,
    peer_handshake,
    peer_read_payload,
    peer_send_raw,
    peer_silent,
    peer_stall_mid_payload,
    peer_truncated_handshake,
)
from ._rogue_report import LinkReport, RogueAction, RogueError, RogueReport
from ._rogue_root import (
    root_dies_mid_broadcast,
    root_never_accepts,
    root_never_probes,
    root_recording,
    root_wrong_probe,
)

__all__ = [
    "ACK_BEHAVIOURS",
    "PEER_BEHAVIOURS",
    "ROOT_BEHAVIOURS",
    "FramedReport",
    "LinkReport",
    "RogueAction",
    "RogueError",
    "RogueReport",
    "RogueTarget",
    "framed_peer",
    "framed_root",
    "rogue_peer",
    "rogue_root",
]
# ----------------------------------------------------------------- as rank targets

PEER_BEHAVIOURS: Final[Mapping[str, Callable[..., RogueReport]]] = {
    "announce": peer_announce,
    "send_raw": peer_send_raw,
    "truncated_handshake": peer_truncated_handshake,
    "garbage_handshake": peer_garbage_handshake,
    "silent": peer_silent,
    "absent": peer_absent,
    "handshake": peer_handshake,
    "close_mid_payload": peer_close_mid_payload,
    "stall_mid_payload": peer_stall_mid_payload,
    "read_payload": peer_read_payload,
}
"""Rogue peer behaviours by name; each takes ``base_path`` first."""

ROOT_BEHAVIOURS: Final[Mapping[str, Callable[..., RogueReport]]] = {
    "never_accepts": root_never_accepts,
    "never_probes": root_never_probes,
    "wrong_probe": root_wrong_probe,
    "dies_mid_broadcast": root_dies_mid_broadcast,
    "recording": root_recording,
}
"""Rogue root behaviours by name; all but ``never_accepts`` take ``world_size`` second."""


class _RankContextLike(Protocol):
    @property
    def base_path(self) -> str: ...
    @property
    def world_size(self) -> int: ...
    def record(self, kind: str, /, **details: Any) -> Any: ...


@dataclass(frozen=True)
class RogueTarget:
    """A rogue as a ``run_ranks`` target: ``target(ctx) -> RogueReport``.

    Fills ``base_path`` (and ``world_size`` for roots) from the rank context and
    records the report's summary as a fault record, so the group result proves
    the fault happened even if the test only looks at faults.
    """

    role: Literal["peer", "root"]
    behaviour: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self, ctx: _RankContextLike, *args: object) -> RogueReport:
        if self.role == "peer":
            fn = PEER_BEHAVIOURS[self.behaviour]
            report = fn(ctx.base_path, *args, **self.kwargs)
        else:
            fn = ROOT_BEHAVIOURS[self.behaviour]
            if self.behaviour == "never_accepts":
                report = fn(ctx.base_path, *args, **self.kwargs)
            else:
                report = fn(ctx.base_path, ctx.world_size, *args, **self.kwargs)
        ctx.record(f"rogue_{self.role}", **report.details())
        return report


def _lookup(
    role: str,
    table: Mapping[str, Callable[..., RogueReport]],
    behaviour: str,
    kwargs: Mapping[str, Any],
) -> None:
    """Check the name and the keyword arguments now, in the test, not later in a rank."""
    if behaviour not in table:
        known = ", ".join(sorted(table))
        raise ValueError(f"unknown rogue {role} behaviour {behaviour!r}; known: {known}")
    signature = inspect.signature(table[behaviour])
    try:
        signature.bind_partial("<base_path>", **kwargs)
    except TypeError as exc:
        raise TypeError(
            f"rogue {role} {behaviour!r}: {exc}; its signature is {behaviour}{signature}"
        ) from None


def rogue_peer(behaviour: str, /, **kwargs: Any) -> RogueTarget:
    """A rank target playing rogue peer ``behaviour`` (a key of :data:`PEER_BEHAVIOURS`).

    ``kwargs`` are checked against the behaviour's signature here, so a typo fails in
    the test body rather than inside a forked rank.  Example target for rank 1:
    ``rogue_peer("announce", rank=-1, observe=5.0)``.
    """
    _lookup("peer", PEER_BEHAVIOURS, behaviour, kwargs)
    return RogueTarget("peer", behaviour, dict(kwargs))


def rogue_root(behaviour: str, /, **kwargs: Any) -> RogueTarget:
    """A rank target playing rogue root ``behaviour`` (a key of :data:`ROOT_BEHAVIOURS`)."""
    _lookup("root", ROOT_BEHAVIOURS, behaviour, kwargs)
    return RogueTarget("root", behaviour, dict(kwargs))
