"""Compile ``cbcast.c`` into a shared library on first use, once per source version.

Why at run time: the example must prove that a native library plugs in without a
build step in packaging, so the test run (or the first ``make()``) builds it with
the system C compiler.  The output is cached per user, keyed by the source's
sha256 (an edited source gets a new file), and published with an atomic rename so
parallel xdist workers that race to build it never load a half-written file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["CFLAGS", "NativeBuildError", "cache_dir", "find_compiler", "library_path", "source"]

CFLAGS = ("-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared")
_BUILD_TIMEOUT = 120.0


class NativeBuildError(RuntimeError):
    """The example library could not be built (no compiler, or it rejected the source)."""


def source() -> Path:
    """The C source shipped next to this module (package data ``*.c``)."""
    return Path(__file__).with_name("cbcast.c")


def cache_dir(environ: dict[str, str] | None = None) -> Path:
    """Where built libraries live: ``$TPBCAST_NATIVE_CACHE``, else the XDG cache.

    ``$XDG_CACHE_HOME/tpbcast`` or ``~/.cache/tpbcast``; created 0700 because a
    shared library someone else can replace is code they run as us.
    """
    env = os.environ if environ is None else environ
    explicit = env.get("TPBCAST_NATIVE_CACHE")
    if explicit:
        return Path(explicit)
    xdg = env.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path(env.get("HOME") or Path.home()) / ".cache"
    return base / "tpbcast"


def find_compiler(environ: dict[str, str] | None = None) -> str:
    """``$CC`` if set, else ``cc``, ``gcc`` or ``clang`` from PATH."""
    env = os.environ if environ is None else environ
    path = env.get("PATH", os.defpath)
    candidates = [env["CC"]] if env.get("CC") else ["cc", "gcc", "clang"]
    for name in candidates:
        found = shutil.which(name, path=path)
        if found:
            return found
    raise NativeBuildError(
        f"no C compiler found (tried {', '.join(candidates)} on PATH={path!r}); the native "
        "example adapter compiles cbcast.c at first use: install one (e.g. apt-get install "
        "gcc) or point $CC at it"
    )


def library_path(environ: dict[str, str] | None = None) -> Path:
    """Return the built library for the current source, building it if needed."""
    src = source()
    digest = hashlib.sha256(src.read_bytes()).hexdigest()[:16]
    out_dir = cache_dir(environ)
    target = out_dir / f"libcbcast-{digest}.so"
    if target.exists():
        return target
    compiler = find_compiler(environ)
    out_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".libcbcast-", suffix=".so.tmp", dir=out_dir)
    os.close(fd)
    try:
        cmd = [compiler, *CFLAGS, "-o", tmp, str(src)]
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
        os.replace(tmp, target)  # atomic: a racing worker sees the old name or a whole file
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target
