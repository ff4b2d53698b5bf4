"""Verdict parity: the slice on torch's own spawn runner and on tpbcast's harness.

Each runner runs the whole slice in a fresh interpreter (``python -m torchsuite.verdicts``)
and the two must agree test by test: the same tests pass, the same skip, none fails.  The
spawn side takes minutes (an interpreter that imports torch per rank and test);
``TORCHSUITE_PARITY_TESTS=a,b`` narrows both sides to those tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from torchsuite import SLICE


def _verdicts(runner: str, names: tuple[str, ...], out: Path) -> dict[str, str]:
    command = [sys.executable, "-m", "torchsuite.verdicts", runner]
    subprocess.run(
        [*command, "--tests", ",".join(names), "--json", str(out)],
        check=True,
        timeout=1800,
    )
    record = json.loads(out.read_text())
    return {name: test["verdict"] for name, test in record["tests"].items()}


def test_same_pass_and_skip_sets_as_torchs_spawn_runner(tmp_path: Path) -> None:
    chosen = os.environ.get("TORCHSUITE_PARITY_TESTS", "")
    names = tuple(n for n in chosen.split(",") if n) or SLICE
    ours = _verdicts("harness", names, tmp_path / "harness.json")
    theirs = _verdicts("spawn", names, tmp_path / "spawn.json")
    assert set(ours) == set(theirs) == set(names)
    assert ours == theirs, {n: (ours[n], theirs[n]) for n in names if ours[n] != theirs[n]}
    assert set(ours.values()) <= {"pass", "skip"}, ours
    if not chosen:  # the slice as documented: at least 40 tests, skips included
        assert len(names) >= 40 and "skip" in ours.values() and "pass" in ours.values()
