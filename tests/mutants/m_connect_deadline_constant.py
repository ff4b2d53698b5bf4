"""The adapter ignores ``set_deadlines(connect=...)``: a peer retries connect for a fixed 3 s.

With a 0.5 s setting judged within [0.4 s, 3.5 s], a fixed 3 s passes; the suite judges
the connect deadline at two settings, so the time to fail must follow the setting (TIME-3).
"""

from __future__ import annotations

from typing import Final

from ._base import Delegating

DEFECT = "set_deadlines(connect=...) is ignored: a peer retries connect for a fixed 3 s"
KILLS = ("TIME-3",)
FAST = True

_CONSTANT: Final = 3.0


class ConnectDeadlineConstant(Delegating):
    def __init__(self) -> None:
        super().__init__()
        self.inner.set_deadlines(connect=_CONSTANT)

    def set_deadlines(
        self,
        *,
        connect: float | None = None,
        init: float | None = None,
        io: float | None = None,
    ) -> None:
        del connect  # the defect: the connect deadline stays at the constant
        self.inner.set_deadlines(init=init, io=io)


def make() -> ConnectDeadlineConstant:
    return ConnectDeadlineConstant()
