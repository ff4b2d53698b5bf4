"""Session-level proof that the whole self-test suite leaves nothing behind, and the
short private directories the self-tests put sockets in (``short_dir``, ``base_path``).

At configure time (in the xdist controller, or the only process without xdist) we
1. point ``TPBCAST_WORKDIR_ROOT`` at a private root, inherited by xdist workers and by
   subprocesses, so every workdir any test creates lands there (the root's name marks
   this process, and making it sweeps the roots of earlier, SIGKILLed sessions);
2. snapshot the processes of our session (sid).
At session finish (same process, after the workers are gone) we fail the run if
- the private root still holds anything (a workdir some group did not clean up), or
- a process of our session that this run started (it inherited the private root in its
  environment) appeared during the run and was orphaned (its parent is no longer in the
  session): a rank that outlived its runner.  An unrelated job started in the same
  terminal meanwhile is not ours: it is neither reported nor killed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator

import pytest

from tpbcast.harness.runtime import WORKDIR_ROOT_ENV, make_private_dir, release_workdirs

_ROOT_KEY = pytest.StashKey[str]()
_SNAP_KEY = pytest.StashKey[set[tuple[int, int]]]()
_OLD_ENV_KEY = pytest.StashKey[str | None]()


def _stat(pid: int) -> tuple[str, int, int, int, int] | None:
    """(state, ppid, pgrp, sid, starttime) of a process, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    return fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19])


def session_processes() -> dict[int, tuple[str, int, int, int, int]]:
    """Live processes of our session (zombies excluded), keyed by pid."""
    sid = os.getsid(0)
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None and st[3] == sid and st[0] != "Z":
                found[int(name)] = st
    return found


def _started_by_this_run(pid: int, root: str) -> bool:
    """True if ``pid`` inherited this run's workdir root: every process the run starts
    (xdist workers, ranks, their children, subprocesses) carries it in its environment,
    while an unrelated job the user started in the same terminal session does not, and
    must be neither reported nor killed."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read().split(b"\0")
    except OSError:
        return False
    return f"{WORKDIR_ROOT_ENV}={root}".encode() in environ


def find_orphans(before: set[tuple[int, int]], root: str) -> list[str]:
    procs = session_processes()
    orphans = []
    for pid, (state, ppid, pgrp, _sid, start) in procs.items():
        if (pid, start) in before or pid == os.getpid():
            continue
        if ppid not in procs and _started_by_this_run(pid, root):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                cmd = "?"
            orphans.append(f"pid {pid} (ppid {ppid}, pgrp {pgrp}, state {state}): {cmd}")
    return orphans


@pytest.fixture
def short_dir() -> Iterator[str]:
    """A private 0700 directory directly under /tmp, removed after the test.

    Socket paths in it stay far below the 107-byte ``sun_path`` limit, which pytest's
    ``tmp_path`` does not promise.  Not the plugin's ``tpbcast_path_factory``: its
    directories sit inside a 0700 session directory, and the tests that reach a socket
    as another uid (setuid nobody) open ``short_dir`` itself to that uid (chmod 0711 or
    0777), which a 0700 parent would defeat.
    """
    path = tempfile.mkdtemp(prefix="tpt-", dir="/tmp")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def base_path(short_dir: str) -> str:
    """A broadcaster base path in ``short_dir`` (rank 0's socket: ``<short_dir>/g_0.sock``)."""
    return os.path.join(short_dir, "g")


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    if _is_worker(config):
        return
    root = make_private_dir("/tmp", "tpbs-")
    config.stash[_ROOT_KEY] = root
    config.stash[_OLD_ENV_KEY] = os.environ.get(WORKDIR_ROOT_ENV)
    os.environ[WORKDIR_ROOT_ENV] = root
    config.stash[_SNAP_KEY] = {(pid, st[4]) for pid, st in session_processes().items()}


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    release_workdirs()
    if _is_worker(config) or _ROOT_KEY not in config.stash:
        return
    root = config.stash[_ROOT_KEY]
    problems: list[str] = []
    # Workers release their pooled workdirs at exit; give them a bounded moment.
    deadline = time.monotonic() + 15.0
    leftovers = sorted(os.listdir(root))
    orphans = find_orphans(config.stash[_SNAP_KEY], root)
    while (leftovers or orphans) and time.monotonic() < deadline:
        time.sleep(0.05)  # polling with a deadline: other processes must finish exiting
        leftovers = sorted(os.listdir(root))
        orphans = find_orphans(config.stash[_SNAP_KEY], root)
    if leftovers:
        problems.append(f"leftover workdirs under {root}: {', '.join(leftovers)}")
    if orphans:
        problems.append("orphaned processes:\n  " + "\n  ".join(orphans))
        for line in orphans:
            pid = int(line.split()[1])
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
    shutil.rmtree(root, ignore_errors=True)
    old = config.stash[_OLD_ENV_KEY]
    if old is None:
        os.environ.pop(WORKDIR_ROOT_ENV, None)
    else:
        os.environ[WORKDIR_ROOT_ENV] = old
    if problems:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        text = "tpbcast harness hygiene check FAILED:\n" + "\n".join(problems)
        if reporter is not None:
            reporter.write_line(text, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    else:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("tpbcast harness hygiene check: 0 orphans, 0 leftover workdirs")
