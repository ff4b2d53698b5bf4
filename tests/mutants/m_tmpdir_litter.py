"""Each initialize leaves a rendezvous file in TMPDIR that nothing ever removes.

The shape of vLLM 0.33's MessageQueue (issue 22): every queue binds zmq IPC sockets under
``tempfile.gettempdir()`` and leaves the two socket files behind after a clean teardown
(290 in /tmp after one suite run).  The socket directory stays clean, so only a hygiene
check that also looks at TMPDIR can see it (HYG-2, HYG-4).
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from ._base import Delegating

DEFECT = "initialize leaves a rendezvous file in TMPDIR that reset and exit never remove"
KILLS = ("HYG-2", "HYG-4")
FAST = True


class TmpdirLitter(Delegating):
    def initialize(self, *args: Any, **kwargs: Any) -> Any:
        fd, _path = tempfile.mkstemp(prefix="rendezvous-", suffix=".ipc")
        os.close(fd)
        return self.inner.initialize(*args, **kwargs)


def make() -> TmpdirLitter:
    return TmpdirLitter()
