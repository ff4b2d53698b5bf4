"""The adapter ignores ``set_deadlines(io=...)``: every broadcast has a fixed 3 s deadline.

A deadline that exists but does not follow its setting passes any check that only asks
"did it fail within [0.8 d, d + margin]" for one d below 3 s, and any io=inf check that
releases the wait before 3 s.  The suite judges each deadline at two settings and waits
out an io=inf broadcast past 3 s (TIME-5, TIME-6, TIME-8).
"""

from __future__ import annotations

from typing import Final

from ._base import Delegating

DEFECT = "set_deadlines(io=...) is ignored: every broadcast times out after a fixed 3 s"
KILLS = ("TIME-5", "TIME-6", "TIME-8")
FAST = False

_CONSTANT: Final = 3.0


class IoDeadlineConstant(Delegating):
    def __init__(self) -> None:
        super().__init__()
        self.inner.set_deadlines(io=_CONSTANT)

    def set_deadlines(
        self,
        *,
        connect: float | None = None,
        init: float | None = None,
        io: float | None = None,
    ) -> None:
        del io  # the defect: the I/O deadline stays at the constant
        self.inner.set_deadlines(connect=connect, init=init)


def make() -> IoDeadlineConstant:
    return IoDeadlineConstant()
