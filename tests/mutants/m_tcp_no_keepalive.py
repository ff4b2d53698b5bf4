"""No keepalive and no TCP_USER_TIMEOUT: a peer whose host vanished is waited on.

The correct fan-out sets TCP keepalive (a few seconds idle, then probes) and
``TCP_USER_TIMEOUT`` on every connection, so the kernel ends a connection whose other host
stopped answering within about five seconds.  This mutant leaves the kernel's defaults
(keepalive off; unacknowledged data retransmitted for about 15 minutes), so nothing but
its 300 s default I/O deadline ends a wait on a host that vanished without a FIN or RST:
the 7200 s stall SGLang's users meet, shortened.
"""

from __future__ import annotations

import socket

from .tcp_fanout import TcpFanoutBroadcaster

DEFECT = (
    "tcp fan-out: no keepalive and no TCP_USER_TIMEOUT; only the 300 s default I/O deadline "
    "ends a wait on a vanished host"
)
KILLS = ("TCP-4",)
FAST = False


class NoKeepalive(TcpFanoutBroadcaster):
    def _tune_liveness(self, sock: socket.socket) -> None:
        pass  # the defect: the kernel's defaults, which wait out a silent host


def make() -> NoKeepalive:
    return NoKeepalive()
