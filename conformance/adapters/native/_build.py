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
import shlex
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

__all__ = [
    "CFLAGS",
    "NativeBuildError",
    "build_cached",
    "cache_dir",
    "find_compiler",
    "find_cxx_compiler",
    "library_path",
    "source",
]

CFLAGS = ("-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared")
_BUILD_TIMEOUT = 120.0


class NativeBuildError(RuntimeError):
    """The example library could not be built (no compiler, or it rejected the source)."""


def source() -> Path:
    """The C source shipped next to this module (package data ``*.c``)."""
    return Path(__file__).with_name("cbcast.c")


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
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


def _find_tool(
    environ: Mapping[str, str] | None, variable: str, defaults: Sequence[str], missing: str
) -> list[str]:
    """``$variable`` (may carry words, e.g. ``ccache gcc``), else the first of ``defaults``
    on PATH; :class:`NativeBuildError` naming what was tried, then ``missing``, if none."""
    env = os.environ if environ is None else environ
    path = env.get("PATH", os.defpath)
    chosen = shlex.split(env.get(variable, ""))
    candidates = [chosen] if chosen else [[name] for name in defaults]
    for words in candidates:
        found = shutil.which(words[0], path=path)
        if found:
            return [found, *words[1:]]
    tried = ", ".join(" ".join(words) for words in candidates)
    raise NativeBuildError(missing.format(tried=tried, path=path))


def find_compiler(environ: Mapping[str, str] | None = None) -> list[str]:
    """``$CC`` (may carry words, e.g. ``ccache gcc``), else ``cc``, ``gcc`` or ``clang``."""
    return _find_tool(
        environ,
        "CC",
        ("cc", "gcc", "clang"),
        "no C compiler found (tried {tried} on PATH={path!r}); the native example "
        "adapter compiles cbcast.c at first use: install one (e.g. apt-get install gcc) "
        "or point $CC at it",
    )


def find_cxx_compiler(environ: Mapping[str, str] | None = None) -> list[str]:
    """``$CXX`` (may carry words), else ``c++``, ``g++`` or ``clang++`` (the ``exec:`` kit's
    C++ example)."""
    return _find_tool(
        environ,
        "CXX",
        ("c++", "g++", "clang++"),
        "no C++ compiler found (tried {tried} on PATH={path!r}); the exec: kit's C++ "
        "example needs one: install it (e.g. apt-get install g++) or point $CXX at it",
    )


def _check_private(directory: Path) -> None:
    """Refuse a cache dir others could write: its libraries are code we dlopen."""
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise NativeBuildError(
            f"refusing the library cache {directory}: it must be a directory owned by uid "
            f"{os.geteuid()} and not writable by group/other (mode {oct(st.st_mode & 0o777)}, "
            f"owner uid {st.st_uid}); fix it or set $TPBCAST_NATIVE_CACHE"
        )


def build_cached(
    stem: str,
    sources: Sequence[Path],
    compile_args: Sequence[str],
    *,
    suffix: str = "",
    environ: Mapping[str, str] | None = None,
    finder: Callable[[Mapping[str, str] | None], list[str]] | None = None,
) -> Path:
    """Return ``<cache>/<stem>-<digest><suffix>`` built from ``sources``, building it if needed.

    The digest covers every file in ``sources`` (headers too) and the arguments (flags), so
    an edited source or a changed flag gets a new name and a stale build is never reused.
    ``compile_args`` are the compiler arguments after the output (flags, the ``.c`` files).
    The build goes to a temporary name and is renamed into place: a racing worker sees the
    old name or a whole file, never a half-written one.  ``finder`` replaces
    :func:`find_compiler`, asked only when a build is needed (the C++ example passes
    :func:`find_cxx_compiler`).

    :raises NativeBuildError: no C compiler, an unsafe cache dir, or the compiler failed.
    """
    digest = hashlib.sha256(
        b"".join(p.read_bytes() for p in sources) + "\0".join(compile_args).encode()
    ).hexdigest()[:16]
    out_dir = cache_dir(environ)
    target = out_dir / f"{stem}-{digest}{suffix}"
    if out_dir.exists():
        _check_private(out_dir)
    if target.exists():
        return target
    command = (finder or find_compiler)(environ)
    out_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    _check_private(out_dir)
    fd, tmp = tempfile.mkstemp(prefix=f".{stem}-", suffix=f"{suffix}.tmp", dir=out_dir)
    os.close(fd)
    try:
        cmd = [*command, "-o", tmp, *compile_args]
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


def library_path(environ: Mapping[str, str] | None = None) -> Path:
    """Return the built library for the current source, building it if needed."""
    src = source()
    return build_cached("libcbcast", [src], [*CFLAGS, str(src)], suffix=".so", environ=environ)
