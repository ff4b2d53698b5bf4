"""Environment faults: what the machine around a broadcaster can get wrong.

A stale socket file left by a dead rank, a symlink or regular file where the socket
should go, a directory another uid owns or anyone may write, tiny socket buffers, a
foreign uid.  Each helper stages the fault and returns its proof (:class:`PathProof`,
:class:`UidProof`, :class:`BufferProof`); one the machine cannot stage raises
:class:`EnvironmentFaultUnavailable` saying why, so a test skips instead of passing.
"""

from __future__ import annotations

from ._environment import (
    BufferProof,
    EnvironmentFaultUnavailable,
    PathProof,
    UidProof,
    as_foreign_uid,
    foreign_owner_dir,
    leave_stale_socket,
    loose_dir,
    regular_file_at,
    stale_socket,
    symlink_at,
    tiny_socket_buffers,
)

__all__ = [
    "BufferProof",
    "EnvironmentFaultUnavailable",
    "PathProof",
    "UidProof",
    "as_foreign_uid",
    "foreign_owner_dir",
    "leave_stale_socket",
    "loose_dir",
    "regular_file_at",
    "stale_socket",
    "symlink_at",
    "tiny_socket_buffers",
]
