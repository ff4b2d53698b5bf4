"""Where a gloo group listens: the adapter's ``endpoint`` capability mapped onto torch.

torch offers two knobs, and the adapters turn the address the suite gives
(``set_endpoint(host, port)``) into exactly those, nothing else:

- the rendezvous store: ``tcp://<host>:<port>`` (a ``TCPStore`` served by rank 0), the
  ``init_method`` SGLang's and torch's users pass; without an endpoint, a ``TCPStore`` on
  127.0.0.1 at a port the kernel chooses, published in a handle file next to the base path
  (a ``FileStore`` keeps the previous group's keys, so a re-init on it hung);
- gloo's own listening sockets: gloo binds the interface named by ``GLOO_SOCKET_IFNAME``
  (read when a group is created), else the address the host name resolves to.  The
  interface that carries ``host`` is looked up and named there, as an operator would.

No torch import here: the self-tests read it without torch.
"""

from __future__ import annotations

import fcntl
import ipaddress
import socket
import struct
from dataclasses import dataclass
from typing import Final

__all__ = ["Endpoint", "interface_for"]

_SIOCGIFADDR: Final = 0x8915


@dataclass(frozen=True)
class Endpoint:
    """Rank 0's address and rendezvous port, and the address this rank listens on
    (``local_host``: its own host's, the same as ``host`` when every rank is on one)."""

    host: str
    port: int
    local_host: str = ""

    def __post_init__(self) -> None:
        if not self.local_host:
            object.__setattr__(self, "local_host", self.host)
        for address in (self.host, self.local_host):
            ipaddress.ip_address(address)  # an address, never a name: no resolver involved
        if not 0 < self.port < 65536:
            raise ValueError(f"port must be in 1..65535, got {self.port!r}")

    @property
    def init_method(self) -> str:
        return f"tcp://{self.host}:{self.port}"


def _ipv4_of(name: str) -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("256s", name.encode()[:15])
        try:
            reply = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, request)
        except OSError:  # EADDRNOTAVAIL: no IPv4 address on it
            return None
    return socket.inet_ntoa(reply[20:24])


def interface_for(host: str) -> str:
    """The name of the interface (in this process's network namespace) that carries
    ``host``; raises naming the interfaces seen if none does."""
    seen: list[str] = []
    for _index, name in socket.if_nameindex():
        address = _ipv4_of(name)
        seen.append(f"{name}={address}")
        if address == host:
            return name
    raise OSError(f"no interface carries {host} in this network namespace ({', '.join(seen)})")
