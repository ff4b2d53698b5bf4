"""Private workdirs: short, 0700, reused only when clean, never shared across a fork."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile

import pytest

from tpbcast.harness._workdir import Workdir
from tpbcast.harness.runtime import WORKDIR_ROOT_ENV, release_workdirs


def test_own_workdir_is_short_private_and_pooled_when_clean():
    release_workdirs()
    wd = Workdir.open(None)
    for d in (wd.path, wd.capture):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
        assert os.path.basename(d).startswith("tpb-")
    assert len(f"{wd.path}/g_0.sock") < 107
    assert wd.path != wd.capture
    assert os.listdir(wd.path) == []
    with open(wd.file(0, "out"), "w"):
        pass
    assert wd.leftovers() == ()  # capture files never count
    wd.remove(clean=True)
    again = Workdir.open(None)
    assert (again.path, again.capture) == (wd.path, wd.capture)  # reused
    assert os.listdir(again.capture) == []  # and emptied
    again.remove(clean=False)
    assert not os.path.exists(wd.path)
    assert release_workdirs() == 1  # the capture dir was pooled
    assert not os.path.exists(wd.capture)


def test_unclean_workdir_is_removed_not_reused():
    wd = Workdir.open(None)
    with open(f"{wd.path}/g_0.sock", "w"):
        pass
    assert wd.leftovers() == ("g_0.sock",)
    wd.remove(clean=False)
    assert not os.path.exists(wd.path)
    release_workdirs()


def test_pooled_dirs_of_another_pid_are_not_reused(monkeypatch):
    from tpbcast.harness import _workdir

    wd = Workdir.open(None)
    wd.remove(clean=True)
    stolen = {k: [(os.getpid() + 1, p) for _, p in v] for k, v in _workdir._POOLS.items()}
    monkeypatch.setattr(_workdir, "_POOLS", stolen)
    fresh = Workdir.open(None)
    try:
        assert fresh.path != wd.path and fresh.capture != wd.capture
    finally:
        fresh.remove(clean=False)
        release_workdirs()
        os.rmdir(wd.path)
        os.rmdir(wd.capture)


def test_root_comes_from_the_environment(monkeypatch):
    # A private parent (not a name derived from the test's: two runs at once would share it).
    parent = tempfile.mkdtemp(prefix="tpbw-", dir="/tmp")
    root = f"{parent}/r"  # not created: the harness makes it
    monkeypatch.setenv(WORKDIR_ROOT_ENV, root)
    wd = Workdir.open(None)
    try:
        assert os.path.dirname(wd.path) == root
        assert os.path.dirname(wd.capture) == root
    finally:
        wd.remove(clean=False)
        release_workdirs()
        shutil.rmtree(parent)


def test_too_long_workdir_is_refused(tmp_path):
    with pytest.raises(ValueError, match="too long for Unix sockets"):
        Workdir.open(str(tmp_path / ("d" * 100)))


def test_a_forked_child_never_pools():
    """pytest-forked runs each test in a fork that ends in os._exit: nothing may leak."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            wd = Workdir.open(None)
            wd.remove(clean=True)
            gone = not os.path.exists(wd.path) and not os.path.exists(wd.capture)
            os.write(w, b"1" if gone else b"0")
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    answer = os.read(r, 1)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert answer == b"1", "a forked child pooled its workdir (it would leak at os._exit)"
