"""Private workdirs: short, 0700, reused only when clean, never shared across a fork."""

from __future__ import annotations

import os
import stat

import pytest

from tpbcast.harness import WORKDIR_ROOT_ENV, release_workdirs
from tpbcast.harness._workdir import HARNESS_SUBDIR, Workdir


def test_own_workdir_is_short_private_and_pooled_when_clean():
    release_workdirs()
    wd = Workdir.open(None)
    assert stat.S_IMODE(os.stat(wd.path).st_mode) == 0o700
    assert len(f"{wd.path}/g_0.sock") < 107
    assert os.path.basename(wd.path).startswith("tpb-")
    assert os.listdir(wd.path) == [HARNESS_SUBDIR]
    with open(wd.file(0, "out"), "w"):
        pass
    assert wd.leftovers() == ()
    wd.remove(clean=True)
    again = Workdir.open(None)
    assert again.path == wd.path  # reused
    assert os.listdir(again.harness_dir) == []  # and emptied
    again.remove(clean=False)
    assert not os.path.exists(wd.path)
    assert release_workdirs() == 0


def test_release_removes_pooled_dirs():
    wd = Workdir.open(None)
    wd.remove(clean=True)
    assert os.path.isdir(wd.path)
    assert release_workdirs() >= 1
    assert not os.path.exists(wd.path)


def test_pooled_dirs_of_another_pid_are_not_reused(monkeypatch):
    from tpbcast.harness import _workdir

    wd = Workdir.open(None)
    wd.remove(clean=True)
    monkeypatch.setattr(_workdir, "_POOL", [(os.getpid() + 1, wd.path)])
    fresh = Workdir.open(None)
    try:
        assert fresh.path != wd.path
    finally:
        fresh.remove(clean=False)
        os.rmdir(f"{wd.path}/{HARNESS_SUBDIR}")
        os.rmdir(wd.path)


def test_root_comes_from_the_environment(tmp_path, monkeypatch):
    root = "/tmp/" + os.path.basename(str(tmp_path))[:20] + "-r"
    monkeypatch.setenv(WORKDIR_ROOT_ENV, root)
    wd = Workdir.open(None)
    try:
        assert os.path.dirname(wd.path) == root
    finally:
        wd.remove(clean=False)
        os.rmdir(root)


def test_too_long_workdir_is_refused(tmp_path):
    with pytest.raises(ValueError, match="too long for Unix sockets"):
        Workdir.open(str(tmp_path / ("d" * 100)))
