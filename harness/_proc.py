"""Low-level process helpers shared by the runner, the rank bootstrap and the faults.

Kept apart so each caller stays readable: ``prctl`` through ctypes (Python has no binding),
coverage saving before ``os._exit`` (coverage only saves from atexit, which ``os._exit``
skips), "is anything of ours still alive" probes that cost one syscall each, the guard
that keeps Python signal handlers from raising between a fork and the bookkeeping of the
child's pid, and the mask that holds signals sent to a fresh rank until its own handlers
exist.  Reading a process's state from outside is :mod:`._observe`'s job.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # CPython's C module behind signal
import contextlib
import ctypes
import errno
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable
from functools import cache
from types import FrameType, TracebackType
from typing import Any

from ._hugepages import maybe_collapse

__all__ = [
    "PR_SET_PDEATHSIG_KILL",
    "DeferredSignals",
    "block_asynchronous_signals",
    "devnull_fd",
    "fork_child",
    "group_alive",
    "killpg_quiet",
    "restore_signal_mask",
    "save_coverage",
    "set_pdeathsig",
]

_PR_SET_PDEATHSIG = 1
PR_SET_PDEATHSIG_KILL = int(signal.SIGKILL)


@cache
def _prctl() -> Any:
    """libc's ``prctl``, looked up once (in the parent, before fork), called bare: no
    ``argtypes``, no ``use_errno``.  In a fresh rank, where every page written is a
    copy-on-write fault, ctypes' argument converters and its errno swap made the call cost
    ~85 us and ~10 faults more than a plain syscall (measured in a forked child of a
    torch-holding parent); bare it costs what ``os.getppid()`` does.  The arguments are
    small non-negative ints, passed as C ints that libffi widens to the registers' 64 bits
    (prctl reads unsigned longs).  A failure asks for errno through :func:`_prctl_errno`."""
    return ctypes.CDLL(None).prctl


def _prctl_errno(*args: int) -> int:
    """Repeat a failed ``prctl`` through an errno-keeping handle; returns its errno, 0 if
    the repeat succeeded (the bad path only: it normally fails the same way again)."""
    fn = ctypes.CDLL(None, use_errno=True).prctl
    return 0 if fn(*args) == 0 else ctypes.get_errno()


@cache
def devnull_fd() -> int:
    """One read-only ``/dev/null`` fd (CLOEXEC) for the ranks' stdin, opened once."""
    return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)


def preload() -> None:
    """Do in the parent, once, what every rank would otherwise repeat after fork; with
    ``TPBCAST_HUGEPAGES=1``, also make the fork itself cheaper (see ``_hugepages``)."""
    _prctl()
    devnull_fd()
    _asynchronous_signals()
    maybe_collapse()


# Signals raised by the faulting code itself: blocking them defers nothing (the kernel
# kills a process that faults with them blocked), and SIGKILL/SIGSTOP cannot be blocked.
_SYNCHRONOUS = frozenset(
    int(s)
    for s in (
        signal.SIGSEGV,
        signal.SIGBUS,
        signal.SIGFPE,
        signal.SIGILL,
        signal.SIGTRAP,
        signal.SIGSYS,
        signal.SIGABRT,
        signal.SIGKILL,
        signal.SIGSTOP,
    )
)


@cache
def _asynchronous_signals() -> frozenset[int]:
    return frozenset(int(s) for s in signal.valid_signals()) - _SYNCHRONOUS


def fork_child(child: Callable[[], object], *, exit_code: int) -> int:
    """``os.fork()``; the child runs ``child()`` and never returns from here.

    The caller holds every asynchronous signal blocked in its thread
    (:func:`block_asynchronous_signals`) from before the first fork until it has recorded
    the pid. So no Python handler raises between the fork and that record in the parent,
    and the child is born with the signals blocked: one sent to it microseconds after fork
    (the runner's SIGUSR1 "dump your stack", a SIGTERM, a test's SIGINT) stays pending
    until the rank has installed its handlers and restores the parent's mask itself; it is
    not acted on by a disposition the rank is about to replace (SIGUSR1's default kills).

    Blocked once around a loop of forks, not here per fork: each page the parent writes
    while a child shares it is a copy-on-write fault (~3.7 us on a 2-core VM), and a block
    and restore per fork touched ~50 of them per fork (measured: 0.28 ms CPU per 2-rank
    group).

    Whatever happens in the child -- ``child`` returning, or an exception raised right
    after the fork -- ends in ``os._exit(exit_code)``: a forked rank must never unwind
    into the caller's code (pytest would go on running tests in two processes). An
    exception in the parent after the fork (a handler that runs despite the mask: one a
    tracer or another thread raised) kills and reaps the child before it propagates,
    since the caller will never learn its pid.
    """
    parent, pid = os.getpid(), -1
    try:
        if _FORK_WARNS:  # pragma: no cover - 3.11 in CI
            with warnings.catch_warnings():
                # 3.12 warns about fork in a threaded process; the ranks never touch the
                # other threads' state (see _forksafety for the one hazard that matters).
                warnings.filterwarnings("ignore", category=DeprecationWarning)
                pid = os.fork()
        else:
            pid = os.fork()
        if pid == 0:  # pragma: no cover - the child side is measured by the rank's coverage
            child()
            os._exit(exit_code)  # pragma: no cover - child() returned (it must not)
    except BaseException:
        if os.getpid() != parent:  # pragma: no cover - in the child (see above)
            os._exit(exit_code)
        if pid > 0:  # forked, but the caller will never learn the pid: take it back now
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        raise
    return pid


_FORK_WARNS = sys.version_info >= (3, 12)


def block_asynchronous_signals() -> set[int]:
    """Block every asynchronous signal in this thread; returns the old mask for
    :func:`restore_signal_mask`.  ``_signal``, not ``signal``: the public wrapper turns
    masks into sets of Signals enum members, touching pages (copy-on-write faults once a
    rank shares them)."""
    old: set[int] = _signal.pthread_sigmask(_signal.SIG_BLOCK, _asynchronous_signals())
    return old


def restore_signal_mask(old: set[int]) -> None:
    """Put back a mask from :func:`block_asynchronous_signals`; the Python handlers of the
    signals held meanwhile run now (and may raise)."""
    _signal.pthread_sigmask(_signal.SIG_SETMASK, old)


def set_pdeathsig(sig: int) -> None:
    """Ask the kernel to send ``sig`` to us when our parent thread dies.

    Caveat (documented in prctl(2)): "parent" is the *thread* that forked us; run_ranks
    must be called from a thread that outlives the group (the main thread, in practice).
    """
    if _prctl()(_PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0:
        err = _prctl_errno(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if err:  # (a retry that succeeded has set it after all)
            raise OSError(
                err, f"prctl(PR_SET_PDEATHSIG, {sig}) failed: {errno.errorcode.get(err, err)}"
            )


def save_coverage() -> None:
    """Stop and save coverage data if coverage is measuring this (forked) process.

    Coverage notices the fork by the pid change and writes a separate data file when
    ``parallel`` is on; ``coverage combine`` merges it. Never raises: losing coverage must
    not turn a passing rank into a failing one.
    """
    if "coverage" not in sys.modules:
        return
    try:
        import coverage

        cov = coverage.Coverage.current()
        if cov is not None:
            cov.stop()
            cov.save()
    except Exception:  # noqa: S110 - best effort by design
        pass


def group_alive(pgid: int) -> bool:
    """Whether any process (zombies included) is still in process group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else (pid reuse); treat as alive
    return True


def killpg_quiet(pgid: int, sig: int) -> None:
    """``killpg`` that ignores a group that is already gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


# Signals whose Python handlers raise into the main thread in practice: Ctrl-C
# (KeyboardInterrupt), pytest-timeout's SIGALRM method (pytest.fail), a SIGTERM handler.
_DEFERRABLE = (signal.SIGINT, signal.SIGALRM, signal.SIGTERM)
_DEFERRABLE_INTS = tuple(int(sig) for sig in _DEFERRABLE)
_Handler = Callable[[int, FrameType | None], Any]


class DeferredSignals:
    """Hold back Python signal handlers for a critical section, then run them.

    A handler that raises (``KeyboardInterrupt``) right after ``os.fork()`` returned, but
    before the pid was recorded, would leave a rank nobody kills or reaps: it keeps running
    until pytest itself exits (PDEATHSIG fires only then). Inside the ``with`` block the
    handlers of :data:`_DEFERRABLE` only note the signal; on exit the originals are put
    back and each noted signal is handed to its handler, which may raise then, when every
    rank is known. Only the main thread runs Python handlers, so elsewhere this is a no-op.

    Forked children inherit the deferring handler: it forwards at once in any process but
    the owner, and ranks reinstall :attr:`originals` first thing.
    """

    def __init__(self) -> None:
        self._owner = os.getpid()
        self.originals: tuple[tuple[int, _Handler], ...] = ()
        self._pending: list[tuple[int, FrameType | None]] = []

    def __enter__(self) -> DeferredSignals:
        if threading.current_thread() is not threading.main_thread():
            return self
        saved = []
        # _signal, not signal (here and in __exit__): the cleanup section runs after the
        # ranks were forked, where every page the enum conversions touch is a
        # copy-on-write fault.
        for sig in _DEFERRABLE_INTS:
            handler = _signal.getsignal(sig)
            if callable(handler):
                saved.append((sig, handler))
                _signal.signal(sig, self._defer)
        self.originals = tuple(saved)
        return self

    def _defer(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self._owner:  # a child forked inside the section
            dict(self.originals)[signum](signum, frame)
            return
        self._pending.append((signum, frame))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        handlers = dict(self.originals)
        for sig, handler in self.originals:
            _signal.signal(sig, handler)
        self.originals = ()
        pending, self._pending = self._pending, []
        for signum, frame in pending:
            handlers[signum](signum, frame)  # may raise: the section is complete now
