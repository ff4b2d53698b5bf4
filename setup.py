"""Map the four top-level folders onto the ``tpbcast`` namespace.

PyPI already has top-level packages named ``harness``, ``fixtures`` and
``conformance``; installing ours under those names would shadow them.  So each
folder installs as ``tpbcast.<folder>`` (``tpbcast`` itself is an implicit
namespace package), and every sub-package is discovered here so that nobody
has to remember to list a new one in pyproject.toml.
"""

from __future__ import annotations

from setuptools import find_packages, setup

LAYERS = ("harness", "reference_impl", "conformance", "fixtures")

packages: list[str] = []
package_dir: dict[str, str] = {}
for layer in LAYERS:
    packages.append(f"tpbcast.{layer}")
    package_dir[f"tpbcast.{layer}"] = layer
    for sub in find_packages(where=layer):
        packages.append(f"tpbcast.{layer}.{sub}")
        package_dir[f"tpbcast.{layer}.{sub}"] = f"{layer}/{sub.replace('.', '/')}"

setup(packages=packages, package_dir=package_dir)
