"""The wheel installs our four layers under ``tpbcast.`` only, and they import from it.

PyPI has unrelated top-level packages named ``harness``, ``fixtures`` and
``conformance``; a wheel that shipped ours at top level would shadow them.  This builds
the real wheel (the same path ``pip install .`` takes), checks every top-level entry, then
imports each layer from an install of that wheel alone, outside the source tree.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LAYERS = ("harness", "reference_impl", "conformance", "fixtures")
# Hidden trees (.git, .nox, caches, mutmut's .mutation copy, .hypothesis) and build
# output are never part of the package; a special file in one broke the copy.
_NOT_SOURCE = (".*", "build", "dist", "*.egg-info", "reports", "__pycache__", "mutants")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # Build from a clean copy: setuptools builds in-tree and never prunes build/lib, so a
    # stale module left there by an earlier build would ride along into the wheel.
    source = tmp_path_factory.mktemp("src") / "tpbcast"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(*_NOT_SOURCE))
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)]
    if importlib.util.find_spec("setuptools") is not None:
        argv.insert(4, "--no-build-isolation")  # offline and fast when setuptools is here
    subprocess.run(argv, check=True, timeout=300, capture_output=True)
    (built,) = out.glob("tpbcast-*.whl")
    return built


def test_wheel_has_only_the_tpbcast_namespace(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        tops = {name.split("/", 1)[0] for name in zf.namelist()}
        names = set(zf.namelist())
    dist_info = [top for top in tops if top.endswith(".dist-info")]
    assert len(dist_info) == 1 and tops == {"tpbcast", *dist_info}, sorted(tops)
    assert "tpbcast/__init__.py" not in names  # an implicit namespace package
    for layer in LAYERS:
        assert f"tpbcast/{layer}/__init__.py" in names
    assert "tpbcast/conformance/clauses.toml" in names
    assert "tpbcast/conformance/adapters/native/cbcast.c" in names
    for kit_file in (
        "tpbcast_driver.h",
        "cbcast_driver.c",
        "cbcast_driver.cpp",
        "tpbcast_driver_check.cpp",
        "expectations-cxx.toml",
    ):  # the exec: kit and both examples (the C++ one is built from the installed copy)
        assert f"tpbcast/conformance/adapters/exec/{kit_file}" in names, kit_file
    assert any(n.startswith("tpbcast/conformance/tests/test_") for n in names)


def test_wheel_install_imports_every_layer(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        timeout=300,
        capture_output=True,
    )
    code = (
        "import importlib, sys\n"
        f"for layer in {LAYERS!r}:\n"
        "    mod = importlib.import_module('tpbcast.' + layer)\n"
        f"    assert mod.__file__.startswith({str(target)!r}), mod.__file__\n"
        "for name in ('harness', 'fixtures', 'conformance', 'reference_impl'):\n"
        f"    spec = importlib.util.find_spec(name)\n"
        f"    assert spec is None or not (spec.origin or '').startswith({str(target)!r}), name\n"
        "assert 'torch' not in sys.modules\n"
    )
    # -I: isolated mode, so neither the cwd nor the editable install can answer the imports.
    env_path = str(target)
    subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {env_path!r})\n" + code],
        check=True,
        timeout=120,
        cwd=tmp_path,
    )


def test_wheel_metadata_requires_pytest_and_keeps_torch_an_extra(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        (metadata,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        requires = [
            line.split(":", 1)[1].strip()
            for line in zf.read(metadata).decode().splitlines()
            if line.startswith("Requires-Dist:")
        ]
    assert any(r.startswith("pytest") and "extra ==" not in r for r in requires), requires
    torch = [r for r in requires if r.startswith("torch")]
    # torch only ever behind an extra: `torch`, or `sglang` (SGLang's broadcast code needs it)
    extras = ("extra == 'torch'", 'extra == "torch"', "extra == 'sglang'", 'extra == "sglang"')
    assert torch and all(any(e in r for e in extras) for r in torch), torch


ONE_TEST = """
def test_two_ranks(tpbcast_run):
    result = tpbcast_run(lambda ctx: ctx.rank * 10, 2)
    assert [o.value for o in result.outcomes] == [0, 10]
"""


def test_wheel_in_a_bare_venv_runs_the_suite_cli_and_the_plugin(
    wheel: Path, tmp_path: Path
) -> None:
    """What a user gets from ``pip install tpbcast`` (no extras) in a clean venv.

    ``python -m tpbcast.conformance --list`` used to die there with
    ``ModuleNotFoundError: No module named 'pytest'``.  The wheel's own dependencies come
    from the configured package index (pytest and its few pure-Python dependencies, about
    10 s); torch must not come along.
    """
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    install = subprocess.run(
        [python, "-m", "pip", "install", "-q", str(wheel)],
        timeout=300,
        check=False,
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    work = tmp_path / "work"
    work.mkdir()
    # -I and a cwd outside the checkout: only the venv's site-packages can answer.
    probe = "import importlib.util as u; print(u.find_spec('torch') is None)"
    bare = subprocess.run(
        [python, "-I", "-c", probe],
        check=False,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bare.stdout.strip() == "True", "torch must stay an extra: " + bare.stderr

    listing = subprocess.run(
        [python, "-I", "-m", "tpbcast.conformance", "--list"],
        cwd=work,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listing.returncode == 0, listing.stderr
    assert any(line.startswith("WIRE-1 ") for line in listing.stdout.splitlines())

    (work / "pytest.ini").write_text("[pytest]\n")  # the run's rootdir: not the checkout
    (work / "test_one.py").write_text(ONE_TEST)
    run = subprocess.run(
        [python, "-I", "-m", "pytest", "-p", "no:cacheprovider", "test_one.py"],
        cwd=work,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout, run.stdout
