"""A calibration busy-spinner: how much CPU a process that never waits gets, here and now.

"A waiting rank uses almost no CPU" cannot be judged against a fixed CPU-per-second bound:
how much CPU a busy-waiting process gets depends on the machine's load, on the process's
niceness (the suite runs idle-wait tests at nice 19 beside other tests) and, for the
commonest busy-wait (a loop on ``sched_yield``), on what else the CPU it runs on has to
run: alone on a CPU such a loop burns all of it; beside another runnable task each
``sched_yield`` hands that task a whole time slice (EEVDF pushes the yielder's deadline
out), so the loop burns a few percent.  So a test compares, over the same window and on
the same CPU, the waiting rank with a process that does nothing but that loop: the rank
and the spinner are pinned to one CPU (:func:`pinned`, :class:`Spinner`), share whatever
else runs there, and have the same niceness (the spinner is the rank's child).  The
waiting rank's CPU divided by the spinner's is then load-independent: near 0 for a wait
in the kernel, near 1 for a ``sched_yield`` loop, above 1 for a loop that never yields.

The spinner is a fresh interpreter (``subprocess``, no fork of a rank that may hold torch
or engine threads), asks the kernel to SIGKILL it if the rank that started it dies (it
must never outlive a SIGKILLed rank), and is killed and reaped by :meth:`Spinner.stop`.
Its CPU is read from the kernel (``/proc/<pid>/schedstat``: nanoseconds on CPU; the
``stat`` clock ticks where schedstat is absent), never from the spinner itself.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from types import TracebackType
from typing import Final

__all__ = ["Spinner", "cpu_seconds", "current_cpu", "pinned"]

# A sched_yield loop, as SGLang's and vLLM's readers wait: the reference busy-wait.
# PR_SET_PDEATHSIG (1) = SIGKILL, then the parent check closes the race with its death;
# pinned to the CPU it is given (argv[2], -1: none) before it says it spins.
_CODE: Final = (
    "import ctypes, os, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    os._exit(1)\n"
    "if int(sys.argv[2]) >= 0:\n"
    "    os.sched_setaffinity(0, {int(sys.argv[2])})\n"
    "os.write(1, b'.')\n"
    "while True:\n"
    "    os.sched_yield()\n"
)
_TICKS: Final = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """CPU time ``pid`` has used (user + system), from the kernel; None once it is gone."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as fh:
            return int(fh.read().split()[0]) / 1e9
    except FileNotFoundError:
        pass
    except (OSError, ValueError, IndexError):
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS


def current_cpu() -> int:
    """The CPU this process last ran on (``stat`` field 39), from the kernel."""
    with open("/proc/self/stat", "rb") as fh:
        return int(fh.read().rsplit(b")", 1)[1].split()[36])


def _threads() -> list[int]:
    try:
        return [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        return [threading.get_native_id()]


@contextlib.contextmanager
def pinned(cpu: int) -> Iterator[None]:
    """Every thread of this process on CPU ``cpu`` only, restored after (each thread's own
    affinity; a thread started meanwhile inherits its creator's and keeps it).  Affinity is
    per thread on Linux: an engine that waits in a helper thread is pinned too."""
    before: dict[int, set[int]] = {}
    for tid in _threads():
        with contextlib.suppress(ProcessLookupError):
            before[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, {cpu})
    try:
        yield
    finally:
        for tid, cpus in before.items():
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(tid, cpus)


class Spinner:
    """A process that only loops on ``sched_yield``, running until :meth:`stop`.

    ``with Spinner(cpu) as spin:`` starts it (pinned to ``cpu``; None: anywhere) and waits
    (up to ``ready``) until it spins; :meth:`cpu` is its CPU so far.  Raises
    ``TimeoutError`` naming its pid if it never started spinning, ``RuntimeError`` with
    its exit status if it ended instead.
    """

    def __init__(self, cpu: int | None = None, ready: float = 10.0) -> None:
        where = -1 if cpu is None else cpu
        self._proc = subprocess.Popen(
            [sys.executable, "-S", "-c", _CODE, str(os.getpid()), str(where)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            close_fds=True,
        )
        self.pid = self._proc.pid
        try:
            self._await_ready(ready)
        except BaseException:
            self.stop()
            raise

    def _await_ready(self, timeout: float) -> None:
        out = self._proc.stdout
        assert out is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"calibration spinner pid {self.pid}: not spinning after {timeout:g}s"
                )
            readable, _, _ = select.select([out], [], [], left)
            if readable:
                if os.read(out.fileno(), 1) == b".":
                    return
                code = self._proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                raise RuntimeError(f"calibration spinner pid {self.pid} ended (status {code})")

    def cpu(self) -> float:
        """The spinner's CPU seconds so far (from the kernel)."""
        used = cpu_seconds(self.pid)
        if used is None:
            raise RuntimeError(f"calibration spinner pid {self.pid} is gone")
        return used

    def stop(self, timeout: float = 10.0) -> None:
        """SIGKILL and reap the spinner (idempotent)."""
        if self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(signal.SIGKILL)
            self._proc.wait(timeout=timeout)
        if self._proc.stdout is not None:
            self._proc.stdout.close()

    def __enter__(self) -> Spinner:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
