"""Run mypy --strict on the four layers under their installed names.

The folders ``harness/``, ``fixtures/``, ... install as ``tpbcast.<folder>``; mypy
cannot remap a folder to another package name, and it does not follow
setuptools' editable import hook.  So we build a throwaway tree of symlinks
``<tmp>/tpbcast/<layer> -> <repo>/<layer>`` and check the packages there.
Error paths still point at the real files.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

LAYERS = ("harness", "reference_impl", "conformance", "fixtures")


def main() -> int:
    repo = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="tpbcast-mypy-") as tmp:
        namespace = Path(tmp) / "tpbcast"
        namespace.mkdir()
        for layer in LAYERS:
            (namespace / layer).symlink_to(repo / layer, target_is_directory=True)
        argv = [sys.executable, "-m", "mypy", "--config-file", str(repo / "pyproject.toml")]
        for layer in LAYERS:
            argv += ["-p", f"tpbcast.{layer}"]
        return subprocess.run([*argv, *sys.argv[1:]], cwd=tmp, check=False).returncode


if __name__ == "__main__":
    raise SystemExit(main())
