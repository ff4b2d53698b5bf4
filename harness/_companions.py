"""The rank's companion processes: helpers that run the implementation's code for it.

An ``exec:`` implementation's blocking syscalls run in its driver process, not in the rank,
so a process fault aimed at the rank must reach the driver too to test what it is meant to
test (DESIGN.md, "Adapter contract": ``exec:``). The adapter registers each driver here once
it has said hello, with the signals it declared it can take (a no-op handler without
SA_RESTART), and unregisters it before reaping it; :class:`~._faults.SignalStorm` signals
the registered companions through :func:`send`.

Registrations belong to the process that made them: a child forked from the rank inherits
the table but sees none of it (the drivers are not its children, and signalling them from
a copy would double the storm). The lock is held while a signal is sent and while a
companion is unregistered, so a pid is never signalled after its process was reaped (when
the kernel may have given the pid to someone else). It is re-entrant because the adapter
unregisters from a finalizer, which the garbage collector may run inside :func:`send`; a
fork gets a fresh one (the storm thread may hold it at the moment of the fork).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

__all__ = ["Companion", "Delivery", "current", "register", "send", "unregister"]


@dataclass(frozen=True)
class Companion:
    """One companion process: its pid and the signals it declared it takes."""

    pid: int
    storm_signals: frozenset[int]


@dataclass(frozen=True)
class Delivery:
    """What one :func:`send` did: the pids signalled, the ones skipped, the ones gone."""

    sent: tuple[int, ...]
    not_declared: tuple[int, ...]
    failed: tuple[tuple[int, str], ...]
    """``(pid, exception name)`` for a ``kill`` that failed (the process is gone)."""


_lock = threading.RLock()
_table: dict[int, tuple[int, Companion]] = {}  # pid -> (owner pid, companion)


def _fresh_lock() -> None:  # pragma: no cover - runs in forked children
    global _lock  # noqa: PLW0603 - the one module-level lock, replaced after a fork
    _lock = threading.RLock()


os.register_at_fork(after_in_child=_fresh_lock)


def register(pid: int, storm_signals: frozenset[int]) -> None:
    """Record ``pid`` as a companion of this process that takes ``storm_signals``."""
    with _lock:
        _table[pid] = (os.getpid(), Companion(pid, frozenset(storm_signals)))


def unregister(pid: int) -> None:
    """Forget ``pid``; call it before reaping the process. Unknown pids are ignored."""
    with _lock:
        entry = _table.get(pid)
        if entry is not None and entry[0] == os.getpid():
            del _table[pid]


def current() -> tuple[Companion, ...]:
    """The companions this process registered (none in a forked child), by pid."""
    me = os.getpid()
    with _lock:
        return tuple(
            c for owner, c in sorted(_table.values(), key=lambda e: e[1].pid) if owner == me
        )


def send(signum: int) -> Delivery:
    """``kill(pid, signum)`` for every companion that declared ``signum``; the others are
    skipped (an undeclared signal would most likely kill them: that is a Kill, not a storm)."""
    me = os.getpid()
    sent: list[int] = []
    skipped: list[int] = []
    failed: list[tuple[int, str]] = []
    with _lock:
        for entry in sorted(_table.values(), key=lambda e: e[1].pid):
            owner, companion = entry
            if owner != me:
                continue
            if _table.get(companion.pid) is not entry:
                continue  # unregistered by a finalizer the collector ran in this loop
            if signum not in companion.storm_signals:
                skipped.append(companion.pid)
                continue
            try:
                os.kill(companion.pid, signum)
            except OSError as exc:
                failed.append((companion.pid, type(exc).__name__))
            else:
                sent.append(companion.pid)
    return Delivery(tuple(sent), tuple(skipped), tuple(failed))
