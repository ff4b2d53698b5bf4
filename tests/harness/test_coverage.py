"""A rank's executed lines count in coverage, although ranks end in os._exit."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

coverage = pytest.importorskip("coverage")

TARGET_MODULE = textwrap.dedent(
    """
    def target(ctx):
        if ctx.rank >= 0:
            value = "only-in-rank"  # line 4: executed in ranks only
        return value


    def never_called():
        return "never"  # line 9: executed nowhere (the control)
    """
)

DRIVER = textwrap.dedent(
    """
    import json, os, sys
    import coverage

    workdir = sys.argv[1]
    sys.path.insert(0, workdir)
    cov = coverage.Coverage(
        data_file=os.path.join(workdir, ".coverage"), data_suffix=True,  # parallel = true
        include=[os.path.join(workdir, "covtarget.py")], config_file=False,
    )
    cov.start()
    import covtarget
    from tpbcast.harness import run_ranks

    result = run_ranks(covtarget.target, 2, timeout=60)
    cov.stop()
    cov.save()
    combined = coverage.Coverage(data_file=os.path.join(workdir, ".coverage"),
                                 config_file=False)
    combined.combine([workdir])
    data = combined.get_data()
    lines = sorted(data.lines(os.path.join(workdir, "covtarget.py")) or [])
    print(json.dumps({"ok": result.ok, "lines": lines}))
    """
)


def test_lines_executed_only_in_ranks_are_covered(tmp_path):
    (tmp_path / "covtarget.py").write_text(TARGET_MODULE)
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["ok"]
    assert 4 in out["lines"], f"the rank-only line is not covered: {out['lines']}"
    assert 9 not in out["lines"]  # the control: coverage is not just "everything"
