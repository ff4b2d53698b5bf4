"""What the runner manages around the ranks, for plugins built on the harness.

Where workdirs live (``WORKDIR_ROOT_ENV``, ``WORKDIR_PREFIX``), making a private session
directory and sweeping the ones dead sessions left (:func:`make_private_dir`,
:func:`sweep_stale_dirs`), releasing pooled workdirs at session end, the variable that
replays a schedule (``SEED_ENV``), and the fork-safety probe (:func:`native_threads`) that
decides whether forking now would hang the ranks (``ForkSafetyError``, raised by
``run_ranks``, is in the test author's API), and what the groups left behind outside
their workdirs (:func:`take_leaks`, :func:`remove_leaks`: a plugin removes it after each
test; whatever is left is removed at interpreter exit).  A test author needs none of it.
"""

from __future__ import annotations

from ._faults import PlannedFault
from ._forksafety import NativeThread, native_threads
from ._leaks import Leak, claim, pending_leaks, remove_leaks, size_text, take_leaks
from ._runner import SEED_ENV
from ._stale import make_private_dir, sweep_stale_dirs
from ._workdir import WORKDIR_PREFIX, WORKDIR_ROOT_ENV, release_workdirs

__all__ = [
    "SEED_ENV",
    "WORKDIR_PREFIX",
    "WORKDIR_ROOT_ENV",
    "Leak",
    "NativeThread",
    "PlannedFault",
    "claim",
    "make_private_dir",
    "native_threads",
    "pending_leaks",
    "release_workdirs",
    "remove_leaks",
    "size_text",
    "sweep_stale_dirs",
    "take_leaks",
]
