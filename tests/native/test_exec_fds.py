"""The exec: broadcaster's optional fd members, and the suite's fd helpers honouring them.

Why: through ``exec:`` the implementation's sockets live in the driver process and the rank
holds one fd of plumbing (the channel); the suite must judge the former and never the
latter, or every exec: implementation fails WIRE-1/INIT-3/RESET-2/HYG-3/TIME-1.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest

from tpbcast.conformance.adapters.exec import driver_path
from tpbcast.conformance.tests import _support as s
from tpbcast.harness import load_implementation, run_ranks

FAKE = Path(__file__).with_name("_fake_driver.py")


@pytest.fixture(scope="module")
def native_exec() -> str:
    """``exec:<built driver>``; built once in the parent, before any fork."""
    return f"exec:{driver_path()}"


def test_members_name_the_driver_and_the_plumbing():
    impl = load_implementation(f"exec:{shlex.join([sys.executable, str(FAKE), 'ok'])}")
    before = s.fd_table()  # after the load, which holds the driver's executable open
    bcast = impl.create()
    try:
        pid = bcast.driver_pid
        assert bcast.resource_pids() == (pid,)
        private = bcast.private_fds()
        assert {(pid, 0), (pid, 1), (pid, 2)} <= private  # the channel as stdin/stdout
        assert sum(1 for p, _ in private if p == os.getpid()) == 1  # the rank's end
        assert s.new_fds(before, bcast) == {}, "plumbing only: nothing the suite may judge"
        assert s.new_fds(before) != {}, "without the members the channel would count"
    finally:
        bcast.close()


def test_helpers_see_the_drivers_listener_and_its_cloexec(native_exec, tmp_path):
    impl = load_implementation(native_exec)

    def target(ctx):
        before = s.fd_table()
        bcast = impl.create()
        bcast.set_deadlines(connect=10, init=10, io=10)
        bcast.initialize(ctx.rank, ctx.world_size, str(tmp_path / "g"))
        listening = s.listening_sockets(before, bcast)
        opened = s.new_fds(before, bcast)
        missing = s.cloexec_missing(bcast)
        ctx.sync("seen")
        bcast.reset()
        pid = bcast.resource_pids()[0]
        return listening, sorted({p == pid for p, _ in opened}), missing, s.new_fds(before, bcast)

    result = run_ranks(target, 2, timeout=30)
    assert result.ok, result
    (listening0, where0, missing0, left0), (listening1, where1, _, left1) = [
        o.value for o in result.outcomes
    ]
    assert listening0 == [str(tmp_path / "g") + "_0.sock"] and listening1 == []
    assert where0 == where1 == [True], "the implementation's fds are the driver's"
    assert missing0 == [], "the native example sets CLOEXEC on every socket"
    assert left0 == left1 == {}, "reset closed them"


def test_harness_leak_check_skips_a_channel_kept_by_a_cycle(native_exec):
    impl = load_implementation(native_exec)

    def target(ctx):
        bcast = impl.create()
        bcast.self_cycle = bcast  # alive after the target returns, until a gc pass
        return bcast.driver_pid > 0

    result = run_ranks(target, 1, timeout=30, check_fds=True)
    outcome = result.outcomes[0]
    assert outcome.value is True
    assert outcome.leaked_fds == (), outcome.leaked_fds
