"""Rank 0 decides whether a socket at its path is live by comparing NAMES.

/proc/net/unix lists a listener's name as it was spelt at bind time.  The reference asks
whether a listed name is the same FILE as its path (device and inode).  This mutant
compares strings instead, as the reference itself did until an audit of its mutation
equivalents found the bug: given the base path spelt ``//dir/g`` (``abspath`` keeps a
leading ``//``), it never matches the ``/dir/g_0.sock`` another group listens on, takes
that live socket over, and leaves the other group unreachable.
"""

from __future__ import annotations

import os

from tpbcast.reference_impl import _paths

from ._base import Delegating

DEFECT = "a live listener is recognised by the spelling of its path, not by its file"
KILLS = ("SEC-9",)
FAST = True


def _has_live_listener_by_name(path: str, ident: object) -> bool:
    wanted = os.fsencode(os.path.abspath(path))
    for entry in _paths._live_listener_paths():
        if entry == wanted:  # the defect: '//dir/g_0.sock' is not '/dir/g_0.sock'
            return True
        if entry.startswith((b"/", b"@")):
            continue
        tail = [part for part in os.path.normpath(entry).split(b"/") if part not in (b"..", b".")]
        if tail and wanted.endswith(b"/" + b"/".join(tail)):
            return True
    return False


_paths._has_live_listener = _has_live_listener_by_name


class ListenerByName(Delegating):
    pass


def make() -> ListenerByName:
    return ListenerByName()
