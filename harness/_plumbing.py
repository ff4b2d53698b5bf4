"""Fds of this process that belong to adapter plumbing, not to the implementation judged.

Why a registry: an ``exec:`` broadcaster holds its driver channel for as long as the
object lives, and an object caught in a reference cycle (an exception's traceback that
holds its frame) outlives its rank's target.  The harness's fd-leak check
(``check_fds=True``) must not charge the implementation with that channel, and it cannot
see the broadcaster objects, so the adapter registers the fd here while it is open.
"""

from __future__ import annotations

__all__ = ["forget_private_fd", "private_fds", "register_private_fd"]

_PRIVATE: set[int] = set()


def register_private_fd(fd: int) -> None:
    """Mark ``fd`` as plumbing until :func:`forget_private_fd` (call it before closing)."""
    _PRIVATE.add(fd)


def forget_private_fd(fd: int) -> None:
    """``fd`` is about to be closed: a later fd with the same number is not plumbing."""
    _PRIVATE.discard(fd)


def private_fds() -> frozenset[int]:
    """The plumbing fds of this process now."""
    return frozenset(_PRIVATE)
