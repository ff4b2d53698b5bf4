"""Build the native example's ``exec:`` driver (``cbcast_driver.c`` + ``cbcast.c``).

``python -m tpbcast.conformance.adapters.exec --path`` prints the executable (built on
first use, cached per source version like the ctypes example's library); without
``--path`` that module replaces itself with the driver (``os.execv``: same pid, so the
rank's PDEATHSIG and process group still hold), which makes
``exec:python -m tpbcast.conformance.adapters.exec`` a spec that needs no path.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tpbcast.conformance.adapters.native._build import build_cached
from tpbcast.conformance.adapters.native._build import source as cbcast_source

__all__ = ["driver_path", "exec_spec", "header_path", "main"]

CFLAGS = ("-std=c11", "-O2", "-Wall", "-Wextra", "-Werror")


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


def exec_spec() -> str:
    """``exec:<driver>`` for ``--tpbcast-impl`` (builds the driver first)."""
    return f"exec:{driver_path()}"


def main(argv: list[str]) -> int:
    """``--path``: print the driver; otherwise become it (same pid, same fds)."""
    path = driver_path()
    if argv[1:] == ["--path"]:
        print(path)
        return 0
    if argv[1:]:
        print(
            f"usage: python -m {__spec__.name if __spec__ else 'native'} [--path]", file=sys.stderr
        )
        return 2
    os.execv(path, [str(path)])  # noqa: S606 - our own freshly built driver
