"""Run mypy --strict (and, with ``--imports``, import-linter) on the four layers.

The folders ``harness/``, ``fixtures/``, ... install as ``tpbcast.<folder>``; mypy
cannot remap a folder to another package name, and neither mypy nor import-linter
follows setuptools' editable import hook.  So we build a throwaway tree of symlinks
``<tmp>/tpbcast/<layer> -> <repo>/<layer>`` and check the packages there.

    python tools/typecheck.py            # mypy --strict
    python tools/typecheck.py --imports  # import-linter layer contracts
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

LAYERS = ("harness", "reference_impl", "conformance", "fixtures")
TOOLS = ("mutants.py",)


def main() -> int:
    repo = Path(__file__).resolve().parent.parent
    args = sys.argv[1:]
    with tempfile.TemporaryDirectory(prefix="tpbcast-lint-") as tmp:
        namespace = Path(tmp) / "tpbcast"
        namespace.mkdir()
        for layer in LAYERS:
            (namespace / layer).symlink_to(repo / layer, target_is_directory=True)
        if args[:1] == ["--imports"]:
            env = {**os.environ, "PYTHONPATH": tmp}
            code = "from importlinter.cli import lint_imports_command; lint_imports_command()"
            argv = [sys.executable, "-c", code, "--config", str(repo / "pyproject.toml")]
            return subprocess.run([*argv, *args[1:]], cwd=repo, env=env, check=False).returncode
        argv = [sys.executable, "-m", "mypy", "--config-file", str(repo / "pyproject.toml")]
        layers = [arg for layer in LAYERS for arg in ("-p", f"tpbcast.{layer}")]
        code = subprocess.run([*argv, *layers, *args], cwd=tmp, check=False).returncode
        # Stand-alone tools held to the same bar (files: mypy takes packages or files).
        tools = [str(repo / "tools" / name) for name in TOOLS]
        return subprocess.run([*argv, *tools, *args], cwd=tmp, check=False).returncode or code


if __name__ == "__main__":
    raise SystemExit(main())
