"""torch gloo plus a side listener that any stranger's connection breaks.

Rank 0 also listens on the endpoint's address (a port the kernel picks) for a control
connection that must open with a fixed greeting; a connection that does not (silence, a
wrong handshake, a connection closed at once) marks the broadcaster broken and every
later broadcast raises.  A transport must refuse or ignore strangers; this one lets the
first stranger take the group down.
"""

from __future__ import annotations

import socket
import threading
from typing import Any

from tpbcast.conformance.adapters.torch_gloo.adapter import TorchGlooBroadcaster

DEFECT = "torch gloo + side listener: a stranger's connection breaks the group"
KILLS = ("TCP-3",)
FAST = False
GREETING = b"tpbcast-control/1\n"


class StrangerBreaks(TorchGlooBroadcaster):
    def __init__(self) -> None:
        super().__init__()
        self._broken = threading.Event()
        self._listener: socket.socket | None = None

    def initialize(self, rank: int, world_size: int, base_path: str) -> None:
        if rank == 0 and self._endpoint is not None:
            self._listener = socket.create_server((self._endpoint.host, 0))
            threading.Thread(target=self._watch, args=(self._listener,), daemon=True).start()
        super().initialize(rank, world_size, base_path)

    def _watch(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(0.5)
                try:
                    hello = conn.recv(len(GREETING))
                except OSError:
                    hello = b""
                if hello != GREETING:
                    self._broken.set()  # the defect: a stranger is taken for a failure

    def broadcast(self, buffer: Any, root: int = 0) -> None:
        if self._broken.is_set():
            raise ConnectionError("rank 0: control connection broke (a stranger connected)")
        super().broadcast(buffer, root)

    def reset(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        super().reset()


def make() -> StrangerBreaks:
    return StrangerBreaks()
