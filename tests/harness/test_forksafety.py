"""The torch fork hazard: a parent that ran a parallel torch op must not hang its ranks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from tpbcast.harness import ForkSafetyError, run_ranks
from tpbcast.harness.runtime import native_threads

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    from tpbcast.harness import ForkSafetyError, run_ranks
    from tpbcast.harness.runtime import native_threads

    if sys.argv[2] == "force":  # control: neither refuse nor fix, to show the hang is real
        import tpbcast.harness._runner as runner
        runner.check_fork_safety = lambda: None

    if sys.argv[2] != "no-op":
        torch.ones(1 << 22).add_(1)  # starts the OpenMP pool in this (forking) process
    out = {"native_threads": [t.where for t in native_threads()],
           "openmp": [t.where for t in native_threads() if t.looks_like_openmp],
           "parent_threads": torch.get_num_threads()}

    def rank_torch(ctx):
        x = torch.zeros(1 << 22)
        x.add_(1)  # a parallel op: hangs forever in a child of a started pool
        return [torch.get_num_threads(), float(x.sum())]

    try:
        res = run_ranks(rank_torch, 2, timeout=float(sys.argv[1]), kill_grace=0.5)
        out["statuses"] = [o.status.name for o in res.outcomes]
        out["values"] = [o.value for o in res.outcomes]
        out["report"] = res.report()
    except ForkSafetyError as exc:
        out["refused"] = str(exc)
    print(json.dumps(out))
    """
)


def _run(
    env_extra: dict[str, str], timeout: float = 20.0, mode: str = "normal"
) -> dict[str, object]:
    pytest.importorskip("torch")
    env = dict(os.environ, **env_extra)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(timeout), mode],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_after_a_parallel_torch_op_ranks_are_made_safe():
    out = _run({})
    if out["parent_threads"] <= 1:
        pytest.skip("single-core box: torch starts no OpenMP pool, so there is no hazard")
    # The hazard is real in this process: OpenMP worker threads exist.
    assert out["openmp"], out["native_threads"]
    assert out["statuses"] == ["OK", "OK"], out.get("report")
    assert out["values"] == [[1, float(1 << 22)], [1, float(1 << 22)]]


def test_with_the_safety_opted_out_the_runner_refuses_and_teaches():
    out = _run({"TPBCAST_TORCH_THREADS": "keep"})
    if out["parent_threads"] <= 1 or len(out["native_threads"]) <= 1:
        pytest.skip("single-core box: torch starts no OpenMP pool, so there is no hazard")
    message = out["refused"]
    assert "refusing to fork ranks" in message
    assert "torch.set_num_threads(1)" in message
    assert "do not run torch ops in the process that forks" in message
    assert "TPBCAST_TORCH_THREADS" in message


def test_torch_imported_without_a_parallel_op_is_not_refused():
    out = _run({"TPBCAST_TORCH_THREADS": "keep"}, mode="no-op")
    assert out["openmp"] == [], out["native_threads"]  # e.g. OpenBLAS threads only
    assert "refused" not in out
    assert out["statuses"] == ["OK", "OK"], out.get("report")


def test_control_without_protection_the_ranks_really_hang():
    out = _run({"TPBCAST_TORCH_THREADS": "keep"}, timeout=3.0, mode="force")
    if out["parent_threads"] <= 1:
        pytest.skip("single-core box: torch starts no OpenMP pool, so there is no hazard")
    assert out["statuses"] == ["TIMED_OUT", "TIMED_OUT"], out.get("report")


def test_python_threads_are_not_native_threads():
    before = native_threads()
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, args=(30,))
    t.start()
    try:
        assert native_threads() == before

        def target(ctx):
            return threading.active_count()

        # Forking with a Python thread alive (like an xdist worker's execnet threads).
        assert run_ranks(target, 2, timeout=30).outcomes[0].value == 1
    finally:
        stop.set()
        t.join(timeout=30)


def test_fork_safety_error_is_a_runtime_error():
    assert issubclass(ForkSafetyError, RuntimeError)
