"""Opt-in: back the forking process's anonymous memory with transparent huge pages.

What a rank costs is mostly the kernel copying the parent's page tables at ``fork``: one
entry per 4 KiB page that the parent has touched, and a process that imported torch has
~145 MiB of them (~37,000 entries); the child's and the parent's copy-on-write faults
come next. Backed by 2 MiB pages, the same memory is ~75 entries. Measured on the
2-vCPU CI box (reports/bench/harness.md, "Huge pages"): a 2-rank ``run_ranks`` of a
trivial target from a torch parent used about half the CPU after a collapse.

``TPBCAST_HUGEPAGES=1`` makes ``run_ranks`` ask the kernel (``madvise(MADV_COLLAPSE)``,
Linux >= 6.1, independent of the system's THP mode unless it is ``never``) to collapse
every private anonymous mapping of this process into huge pages before it forks, once,
and again whenever the anonymous memory grew by :data:`REGROW_BYTES` since (new imports,
a bigger heap). Off by default: the first collapse of a torch parent takes ~0.1-0.5 s, a
cost only a session running many groups earns back (~6 ms of CPU saved per 2-rank group),
and it marks those mappings MADV_HUGEPAGE, so later growth there may come in 2 MiB steps.
Nothing else changes: the ranks see the same memory, and every harness guarantee
(PDEATHSIG, capture, verdicts, stack dumps, coverage) is untouched. Where the kernel
refuses (an old kernel, THP ``never``, a mapping too small to hold a huge page), the
mapping is left as it is: this is an optimisation, never an error.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from functools import cache
from typing import Any

__all__ = ["ENV", "REGROW_BYTES", "CollapseReport", "collapse_anonymous", "maybe_collapse"]

ENV = "TPBCAST_HUGEPAGES"
REGROW_BYTES = 32 << 20  # collapse again once the anonymous memory grew by this much
_HUGE = 2 << 20
_MADV_HUGEPAGE = 14
_MADV_COLLAPSE = 25
_last_anon: list[int] = []  # anonymous bytes right after the last collapse
# Only the process that imported the harness collapses: a rank running a nested group is a
# short-lived fork, where a collapse (tenths of a second) would cost more than it saves.
_IMPORT_PID = os.getpid()


@dataclass(frozen=True)
class CollapseReport:
    """What one :func:`collapse_anonymous` did: mappings tried, collapsed, errno names."""

    tried: int
    collapsed: int
    refused: tuple[str, ...]


@cache
def _madvise() -> Any:
    fn = ctypes.CDLL(None, use_errno=True).madvise
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def _anonymous_spans() -> list[tuple[int, int]]:
    """2 MiB-aligned spans of this process's private, writable, anonymous mappings."""
    spans = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            perms = parts[1]
            path = parts[5] if len(parts) > 5 else ""
            if not perms.startswith("rw") or perms[3] != "p" or path not in ("", "[heap]"):
                continue
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            start, end = (lo + _HUGE - 1) & ~(_HUGE - 1), hi & ~(_HUGE - 1)
            if end > start:
                spans.append((start, end))
    return spans


def collapse_anonymous() -> CollapseReport:
    """Ask the kernel to back this process's anonymous memory with huge pages, now."""
    import errno

    madvise = _madvise()
    spans = _anonymous_spans()
    collapsed = 0
    refused = []
    for start, end in spans:
        madvise(start, end - start, _MADV_HUGEPAGE)
        if madvise(start, end - start, _MADV_COLLAPSE) == 0:
            collapsed += 1
        else:
            err = ctypes.get_errno()
            refused.append(errno.errorcode.get(err, str(err)))
    return CollapseReport(len(spans), collapsed, tuple(refused))


def _anonymous_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def enabled() -> bool:
    return os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")


def maybe_collapse() -> CollapseReport | None:
    """Collapse if :data:`ENV` asks for it and this process (the one that imported the
    harness) has not yet, or its anonymous memory grew by :data:`REGROW_BYTES` since;
    ``None`` when nothing was done."""
    if not enabled() or os.getpid() != _IMPORT_PID:
        return None
    if _last_anon and _anonymous_bytes() - _last_anon[0] < REGROW_BYTES:
        return None
    report = collapse_anonymous()
    _last_anon[:] = [_anonymous_bytes()]
    return report
