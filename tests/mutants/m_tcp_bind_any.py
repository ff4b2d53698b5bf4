"""Rank 0 listens on the wildcard address: every interface of the host, not the one given.

The correct fan-out binds its listener to exactly the ``host`` of ``set_endpoint``.  This
mutant binds ``0.0.0.0`` (``::`` for IPv6), the default of many servers and of a gloo or
TCPStore setup that is not told an interface: the group still forms and broadcasts, but
its port is open on every network the host is on.
"""

from __future__ import annotations

import ipaddress

from .tcp_fanout import TcpFanoutBroadcaster

DEFECT = "tcp fan-out: rank 0 listens on the wildcard address (0.0.0.0 / ::), not the one given"
KILLS = ("TCP-1",)
FAST = True


class BindAny(TcpFanoutBroadcaster):
    def _bind_address(self, host: str) -> str:
        return "::" if ipaddress.ip_address(host).version == 6 else "0.0.0.0"  # the defect


def make() -> BindAny:
    return BindAny()
