"""Settings of the reference broadcaster: deadlines and security knobs.

Upstream hard-codes 120 s per accept, per handshake read and per probe write,
so rank 0 may wait (world_size-1) x 240 s; and request-time I/O has no deadline
at all (a live but stuck root hangs every peer forever).  Here every wait is
bounded by a setting of :class:`BroadcasterConfig`, and ``init_timeout`` is ONE
deadline for the whole bootstrap, not one per peer.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Final

from ._errors import ConfigurationError

__all__ = ["WIRES", "BroadcasterConfig"]

#: The wires the reference speaks: RTP-LLM's raw-payload wire and its framed redesign.
WIRES: Final = ("v1", "framed")


def _check_seconds(name: str, value: object, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigurationError(
            f"{name} must be a number of seconds, got {value!r} (type={type(value).__name__})"
        )
    if not math.isfinite(value) or value <= 0:
        hint = "; use None to wait forever" if allow_none else ""
        raise ConfigurationError(f"{name} must be a finite number > 0, got {value!r}{hint}")


@dataclass(frozen=True, slots=True)
class BroadcasterConfig:
    """Deadlines (seconds) and security settings; frozen, validated on creation.

    :param connect_timeout: how long a peer keeps retrying ``connect`` while
        rank 0 is not listening yet (ENOENT / ECONNREFUSED / EAGAIN).
    :param connect_retry_interval: pause between two connect attempts.
    :param init_timeout: one deadline for accept + handshake + probe on rank 0,
        and for the handshake write + probe read on a peer (after it connected).
    :param io_timeout: deadline of one whole ``broadcast`` call; None waits
        forever, as upstream does ("request-time waits are expected").
    :param require_same_uid: rank 0 accepts only peers of its own effective uid
        (``SO_PEERCRED``), and a peer only a listener of its own uid.
    :param allowed_uids: further uids accepted besides our own (or instead of it
        when ``require_same_uid`` is False).  Empty and not ``require_same_uid``
        means no credential check.
    :param abstract_namespace: bind ``"\\0" + <base>_0.sock`` (Linux abstract
        namespace: no file, no directory, no stale sockets; credentials are the
        only fence, so keep ``require_same_uid``).
    :param verify_socket_dir: rank 0 creates the socket directory 0700, or
        verifies an existing one (ours, no group/other bits, not a symlink).
    :param wire: ``"v1"`` (raw payloads, RTP-LLM PR #960) or ``"framed"`` (a header,
        an acknowledgement from every peer and one shared commit-or-abort decision per
        broadcast, PR #1119): the same broadcaster speaks either, chosen per group.
    """

    connect_timeout: float = 120.0
    connect_retry_interval: float = 0.05
    init_timeout: float = 120.0
    io_timeout: float | None = 300.0
    require_same_uid: bool = True
    allowed_uids: tuple[int, ...] = ()
    abstract_namespace: bool = False
    verify_socket_dir: bool = True
    wire: str = "v1"

    def __post_init__(self) -> None:
        _check_seconds("connect_timeout", self.connect_timeout)
        _check_seconds("connect_retry_interval", self.connect_retry_interval)
        _check_seconds("init_timeout", self.init_timeout)
        _check_seconds("io_timeout", self.io_timeout, allow_none=True)
        uids = tuple(self.allowed_uids)
        for uid in uids:
            if isinstance(uid, bool) or not isinstance(uid, int) or uid < 0:
                raise ConfigurationError(f"allowed_uids must hold uids >= 0, got {uid!r}")
        object.__setattr__(self, "allowed_uids", uids)
        if self.wire not in WIRES:
            raise ConfigurationError(f"wire must be one of {', '.join(WIRES)}, got {self.wire!r}")
        for flag in ("require_same_uid", "abstract_namespace", "verify_socket_dir"):
            if not isinstance(getattr(self, flag), bool):
                raise ConfigurationError(f"{flag} must be a bool, got {getattr(self, flag)!r}")

    def replace(self, **changes: object) -> BroadcasterConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def accepted_uids(self, own_uid: int) -> frozenset[int] | None:
        """The uids a peer may have, or None when no credential check applies."""
        if self.require_same_uid:
            return frozenset((own_uid, *self.allowed_uids))
        if self.allowed_uids:
            return frozenset(self.allowed_uids)
        return None
