"""A third-party wire-v1 implementation with its own error wording (and nothing else wrong).

Every error message is reworded; behaviour, bytes on the wire, exception classes and the
error attributes (``rank``, ``peer``, ``phase``, ``bytes_done``/``bytes_total``,
``elapsed``, ``path``, ``errno_name``) stay the reference's.  The new dialect keeps every
fact a MUST clause asks a message to carry (ranks, peers, roots, paths, lengths, modes,
byte counts, "closed" for a closed peer) but:

* shows bytes as Python bytes literals (``b'Z'``, ``b'\\x13'``), never ``0x5a``;
* spells an errno by its text (``Broken pipe``), never by its name (``EPIPE``);
* uses its own phrasing (``repeated`` for ``duplicate``, ``one call at a time`` for
  ``not re-entrant``, fields as ``rank 0, peer 2, stage broadcast, ...``).

So the suite may FAIL the SHOULD clauses about message wording (FAULT-4: the errno name in
the message; FAULT-5: 0x5a shown) and the MAY clause BCAST-15 ("says so" in its words),
and must FAIL no MUST clause: a MUST FAIL here is a test whose wording check decides a
MUST clause.  The issue's self-test ("an implementation whose only defect is wording gets
SHOULD FAILs and no MUST FAIL"), run by ``tests/test_mutants.py``.
"""

from __future__ import annotations

import errno
import os
import re
from typing import Final

from tpbcast.reference_impl import _errors

from ._base import Delegating

DEFECT = (
    "every error message reworded (no 0x5a, no errno names, other phrasing); behaviour, "
    "exception types and error attributes unchanged"
)
KILLS = ("FAULT-4", "FAULT-5")
FAST = False
# Beyond the convention: this mutant's defect breaks no MUST clause, so the matrix flags
# any MUST FAIL or ERROR it gets (a wording check deciding a MUST clause).
MUST_PASS = True

_HEX_BYTE: Final = re.compile(r"\b0x([0-9a-fA-F]{2})\b")
_ERRNO_NAME: Final = re.compile(r"\bE[A-Z0-9]{2,}\b")
_PHRASES: Final = (
    (re.compile(r"\bduplicate\b", re.IGNORECASE), "repeated"),
    (re.compile(r"\bnot re-entrant\b"), "one call at a time only"),
    (re.compile(r"\bis running\b"), "is still underway"),
    (re.compile(r"\bpassed\b"), "ran out"),
    (re.compile(r"\bmust\b"), "has to"),
    (re.compile(r"\bgot\b"), "received"),
    (re.compile(r"\brefusing\b"), "declining"),
    (re.compile(r"\bfailed\b"), "did not go through"),
)


def _errno_text(match: re.Match[str]) -> str:
    code = getattr(errno, match.group(0), None)
    return os.strerror(code).lower() if isinstance(code, int) and code else match.group(0)


def reword(text: str) -> str:
    """The dialect: bytes as literals, errno names as their text, other phrasing."""
    text = _HEX_BYTE.sub(lambda m: repr(bytes([int(m.group(1), 16)])), text)
    text = _ERRNO_NAME.sub(_errno_text, text)
    for pattern, replacement in _PHRASES:
        text = pattern.sub(replacement, text)
    return text


def _compose(self: _errors.BroadcastError) -> str:
    facts: list[str] = []
    if self.rank is not None:
        facts.append(f"rank {self.rank}")
    if self.peer is not None:
        facts.append(f"peer {self.peer}")
    if self.phase:
        facts.append(f"stage {self.phase}")
    if self.action:
        facts.append(f"while doing: {reword(self.action)}")
    if self.bytes_done is not None and self.bytes_total is not None:
        facts.append(f"{self.bytes_done} of {self.bytes_total} bytes moved")
    if self.elapsed is not None:
        facts.append(f"{self.elapsed * 1000:.0f} ms in")
    if self.errno_name:
        facts.append("os says: " + _ERRNO_NAME.sub(_errno_text, self.errno_name))
    if self.path:
        facts.append(f"socket {self.path}")
    told = f" ({'; '.join(facts)})" if facts else ""
    return f"{reword(self.reason)}{told}"


# Every reference error composes its message here (subclasses inherit it): the one patch
# rewords them all, while the fields, the classes and pickling stay as they are.
_errors.BroadcastError._compose = _compose  # type: ignore[method-assign]


class WordingMutant(Delegating):
    name = "m_wording"


def make() -> WordingMutant:
    return WordingMutant()
