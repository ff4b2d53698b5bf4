"""Observing processes from outside, for suites built on the harness.

The clause tests' one vocabulary for what the kernel says about a process: a published
pid and its death, descendants and their start times, fd tables, the names a process
holds (open, mapped, bound) and those under ``/dev/shm``, a listening Unix socket, thread
states, signal masks, and a private TMPDIR.  What each reads, and why ``/proc`` where
psutil does not serve, is in the private module's docstring.  A test author who only runs
ranks needs none of it.
"""

from __future__ import annotations

from ._held import (
    Held,
    held,
    loose,
    modes_in,
    named_now,
    new_held,
    shm_names,
    still_named,
    still_there,
)
from ._observe import (
    PID_FILE_PREFIX,
    SHM_DIR,
    Proc,
    alive,
    all_stopped,
    dead,
    descendants,
    describe,
    fd_cloexec,
    fd_targets,
    kill,
    load_observation,
    pid_path,
    private_tmpdir,
    publish_pid,
    published_pid,
    save_observation,
    signal_masks,
    thread_count,
    thread_wait,
    unix_listening,
    wait_dead,
    wait_gone,
    wait_until,
)

__all__ = [
    "PID_FILE_PREFIX",
    "SHM_DIR",
    "Held",
    "Proc",
    "alive",
    "all_stopped",
    "dead",
    "descendants",
    "describe",
    "fd_cloexec",
    "fd_targets",
    "held",
    "kill",
    "load_observation",
    "loose",
    "modes_in",
    "named_now",
    "new_held",
    "pid_path",
    "private_tmpdir",
    "publish_pid",
    "published_pid",
    "save_observation",
    "shm_names",
    "signal_masks",
    "still_named",
    "still_there",
    "thread_count",
    "thread_wait",
    "unix_listening",
    "wait_dead",
    "wait_gone",
    "wait_until",
]
