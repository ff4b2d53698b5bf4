"""Build the native example's ``exec:`` driver (``cbcast_driver.c`` + ``cbcast.c``).

``python -m tpbcast.conformance.adapters.exec --path`` prints the executable (built on
first use, cached per source version like the ctypes example's library); without
``--path`` that module replaces itself with the driver (``os.execv``: same pid, so the
rank's PDEATHSIG and process group still hold), which makes
``exec:python -m tpbcast.conformance.adapters.exec`` a spec that needs no path.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tpbcast.conformance.adapters.native._build import (
    NativeBuildError,
    _check_private,
    cache_dir,
    find_compiler,
)
from tpbcast.conformance.adapters.native._build import source as cbcast_source

__all__ = ["driver_path", "exec_spec", "header_path", "main"]

CFLAGS = ("-std=c11", "-O2", "-Wall", "-Wextra", "-Werror")
_BUILD_TIMEOUT = 120.0


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
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in _sources())).hexdigest()[:16]
    out_dir = cache_dir()
    target = out_dir / f"cbcast-driver-{digest}"
    if out_dir.exists():
        _check_private(out_dir)
    if target.exists():
        return target
    compiler = find_compiler()
    out_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    _check_private(out_dir)
    fd, tmp = tempfile.mkstemp(prefix=".cbcast-driver-", suffix=".tmp", dir=out_dir)
    os.close(fd)
    try:
        driver_c, cbcast_c, _ = _sources()
        cmd = [*compiler, *CFLAGS, "-o", tmp, str(driver_c), str(cbcast_c)]
        try:
            done = subprocess.run(
                cmd, check=False, capture_output=True, text=True, timeout=_BUILD_TIMEOUT
            )
        except subprocess.TimeoutExpired as exc:
            raise NativeBuildError(
                f"{' '.join(cmd)} did not finish within {_BUILD_TIMEOUT:.0f} s"
            ) from exc
        if done.returncode != 0:
            raise NativeBuildError(
                f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr.strip()}"
            )
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


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
