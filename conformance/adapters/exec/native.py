"""Build the native example's ``exec:`` drivers: C (``cbcast_driver.c`` + ``cbcast.c``) and
C++ (``cbcast_driver.cpp`` + ``tpbcast_driver_check.cpp`` + ``cbcast.c``).

``python -m tpbcast.conformance.adapters.exec --path`` prints the C executable (built on
first use, cached per source version like the ctypes example's library), ``--cxx-path``
the C++ one; without an option that module replaces itself with the C driver (``--cxx``:
the C++ one) through ``os.execv`` (same pid, so the rank's PDEATHSIG and process group
still hold), which makes ``exec:python -m tpbcast.conformance.adapters.exec`` a spec that
needs no path.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tpbcast.conformance.adapters.native._build import build_cached, find_cxx_compiler
from tpbcast.conformance.adapters.native._build import source as cbcast_source

__all__ = [
    "CFLAGS",
    "CXXFLAGS",
    "cxx_driver_path",
    "driver_path",
    "exec_spec",
    "header_path",
    "main",
]

CFLAGS = ("-std=c11", "-O2", "-Wall", "-Wextra", "-Werror")
# The C++ example must build where C++ teams build: C++17, pedantic, no C-style casts.
CXXFLAGS = ("-std=c++17", "-O2", "-Wall", "-Wextra", "-Wpedantic", "-Wold-style-cast", "-Werror")


def header_path() -> Path:
    """``tpbcast_driver.h``, the kit (package data)."""
    return Path(__file__).with_name("tpbcast_driver.h")


def _sources() -> tuple[Path, ...]:
    return (Path(__file__).with_name("cbcast_driver.c"), cbcast_source(), header_path())


def driver_path() -> Path:
    """The built driver for the current sources, built if needed (atomic rename, so
    parallel workers never run a half-written file).

    :raises NativeBuildError: no C compiler, or it rejected the sources.
    """
    driver_c, cbcast_c, _ = sources = _sources()
    return build_cached("cbcast-driver", sources, [*CFLAGS, str(driver_c), str(cbcast_c)])


def cxx_driver_path() -> Path:
    """The C++ example's driver, built if needed: ``cbcast.c`` compiled once as C into an
    object, then ``cbcast_driver.cpp`` and a second translation unit that includes the
    kit (``tpbcast_driver_check.cpp``: a duplicate definition fails the link) with
    :data:`CXXFLAGS` by ``$CXX`` (else ``c++``, ``g++``, ``clang++``).

    :raises NativeBuildError: no C or C++ compiler, or one rejected the sources.
    """
    here = Path(__file__).parent
    cbcast_c = cbcast_source()
    obj = build_cached("cbcast", (cbcast_c,), [*CFLAGS, "-c", str(cbcast_c)], suffix=".o")
    units = (here / "cbcast_driver.cpp", here / "tpbcast_driver_check.cpp")
    return build_cached(
        "cbcast-driver-cxx",
        (*units, header_path(), obj),
        [*CXXFLAGS, *(str(u) for u in units), str(obj)],
        finder=find_cxx_compiler,
    )


def exec_spec() -> str:
    """``exec:<driver>`` for ``--tpbcast-impl`` (builds the driver first)."""
    return f"exec:{driver_path()}"


def main(argv: list[str]) -> int:
    """``--path``: print the driver; otherwise become it (same pid, same fds)."""
    args = argv[1:]
    if args not in ([], ["--path"], ["--cxx"], ["--cxx-path"]):
        name = __spec__.name if __spec__ else "native"
        print(f"usage: python -m {name} [--path | --cxx | --cxx-path]", file=sys.stderr)
        return 2
    path = cxx_driver_path() if args and args[0].startswith("--cxx") else driver_path()
    if args and args[0].endswith("path"):
        print(path)
        return 0
    os.execv(path, [str(path)])  # noqa: S606 - our own freshly built driver
