"""A group's temp dirs are its workdir; what it leaks outside is proven its own, reported
and removed; what another process makes meanwhile is never touched (``_leaks``,
``_tempenv``)."""

from __future__ import annotations

import mmap
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from tpbcast.harness import Status, run_ranks
from tpbcast.harness._tempenv import add_temp_dir_variables
from tpbcast.harness.runtime import pending_leaks, remove_leaks, take_leaks

ENGINE_VAR = "TPBCAST_SELFTEST_ENGINE_DIR"  # stands for an adapter's VLLM_RPC_BASE_PATH


def _temp_view(ctx):
    import tempfile as tf

    return ctx.workdir, os.environ.get("TMPDIR"), tf.gettempdir(), os.environ.get(ENGINE_VAR)


def test_each_rank_has_its_workdir_as_tmpdir_and_engine_base_path():
    add_temp_dir_variables([ENGINE_VAR])
    result = run_ranks(_temp_view, 2, timeout=30)
    result.raise_for_failure()
    for outcome in result.outcomes:
        workdir, tmpdir, gettempdir, engine = outcome.value
        assert tmpdir == workdir, outcome.value
        assert gettempdir == workdir, outcome.value  # tempfile's cached answer forgotten
        assert engine == workdir, outcome.value
    assert os.environ.get(ENGINE_VAR) is None  # the parent's environment is untouched


def _leak_everything(ctx, prefix):
    """Rank 0 leaks one of each: a mapped segment with a random name, a closed segment
    named after its pid, a bound socket in /tmp, a helper in its own session."""
    if ctx.rank != 0:
        return None
    fd = os.open(f"/dev/shm/{prefix}psm_{secrets.token_hex(4)}", os.O_CREAT | os.O_RDWR, 0o600)
    os.ftruncate(fd, 1 << 16)
    kept = [mmap.mmap(fd, 1 << 16)]
    os.close(fd)
    with open(f"/dev/shm/{prefix}ring-{os.getpid()}-{secrets.token_hex(3)}", "w") as fh:
        fh.write("x" * 100)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(f"/tmp/{prefix}ipc-{secrets.token_hex(4)}")
    kept.append(sock)
    helper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    _KEPT.extend(kept)  # held until the rank exits
    return helper.pid


_KEPT: list[object] = []


def _role(path):
    return next(r for r in ("psm_", "ring-", "ipc-") if r in path)


def _ours(prefix):
    return sorted(
        [f"/dev/shm/{n}" for n in os.listdir("/dev/shm") if n.startswith(prefix)]
        + [f"/tmp/{n}" for n in os.listdir("/tmp") if n.startswith(prefix)]
    )


def _gone(pid, start_ticks, timeout=10.0):
    """True once ``pid`` (with that start time) is no longer running (bounded poll)."""
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            return True
        if int(fields[19]) != start_ticks or fields[0] in ("Z", "X"):
            return True
        time.sleep(0.01)  # polling the process table with a deadline
    return False


def test_a_leaking_group_is_recorded_with_proof_and_removed():
    prefix = f"tpbleak{os.getpid()}x{secrets.token_hex(2)}"
    remove_leaks(take_leaks())  # what earlier tests of this process left is theirs
    try:
        result = run_ranks(_leak_everything, 2, timeout=30, args=(prefix,), label="leaky")
        result.raise_for_failure()
        helper = result.outcomes[0].value
        left = _ours(prefix)
        assert len(left) == 3, left  # the leak happened: judged only after seeing it
        by_path = {leak.path: leak for leak in result.leaks if not leak.in_workdir}
        assert set(left) <= set(by_path), (left, result.leaks)
        rank0 = result.outcomes[0].pid
        proofs = {_role(p): by_path[p].proof for p in left}
        assert proofs == {"psm_": "held", "ring-": "name", "ipc-": "held"}, proofs
        assert all(by_path[p].creator == rank0 for p in left), result.leaks
        procs = [leak for leak in result.leaks if leak.kind == "process"]
        assert [leak.key[0] for leak in procs] == [helper], result.leaks
        assert "left outside the workdir" in result.report()
        assert set(result.leaks) <= set(pending_leaks())
        problems = remove_leaks(take_leaks())
        assert problems == []
        assert _ours(prefix) == []
        assert _gone(helper, procs[0].key[1]), f"helper pid {helper} still runs"
    finally:
        for path in _ours(prefix):
            os.unlink(path)


_FOREIGN = """
import os, socket, sys, time
go, prefix = sys.argv[1], sys.argv[2]
deadline = time.monotonic() + 20
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.005)
open(f"/dev/shm/{prefix}foreign-{os.getpid()}", "w").close()
s = socket.socket(socket.AF_UNIX); s.bind(f"/tmp/{prefix}foreign-sock")
open(go + ".done", "w").close()
time.sleep(30)
"""


def _let_the_foreigner_create(ctx, go):
    """Rank 0 lets an unrelated process create entries during the group, then waits for
    them (the entries appear after the group's first snapshot: only proof can tell)."""
    if ctx.rank == 0:
        open(go, "w").close()
        until = time.monotonic() + 20
        while not os.path.exists(go + ".done"):
            if time.monotonic() > until:
                raise TimeoutError("the foreign process never created its entries")
            time.sleep(0.005)  # polling a file with a deadline


def test_what_another_process_creates_meanwhile_is_never_taken():
    prefix = f"tpbleak{os.getpid()}y{secrets.token_hex(2)}"
    with tempfile.TemporaryDirectory() as tmp:
        go = os.path.join(tmp, "go")
        foreign = subprocess.Popen([sys.executable, "-c", _FOREIGN, go, prefix])
        try:
            result = run_ranks(_let_the_foreigner_create, 2, timeout=30, args=(go,))
            result.raise_for_failure()
            left = _ours(prefix)
            assert len(left) == 2, left  # the foreign entries exist: the case was staged
            taken = [leak for leak in result.leaks if leak.path in left]
            assert taken == [], taken
            remove_leaks(take_leaks())
            assert _ours(prefix) == left  # still there: not the group's to remove
        finally:
            foreign.kill()
            foreign.wait(timeout=10)
            for path in _ours(prefix):
                os.unlink(path)


def _map_random_segment(prefix):
    """A segment named as multiprocessing names one (no pid in it), kept mapped."""
    fd = os.open(f"/dev/shm/{prefix}psm_{secrets.token_hex(4)}", os.O_CREAT | os.O_RDWR, 0o600)
    os.ftruncate(fd, 1 << 16)
    _KEPT.append(mmap.mmap(fd, 1 << 16))
    os.close(fd)


def _map_then_die(ctx, prefix, how):
    """Rank 1 maps a randomly named segment, then is SIGKILLed (a fault) or hangs until
    the harness stops it: it never reaches its own end, where it would note what it held."""
    if ctx.rank != 1:
        return None
    _map_random_segment(prefix)
    if how == "fault":
        from tpbcast.harness import observe

        observe.kill(os.getpid())
    threading.Event().wait(120)  # hung: the group deadline stops it
    return None


@pytest.mark.parametrize("how", ["fault", "hung"])
def test_a_killed_rank_s_segment_is_proven_from_what_it_held_before_the_kill(how):
    prefix = f"tpbkill{os.getpid()}x{secrets.token_hex(2)}"
    remove_leaks(take_leaks())
    try:
        result = run_ranks(
            _map_then_die, 2, timeout=3 if how == "hung" else 30, args=(prefix, how), kill_grace=0.5
        )
        victim = result.outcomes[1]
        assert victim.status in (Status.SIGNALED, Status.TIMED_OUT), result.report()
        left = _ours(prefix)
        assert len(left) == 1, left  # the segment outlived its killed creator
        by_path = {leak.path: leak for leak in result.leaks if not leak.in_workdir}
        assert left[0] in by_path, (left, result.leaks)
        assert by_path[left[0]].proof == "held"
        assert by_path[left[0]].creator == victim.pid
        assert remove_leaks(take_leaks()) == []
        assert _ours(prefix) == []
    finally:
        for path in _ours(prefix):
            os.unlink(path)
