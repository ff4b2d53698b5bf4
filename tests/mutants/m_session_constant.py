"""The base-path helper's default session id is a constant (no parent pid, no key).

SEC-13: two groups on one host (two launchers, or one launcher with two rendezvous keys)
must get different default paths.  This mutant gives every group the same one: the
second rank 0 finds the first one's live listener.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ._base import Delegating

DEFECT = "the default session id is a constant: concurrent groups share one socket path"
KILLS = ("SEC-13",)
FAST = True

_SESSION_ENV = ("TPBCAST_SESSION_ID", "RTP_LLM_CPU_TP_BROADCASTER_ID")


class SessionConstant(Delegating):
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
            session_id = "default"  # the defect: neither the launcher nor the key counts
        return str(
            self.inner.make_base_path(
                dp_rank, session_id=session_id, base_dir=base_dir, environ=environ, key=key
            )
        )


def make() -> SessionConstant:
    return SessionConstant()
