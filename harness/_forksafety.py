"""The torch fork hazard: detect it in the parent, neutralise it in the ranks.

A process that ran a parallel torch op has an OpenMP worker pool. ``fork`` copies only the
calling thread, so the child inherits a pool that believes its workers exist; the child's
first parallel torch op waits for them forever (measured, reproducible with
``torch.ones(1 << 22).add_(1)`` before fork: tests/harness/test_forksafety.py's control
shows the hang). ``torch.set_num_threads(1)`` in the
child makes torch run its ops inline, never touching the dead pool.

Policy (environment variable ``TPBCAST_TORCH_THREADS``):

- unset or ``1`` (default): every rank with torch imported calls ``torch.set_num_threads(1)``
  first thing, so forking is safe even after the parent ran torch ops.
- ``keep``: ranks keep the inherited setting; then a parent whose OpenMP pool exists is
  refused with :class:`ForkSafetyError`. The pool is recognised precisely: native threads
  blocked inside an OpenMP runtime (``/proc/self/task/<tid>/syscall`` gives the
  instruction pointer, ``/proc/self/maps`` the library) or spinning on a CPU right after
  a parallel region. numpy's OpenBLAS threads (idle in libc) do not count.

Python threads (pytest-xdist's execnet threads, for instance) are not a hazard for our
ranks: the child never touches their locks, and they are recognised through
``sys._current_frames()``.
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass

__all__ = ["ForkSafetyError", "NativeThread", "check_fork_safety", "native_threads"]

_ENV = "TPBCAST_TORCH_THREADS"


class ForkSafetyError(RuntimeError):
    """Forking now would hand the ranks a dead OpenMP pool; the message says how to fix it."""


@dataclass(frozen=True)
class NativeThread:
    """A thread of this process without a Python frame.

    ``where`` is the library the thread is blocked in (from its syscall instruction
    pointer: ``libgomp.so.1`` for an idle OpenMP worker, ``libc.so.6`` for most others),
    ``"running"`` when it is on a CPU (an OpenMP worker spins for a while after a parallel
    region), or ``"?"`` when the kernel does not tell.
    """

    tid: int
    name: str
    where: str

    @property
    def looks_like_openmp(self) -> bool:
        lib = self.where.lower()
        return "omp" in lib or lib == "running"


def _mapped_libraries() -> list[tuple[int, int, str]]:
    spans = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and "x" in parts[1]:
                lo, hi = parts[0].split("-")
                spans.append((int(lo, 16), int(hi, 16), os.path.basename(parts[5])))
    return spans


def _where(tid: int, spans: list[tuple[int, int, str]]) -> str:
    try:
        with open(f"/proc/self/task/{tid}/syscall") as f:
            fields = f.read().split()
    except OSError:
        return "?"
    if not fields or fields[0] == "running":
        return "running" if fields else "?"
    if len(fields) < 9:
        return "?"
    ip = int(fields[-1], 16)
    for lo, hi, name in spans:
        if lo <= ip < hi:
            return name
    return "?"


def native_threads() -> tuple[NativeThread, ...]:
    """Threads of this process that do not run Python code, with where they are.

    Python threads are excluded by their native ids (``threading``); threads started with
    ``_thread`` (execnet, in xdist workers) have no native id there, so the number of
    Python thread states (``sys._current_frames()``) caps how many tids count as native.
    """
    import threading

    tids = sorted(int(t) for t in os.listdir("/proc/self/task"))
    extra = len(tids) - len(sys._current_frames())
    if extra <= 0:
        return ()
    known = {t.native_id for t in threading.enumerate()}
    candidates = [t for t in tids if t not in known and t != os.getpid()]
    spans = _mapped_libraries()
    found = []
    for tid in candidates:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        found.append(NativeThread(tid, name, _where(tid, spans)))
    # Unknown _thread threads look native here; prefer reporting OpenMP-looking ones.
    found.sort(key=lambda t: not t.looks_like_openmp)
    return tuple(found[:extra])


def torch_policy() -> str:
    """``"single"`` (force 1 thread in ranks) or ``"keep"``."""
    value = os.environ.get(_ENV, "1").strip().lower()
    return "keep" if value == "keep" else "single"


def check_fork_safety() -> None:
    """Raise :class:`ForkSafetyError` if ranks would inherit a dead torch thread pool.

    Only when torch is imported and the policy is ``keep``; the default policy makes the
    ranks safe, so the check costs nothing then.
    """
    if "torch" not in sys.modules or torch_policy() != "keep":
        return
    pool = [t for t in native_threads() if t.looks_like_openmp]
    if not pool:
        return  # e.g. numpy's OpenBLAS threads, idle in libc: not torch's pool
    names = ", ".join(f"tid {t.tid} ({t.name}, in {t.where})" for t in pool)
    raise ForkSafetyError(
        f"refusing to fork ranks: torch is imported and this process has {len(pool)} "
        f"OpenMP worker thread(s) ({names}): a parallel torch op already ran here.\n"
        "Why: fork copies only the calling thread; a rank's first parallel torch op would "
        "wait forever for pool workers that do not exist in the child.\n"
        "Fix one of:\n"
        "  - do not run torch ops in the process that forks ranks (build tensors inside "
        "the target, which runs in the rank);\n"
        "  - call torch.set_num_threads(1) before the first torch op in this process;\n"
        f"  - unset {_ENV} (default: ranks call torch.set_num_threads(1) and are safe)."
    )


def ranks_need_single_torch() -> bool:
    """Decided in the parent, once per group: torch imported and the policy is single."""
    return "torch" in sys.modules and torch_policy() != "keep"


def make_rank_torch_safe() -> None:
    """In a fresh rank (only when :func:`ranks_need_single_torch` said so in the parent):
    run torch single-threaded, never touching the inherited OpenMP pool."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    with contextlib.suppress(Exception):  # a half-imported torch must not kill the rank
        torch.set_num_threads(1)
