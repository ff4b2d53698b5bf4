"""Import routing: the installed ``tpbcast.conformance.tests`` package is collected under
its real dotted name, in a checkout and from a wheel alike."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

__all__ = ["pytest_collect_directory", "pytest_pycollect_makemodule"]


def _tests_dir() -> Path:
    from tpbcast.conformance import tests

    return Path(tests.__file__).resolve().parent


def pytest_collect_directory(path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """Collect the installed tests package as a plain directory.

    pytest would import ``tests/__init__.py`` by file path under a name derived from the
    folder layout (``conformance.tests``), which is wrong both in a checkout (the folder
    installs as ``tpbcast.conformance``) and in a wheel (``tpbcast`` is a namespace
    package).  :class:`_TestModule` imports each module by its real dotted name instead.
    """
    if path.resolve() == _tests_dir():
        return pytest.Dir.from_parent(parent, path=path)
    return None


class _TestModule(pytest.Module):
    """A conformance test module, imported as ``tpbcast.conformance.tests.<name>``."""

    def _getobj(self) -> Any:
        relative = self.path.resolve().relative_to(_tests_dir()).with_suffix("")
        dotted = ".".join(("tpbcast", "conformance", "tests", *relative.parts))
        module = importlib.import_module(dotted)
        self.config.pluginmanager.consider_module(module)
        return module


def pytest_pycollect_makemodule(
    module_path: Path, parent: pytest.Collector
) -> pytest.Module | None:
    """Route modules of the tests package through :class:`_TestModule`."""
    resolved = module_path.resolve()
    if resolved.name == "__init__.py" or not resolved.is_relative_to(_tests_dir()):
        return None
    return _TestModule.from_parent(parent, path=module_path)
