"""A rank's executed lines count in coverage, although ranks end in os._exit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

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


# --- The project's own coverage configuration (what `nox -s coverage` runs with) ---------

REPO = Path(__file__).resolve().parents[2]
PROJECT_CONFIG = f"--rcfile={REPO / 'pyproject.toml'}"

RANKS_DRIVER = textwrap.dedent(
    """
    from tpbcast.harness import run_ranks

    def target(ctx):
        return ctx.rank

    assert run_ranks(target, 2, timeout=120).ok
    """
)
COPY_DRIVER = textwrap.dedent(
    """
    import sys
    site = sys.argv[1]
    sys.path.insert(0, site)
    import tpbcast.harness
    assert tpbcast.harness.__file__.startswith(site), tpbcast.harness.__file__
    """
)


def _coverage(args: list[str], data_file: Path) -> None:
    """``python -m coverage <args>`` with the project's config, from the project root (the
    [paths] entries are relative to it), measured on its own: an enclosing coverage run
    (`nox -s coverage` runs this test) must not take over or be written to."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
    env["COVERAGE_FILE"] = str(data_file)
    proc = subprocess.run(
        [sys.executable, "-m", "coverage", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"coverage {args}: {proc.stdout}\n{proc.stderr}"


def _line_of(path: Path, text: str) -> int:
    (number,) = [i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line]
    return number


def test_the_project_config_counts_lines_that_only_forked_ranks_run(tmp_path):
    driver = tmp_path / "driver.py"
    driver.write_text(RANKS_DRIVER)
    data = tmp_path / ".coverage"
    _coverage(["run", PROJECT_CONFIG, str(driver)], data)
    _coverage(["combine", PROJECT_CONFIG], data)
    combined = coverage.CoverageData(basename=str(data))
    combined.read()
    rank_py = REPO / "harness" / "_rank.py"
    lines = set(combined.lines(str(rank_py)) or ())
    # _run's first statement executes only in a forked rank, never in the driver itself...
    assert _line_of(rank_py, "os.setpgid(0, 0)") in lines, sorted(lines)
    # ...and the control: a rank only returns EXIT_ORPHANED when its parent died first.
    assert _line_of(rank_py, "return EXIT_ORPHANED") not in lines


def test_installed_copies_of_the_package_map_back_to_the_project_files(tmp_path):
    """An installed copy (as tests/test_packaging.py makes one under pytest's tmp dir) is
    measured, and `coverage combine` files its lines under the project's own files."""
    site = tmp_path / "site"
    shutil.copytree(REPO / "harness", site / "tpbcast" / "harness")
    driver = tmp_path / "driver.py"
    driver.write_text(COPY_DRIVER)
    data = tmp_path / ".coverage"
    _coverage(["run", PROJECT_CONFIG, str(driver), str(site)], data)
    # 1. The copy really was measured, under its own path...
    (raw,) = tmp_path.glob(".coverage.*")
    measured = coverage.CoverageData(basename=str(raw))
    measured.read()
    copy_init = str(site / "tpbcast" / "harness" / "__init__.py")
    assert copy_init in measured.measured_files()
    # 2. ...and after combining, every measured file is one of the project's own.
    _coverage(["combine", PROJECT_CONFIG], data)
    combined = coverage.CoverageData(basename=str(data))
    combined.read()
    files = combined.measured_files()
    outside = sorted(f for f in files if not f.startswith(f"{REPO}/"))
    assert outside == [], outside
    assert str(REPO / "harness" / "__init__.py") in files
