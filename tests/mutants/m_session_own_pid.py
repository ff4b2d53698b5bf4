"""The base-path helper's default session id uses the rank's own pid, not its parent's.

Ranks of one group are siblings of one launcher: ``p<ppid>`` (plus a key) is the same on
all of them (SEC-13).  This mutant uses ``os.getpid()``, so every rank of a group
computes a different path and the group can never meet.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ._base import Delegating

DEFECT = "the default session id is the rank's own pid: the ranks of one group disagree"
KILLS = ("SEC-13",)
FAST = True

_SESSION_ENV = ("TPBCAST_SESSION_ID", "RTP_LLM_CPU_TP_BROADCASTER_ID")


class SessionOwnPid(Delegating):
    def make_base_path(
        self,
        dp_rank: int = 0,
        *,
        session_id: str | None = None,
        base_dir: str | None = None,
        environ: Mapping[str, str] | None = None,
        key: str | None = None,
    ) -> str:
        env = os.environ if environ is None else environ
        if not session_id and not any(env.get(name) for name in _SESSION_ENV):
            session_id = f"p{os.getpid()}"  # the defect: getpid, not getppid
            if key:
                session_id += f"_{key}"
        return str(
            self.inner.make_base_path(
                dp_rank, session_id=session_id, base_dir=base_dir, environ=environ, key=key
            )
        )


def make() -> SessionOwnPid:
    return SessionOwnPid()
