"""Run mypy --strict (and, with ``--imports``, import-linter) on the four layers.

The folders ``harness/``, ``fixtures/``, ... install as ``tpbcast.<folder>``; mypy
cannot remap a folder to another package name, and neither mypy nor import-linter
follows setuptools' editable import hook.  So we build a throwaway tree of symlinks
``<tmp>/tpbcast/<layer> -> <repo>/<layer>`` and check the packages there.

    python tools/typecheck.py            # mypy --strict
    python tools/typecheck.py --imports  # import-linter layer contracts + no import cycles
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

LAYERS = ("harness", "reference_impl", "conformance", "fixtures")
TOOLS = ("mutants.py", "ecosystem.py")


# Two modules that import each other (even only for type checking) cannot be read, tested
# or moved one at a time; import-linter's layers see only imports between layers.
_NO_CYCLES = """
import sys
import grimp
graph = grimp.build_graph("tpbcast", exclude_type_checking_imports=False)
cycles = sorted({
    (module, imported)
    for module in graph.modules
    for imported in graph.find_modules_directly_imported_by(module)
    if module < imported and graph.chain_exists(importer=imported, imported=module)
})
for module, imported in cycles:
    back = graph.find_shortest_chain(importer=imported, imported=module)
    print(f"import cycle: {module} -> {' -> '.join(back or (imported,))}", file=sys.stderr)
print(f"Import cycles: {len(cycles)} found", file=sys.stderr if cycles else sys.stdout)
sys.exit(1 if cycles else 0)
"""


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
            layers = subprocess.run([*argv, *args[1:]], cwd=repo, env=env, check=False)
            cycles = subprocess.run(
                [sys.executable, "-c", _NO_CYCLES], cwd=repo, env=env, check=False
            )
            return layers.returncode or cycles.returncode
        argv = [sys.executable, "-m", "mypy", "--config-file", str(repo / "pyproject.toml")]
        layers = [arg for layer in LAYERS for arg in ("-p", f"tpbcast.{layer}")]
        code = subprocess.run([*argv, *layers, *args], cwd=tmp, check=False).returncode
        # Stand-alone tools held to the same bar (files: mypy takes packages or files).
        tools = [str(repo / "tools" / name) for name in TOOLS]
        return subprocess.run([*argv, *tools, *args], cwd=tmp, check=False).returncode or code


if __name__ == "__main__":
    raise SystemExit(main())
