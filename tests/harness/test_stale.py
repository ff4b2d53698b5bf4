"""Private dirs name their owner; a new session sweeps those of dead owners, never a live one."""

from __future__ import annotations

import os
import select
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator

import pytest

from tpbcast.harness import run_ranks
from tpbcast.harness._observe import stat_fields
from tpbcast.harness._stale import _base36, _scope, owner_alive, owner_mark
from tpbcast.harness.runtime import make_private_dir, sweep_stale_dirs

pytestmark = pytest.mark.skipif(owner_mark() is None, reason="needs /proc (Linux)")


@pytest.fixture
def root() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="tps-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _my_start() -> str:
    with open("/proc/self/stat", "rb") as f:
        raw = f.read()
    return _base36(int(raw[raw.rfind(b")") + 2 :].split()[19]))


def _read_line(fd: int, timeout: float = 60.0) -> str:
    data = b""
    while not data.endswith(b"\n"):
        assert select.select([fd], [], [], timeout)[0], "the child did not answer in time"
        chunk = os.read(fd, 4096)
        assert chunk, "the child closed its pipe without answering"
        data += chunk
    return data.decode().strip()


def _child_makes_dir(root: str, hold: tuple[int, int] | None) -> tuple[int, str, int]:
    """Fork a child that makes its own private dir under ``root`` and reports the path;
    with ``hold`` (a pipe) it then stays alive until the parent closes the write end."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            os.write(w, (make_private_dir(root, "tpb-") + "\n").encode())
            if hold is not None:
                os.close(hold[1])
                os.read(hold[0], 1)  # EOF once the parent closes its write end
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    return pid, _read_line(r), r


def test_a_private_dir_names_its_live_owner(root):
    path = make_private_dir(root, "tpb-")
    name = os.path.basename(path)
    pid, start, scope = name[len("tpb-") :].split("-")[0].split(".")
    assert (int(pid), start, scope) == (os.getpid(), _my_start(), _scope())
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    assert len(name) <= 35  # leaves the sun_path budget of DESIGN.md intact
    assert owner_alive(os.getpid(), start)
    assert sweep_stale_dirs(root, "tpb-") == ()  # ours: never swept


def test_a_dead_owners_dir_is_swept_and_a_live_owners_kept(root, reap_child):
    # Ours first: this process has then swept ``root``, and the children inherit that (or
    # the second one would sweep the first one's directory itself, as a new session does).
    mine = make_private_dir(root, "tpb-")
    hold_r, hold_w = os.pipe()
    try:
        dead_pid, dead_dir, r1 = _child_makes_dir(root, hold=None)
        live_pid, live_dir, r2 = _child_makes_dir(root, hold=(hold_r, hold_w))
        for fd in (r1, r2):
            os.close(fd)
        status = reap_child(dead_pid, 60)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        # 1. The owner really is gone (reaped: no /proc entry), the other one really lives.
        assert not os.path.exists(f"/proc/{dead_pid}") and os.path.isdir(dead_dir)
        assert os.path.exists(f"/proc/{live_pid}")
        # 2. The sweep takes exactly the dead owner's directory.
        assert sweep_stale_dirs(root, "tpb-") == (dead_dir,)
        assert not os.path.exists(dead_dir) and os.path.isdir(live_dir) and os.path.isdir(mine)
    finally:
        os.close(hold_w)  # the live child may end now
        os.close(hold_r)
    status = reap_child(live_pid, 60)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert sweep_stale_dirs(root, "tpb-") == (live_dir,)  # dead now: its turn


def test_a_reused_pid_does_not_keep_a_dir_alive(root):
    """Our pid with another start time is an earlier process that had our number."""
    me, scope = os.getpid(), _scope()
    reused = f"{root}/tpb-{me}.{_base36(12345)}.{scope}-aaaaaaaa"
    mine = f"{root}/tpb-{me}.{_my_start()}.{scope}-bbbbbbbb"
    for path in (reused, mine):
        os.mkdir(path, 0o700)
    assert sweep_stale_dirs(root, "tpb-") == (reused,)
    assert os.path.isdir(mine)


def test_what_the_sweep_never_touches(root):
    gone = 2**22 + 1  # above the kernel's pid_max ceiling: never a live pid
    scope = _scope()
    other_scope = "0000" if scope != "0000" else "0001"
    kept = {
        "other pid namespace or boot": f"tpb-{gone}.1.{other_scope}-aaaaaaaa",
        "old unmarked name": "tpb-k3j9x1a2",
        "other prefix": f"tpbs-{gone}.1.{scope}-aaaaaaaa",
    }
    for name in kept.values():
        os.mkdir(f"{root}/{name}", 0o700)
    target = tempfile.mkdtemp(prefix="tps-target-", dir="/tmp")
    try:
        os.symlink(target, f"{root}/tpb-{gone}.1.{scope}-symlinkd")  # not followed, not removed
        with open(f"{root}/tpb-{gone}.1.{scope}-regularf", "w"):
            pass
        swept = f"{root}/tpb-{gone}.1.{scope}-swepttt_"
        os.mkdir(swept, 0o700)
        os.mkdir(f"{swept}/inside", 0o700)
        assert sweep_stale_dirs(root, "tpb-") == (swept,)
        assert os.path.isdir(target)
        assert sorted(os.listdir(root)) == sorted(
            [*kept.values(), f"tpb-{gone}.1.{scope}-symlinkd", f"tpb-{gone}.1.{scope}-regularf"]
        )
    finally:
        shutil.rmtree(target, ignore_errors=True)
    assert sweep_stale_dirs(f"{root}/missing", "tpb-") == ()  # an absent root: nothing


KILLED_SESSION = textwrap.dedent(
    """
    import os, sys
    from tpbcast.harness import run_ranks

    def target(ctx, fd):
        os.write(fd, b"x")  # this rank runs: the group's directories exist
        ctx.wait("never")   # until the session is SIGKILLed

    run_ranks(target, 2, timeout=300, args=(int(sys.argv[1]),))
    """
)
NEXT_SESSION = textwrap.dedent(
    """
    from tpbcast.harness import run_ranks

    def target(ctx):
        return ctx.rank

    assert run_ranks(target, 2, timeout=120).ok
    """
)


def test_a_sigkilled_sessions_dirs_are_swept_by_the_next_session(root):
    env = dict(os.environ, TPBCAST_WORKDIR_ROOT=root)
    live = make_private_dir(root, "tpb-")  # a live owner's (ours): must survive it all
    r, w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", KILLED_SESSION, str(w)], env=env, pass_fds=(w,))
    os.close(w)
    try:
        got = b""
        while len(got) < 2:
            assert select.select([r], [], [], 60)[0], "the ranks did not start within 60 s"
            chunk = os.read(r, 2)
            assert chunk, "the session died before its ranks started"
            got += chunk
    finally:
        proc.kill()  # SIGKILL: no finally clause, no atexit, nothing of ours runs
        proc.wait(timeout=60)
        os.close(r)
    # 1. The killed session left its directories behind (work dir and capture dir).
    left = sorted(n for n in os.listdir(root) if n.startswith(f"tpb-{proc.pid}."))
    assert len(left) >= 2, os.listdir(root)
    # 2. The next session sweeps them at its start; the live owner's directory stays.
    subprocess.run([sys.executable, "-c", NEXT_SESSION], env=env, check=True, timeout=180)
    assert os.listdir(root) == [os.path.basename(live)]


def _renamed_rank_fields(ctx: object) -> tuple[list[bytes] | None, int, int]:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(15, b"a) b (c) d", 0, 0, 0)  # PR_SET_NAME
    with open("/proc/self/comm", "rb") as f:
        assert f.read().startswith(b"a) b (c)"), "the rank's command name was not changed"
    return stat_fields(os.getpid()), os.getppid(), os.getpgrp()


def test_stat_fields_read_past_a_command_name_holding_parentheses_and_spaces():
    fields, ppid, pgrp = run_ranks({0: _renamed_rank_fields}, timeout=60).values()[0]
    assert fields is not None
    assert (fields[0], int(fields[1]), int(fields[2])) == (b"R", ppid, pgrp)


def test_stat_fields_of_a_pid_that_is_gone_is_none(reap_child):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    reap_child(pid, 30.0)
    assert stat_fields(pid) is None
