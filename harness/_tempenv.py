"""Every rank's temporary directory is its group's workdir.

A rank's ``TMPDIR`` (and :mod:`tempfile`'s cached choice) points at the group's private
workdir, and so does every engine-specific base-path variable an adapter declares
(``TEMP_DIR_VARIABLES`` in its module: vLLM puts its IPC socket files under
``VLLM_RPC_BASE_PATH``, which defaults to ``tempfile.gettempdir()``).  What an engine
writes to "the" temporary directory then lands where the harness's leftover check sees
it, is reported with the group that made it, and goes when the workdir is removed,
instead of piling up in the machine's ``/tmp``.  A test that wants another TMPDIR
(the base-path tests) still sets its own inside the rank.

The variables are set in ``os.environ``, so a process the rank starts (an ``exec:``
driver, an engine's helper) inherits them too.
"""

from __future__ import annotations

import os
import tempfile

__all__ = ["TEMP_DIR_VARIABLES", "add_temp_dir_variables", "point_temp_dirs"]

TEMP_DIR_VARIABLES: list[str] = ["TMPDIR"]
"""The variables a rank points at its workdir; adapters add their engines' own."""

_POINTED_AT: list[str] = []  # the workdir this process (a rank) was pointed at, if any


def add_temp_dir_variables(names: tuple[str, ...] | list[str]) -> None:
    """Point ``names`` at the rank's workdir too (from now on; at once in a rank that
    loads an adapter itself, after its bootstrap pointed the others)."""
    for name in names:
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise ValueError(f"TEMP_DIR_VARIABLES: {name!r} is not an environment variable name")
        if name not in TEMP_DIR_VARIABLES:
            TEMP_DIR_VARIABLES.append(name)
        if _POINTED_AT:
            os.environ[name] = _POINTED_AT[0]


def point_temp_dirs(workdir: str) -> None:
    """Called once in every rank, before its target: the temp variables -> ``workdir``."""
    for name in TEMP_DIR_VARIABLES:
        os.environ[name] = workdir
    tempfile.tempdir = None  # gettempdir() caches its first answer: forget the parent's
    _POINTED_AT[:] = [workdir]
