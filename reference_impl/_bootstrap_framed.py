"""The framed wire's bootstrap: wire v1's, plus the shared state file every rank maps.

Rank 0 (wire doc §3 steps 0, 6, 7): before anything listens, it creates ``<base>.state``
exclusively (0600, 8 bytes, ours) and maps it; after the v1 bootstrap it reads the byte
0x6a from each peer in ascending order (each peer has mapped the file), then unlinks the
file: from then on it exists only as the mappings of the group.

Peer k (step 5, 6): after the v1 bootstrap (the probe says rank 0 created the file), it
opens the file without following a symlink, refuses anything but a regular 8-byte 0600
file of its euid, maps it and sends 0x6a.

Failure leaves nothing: the links are closed and rank 0's file is unlinked (only if it is
still the inode rank 0 created).  One init deadline covers the whole bootstrap, including
these steps, as in wire v1 here (upstream restarts 120 s per step).
"""

from __future__ import annotations

import contextlib
import os
import socket

from ._bootstrap import Links, bootstrap_peer, bootstrap_root, path_label
from ._config import BroadcasterConfig
from ._errors import HandshakeError, PeerClosedError
from ._framed import STATE_READY, DecisionBoard, state_path
from ._io import Deadline, Site, recv_exact, send_all
from ._paths import ensure_private_dir, file_id, prepare_socket_path, unlink_if_same

__all__ = ["framed_bootstrap_peer", "framed_bootstrap_root"]


def framed_bootstrap_root(
    world_size: int, base_path: str, path: str, config: BroadcasterConfig, *, abstract: bool
) -> Links:
    deadline = Deadline(config.init_timeout)
    state = state_path(base_path)
    directory = os.path.dirname(os.path.abspath(state))
    if config.verify_socket_dir:
        ensure_private_dir(directory)
    else:
        os.makedirs(directory, exist_ok=True)
    if not abstract:
        # Refuses a live group at this base path before we touch its state file; a file
        # left by a dead group is stale and goes.
        prepare_socket_path(path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(state)
    board = DecisionBoard.create(state, rank=0)
    ident = file_id(state)
    try:
        links = bootstrap_root(world_size, path, config, abstract=abstract)
    except BaseException:
        board.close()
        unlink_if_same(state, ident)
        raise
    links.board = board
    links.state_path, links.state_id = state, ident
    try:
        label = path_label(path, abstract=abstract)
        for peer in range(1, world_size):
            sock = links.peers[peer]
            assert sock is not None
            _expect_token(sock, deadline, Site(0, peer, "state", label, f"peer {peer}"), 0)
        unlink_if_same(state, ident)
        links.state_path = links.state_id = None
    except BaseException:
        links.close(unlink=True)
        raise
    return links


def framed_bootstrap_peer(
    rank: int,
    world_size: int,
    base_path: str,
    path: str,
    config: BroadcasterConfig,
    *,
    abstract: bool,
) -> Links:
    links = bootstrap_peer(rank, world_size, path, config, abstract=abstract)
    try:
        links.board = DecisionBoard.open(state_path(base_path), rank=rank)
        sock = links.peers[0]
        assert sock is not None
        send_all(
            sock,
            memoryview(bytes([STATE_READY])),
            Deadline(config.init_timeout),
            Site(rank, 0, "state", path_label(path, abstract=abstract), "rank 0"),
        )
    except BaseException:
        links.close(unlink=False)
        raise
    return links


def _expect_token(sock: socket.socket, deadline: Deadline, site: Site, rank: int) -> None:
    got = bytearray(1)
    try:
        recv_exact(sock, memoryview(got), deadline, site)
    except PeerClosedError as exc:
        raise PeerClosedError(
            f"{site.who} closed the connection instead of confirming it mapped the shared "
            "state file (a wire-v1 peer, or it failed; see its error)",
            **{**exc.fields(), "action": None},
        ) from exc
    if got[0] != STATE_READY:
        raise HandshakeError(
            f"{site.who} sent 0x{got[0]:02x} where the state-ready byte "
            f"0x{STATE_READY:02x} belongs",
            rank=rank,
            peer=site.peer,
            phase="state",
            elapsed=deadline.elapsed(),
            path=site.path,
        )
