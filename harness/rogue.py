"""Rogue peers and roots: byte-level ranks that misbehave on purpose, and what they saw.

``rogue_peer("garbage_handshake", ...)`` and ``rogue_root("wrong_probe", ...)`` return a
:class:`RogueTarget` to hand to ``run_ranks`` for one rank; the rank's value is a
:class:`RogueReport` (every byte sent and received, how each link closed), which is the
proof a fault test needs that the fault really happened.  ``PEER_BEHAVIOURS`` and
``ROOT_BEHAVIOURS`` list the names and what each does.
"""

from __future__ import annotations

from ._rogue import PEER_BEHAVIOURS, ROOT_BEHAVIOURS, RogueTarget, rogue_peer, rogue_root
from ._rogue_report import LinkReport, RogueAction, RogueError, RogueReport

__all__ = [
    "PEER_BEHAVIOURS",
    "ROOT_BEHAVIOURS",
    "LinkReport",
    "RogueAction",
    "RogueError",
    "RogueReport",
    "RogueTarget",
    "rogue_peer",
    "rogue_root",
]
