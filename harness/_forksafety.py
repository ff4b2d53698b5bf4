"""The torch fork hazard: detect it in the parent, neutralise it in the ranks.

A process that ran a parallel torch op has an OpenMP worker pool. ``fork`` copies only the
calling thread, so the child inherits a pool that believes its workers exist; the child's
first parallel torch op waits for them forever (baseline_perf.md §7: measured, reproducible
with ``torch.ones(1 << 22).add_(1)`` before fork). ``torch.set_num_threads(1)`` in the
child makes torch run its ops inline, never touching the dead pool.

Policy (environment variable ``TPBCAST_TORCH_THREADS``):

- unset or ``1`` (default): every rank with torch imported calls ``torch.set_num_threads(1)``
  first thing, so forking is safe even after the parent ran torch ops.
- ``keep``: ranks keep the inherited setting; then a parent with native threads that
  Python does not know about (the OpenMP pool) is refused with :class:`ForkSafetyError`.

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
    """A thread of this process without a Python frame (``tid`` and kernel ``comm`` name)."""

    tid: int
    name: str


def native_threads() -> tuple[NativeThread, ...]:
    """Threads of this process beyond the ones that run Python code.

    ``/proc/self/task`` lists every thread; Python threads are those in
    ``sys._current_frames()`` (which, unlike ``threading.enumerate()``, includes threads
    started with ``_thread``, as execnet does). The count difference is the number of native
    threads; which tids they are cannot be told apart cheaply, so they are all named and the
    Python ones (by ``threading`` native ids) removed where known.
    """
    import threading

    tids = sorted(int(t) for t in os.listdir("/proc/self/task"))
    extra = len(tids) - len(sys._current_frames())
    if extra <= 0:
        return ()
    known = {t.native_id for t in threading.enumerate()}
    candidates = [t for t in tids if t not in known and t != os.getpid()]
    found = []
    for tid in candidates[-extra:] if extra < len(candidates) else candidates:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        found.append(NativeThread(tid, name))
    return tuple(found)


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
    threads = native_threads()
    # torch starts one native helper thread at import time (measured with torch 2.13);
    # a parallel op adds the OpenMP workers.
    if len(threads) <= 1:
        return
    names = ", ".join(f"{t.name}[{t.tid}]" for t in threads)
    raise ForkSafetyError(
        f"refusing to fork ranks: torch is imported and this process runs {len(threads)} "
        f"native threads ({names}), the sign of a started OpenMP pool.\n"
        "Why: fork copies only the calling thread; a rank's first parallel torch op would "
        "wait forever for pool workers that do not exist in the child.\n"
        "Fix one of:\n"
        "  - do not run torch ops in the process that forks ranks (build tensors inside "
        "the target, which runs in the rank);\n"
        "  - call torch.set_num_threads(1) before the first torch op in this process;\n"
        f"  - unset {_ENV} (default: ranks call torch.set_num_threads(1) and are safe)."
    )


def make_rank_torch_safe() -> None:
    """In a fresh rank: force single-threaded torch unless the policy says keep."""
    torch = sys.modules.get("torch")
    if torch is None or torch_policy() == "keep":
        return
    with contextlib.suppress(Exception):  # a half-imported torch must not kill the rank
        torch.set_num_threads(1)
