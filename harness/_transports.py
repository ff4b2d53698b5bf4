"""Transport profiles: the one table of the transports an implementation can declare.

A transport profile names a way of moving rank 0's bytes to its peers (RTP-LLM's Unix-socket
wire, a shared-memory ring, ...).  An adapter declares its own in a ``transport`` attribute;
the conformance suite judges it on the ``core`` and ``dispatch`` clauses plus the clauses its
profile owns, and reports every other profile's clauses NOT_APPLICABLE.

Everything that names transports derives from :data:`TRANSPORT_PROFILES`: the adapter
loader's validation, the SPEC's scope tables, ``--list``, the reports and the ``staged_via``
marker's check.  Adding a profile is one row here, its clauses in ``conformance/clauses.toml``
(``scope = "<name>"``) and its tests; a profile that owns no clauses is legal (its
implementations are judged on ``core`` and ``dispatch`` alone).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, final

__all__ = [
    "DEFAULT_TRANSPORT",
    "TRANSPORT_PROFILES",
    "TransportProfile",
    "UnknownTransportError",
    "check_transport",
    "transport_names",
    "transport_profile",
    "transport_profiles",
]


@final
@dataclass(frozen=True)
class TransportProfile:
    """One row of the table: a transport an adapter may declare."""

    name: str
    """What an adapter writes in its ``transport`` attribute and a clause in its ``scope``."""
    summary: str
    """One line for ``--list``, SPEC.md and the reports: what the transport is."""


TRANSPORT_PROFILES: Final[tuple[TransportProfile, ...]] = (
    TransportProfile(
        "uds-v1",
        "RTP-LLM's Unix-socket wire v1: raw payload bytes over a star of stream sockets",
    ),
    TransportProfile(
        "uds-framed",
        "RTP-LLM's framed Unix-socket wire (PR #1119): wire v1's bootstrap, a 16-byte header "
        "per payload, an acknowledgement from every peer and one shared commit-or-abort "
        "decision per broadcast",
    ),
    TransportProfile(
        "shm",
        "a shared-memory transport: a ring of slots in a segment every rank maps",
    ),
    TransportProfile(
        "tcp",
        "a broadcaster over TCP connections between the ranks (a gloo group, zmq over tcp, "
        "MPI over TCP): it listens on an address and port, so hosts and networks matter",
    ),
)
"""Every transport profile, in the order the SPEC and the reports list them."""

DEFAULT_TRANSPORT: Final = "uds-v1"
"""An adapter that declares no transport speaks RTP-LLM's Unix-socket wire v1: the wire the
reference and RTP-LLM's own class speak, so an adapter for either needs no declaration."""


def transport_profiles() -> tuple[TransportProfile, ...]:
    """The table as it is now: what every consumer reads, rather than binding the tuple at
    import time, so that a test which adds a row
    (``monkeypatch.setattr(_transports, "TRANSPORT_PROFILES", ...)``) is seen everywhere."""
    return TRANSPORT_PROFILES


def transport_names() -> tuple[str, ...]:
    """The names of :func:`transport_profiles`, in table order."""
    return tuple(profile.name for profile in transport_profiles())


class UnknownTransportError(ValueError):
    """A transport name that is not a row of :data:`TRANSPORT_PROFILES`.

    Its own class, not a capability error: a typo in an adapter's ``transport`` would
    otherwise turn every clause of its real transport NOT_APPLICABLE, so the load stops.
    """

    def __init__(self, name: str, *, where: str = "", known: Sequence[str] = ()) -> None:
        known = tuple(known) or transport_names()
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" - did you mean {close[0]!r}?" if close else ""
        place = f" in {where}" if where else ""
        super().__init__(
            f"unknown transport {name!r}{place}{hint}; the transport profiles "
            f"(tpbcast.harness.adapter.TRANSPORT_PROFILES) are: {', '.join(known)}"
        )
        self.name = name
        self.known = tuple(known)


def transport_profile(name: str, *, where: str = "") -> TransportProfile:
    """The profile called ``name``.

    :raises UnknownTransportError: no row of the table has that name.
    """
    for profile in transport_profiles():
        if profile.name == name:
            return profile
    raise UnknownTransportError(name, where=where)


def check_transport(value: object, *, where: str = "") -> str:
    """Validate a declared transport; ``None`` (the attribute absent) is the default.

    :raises UnknownTransportError: a name that is not a row of the table.
    """
    if value is None:
        return DEFAULT_TRANSPORT
    return transport_profile(str(value), where=where).name
