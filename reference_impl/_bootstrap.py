"""The bootstrap of wire protocol v1: rank 0 accepts, peers connect.

Both functions return the connected sockets and leave NOTHING behind on
failure: every socket they created is closed, and rank 0's socket file is
unlinked, before the error propagates (close-and-reraise on BaseException).

Rank 0, under ONE init deadline (upstream restarts 120 s per accept, per
handshake read and per probe write):
  1. create/verify the socket directory; replace a stale socket, refuse others;
  2. bind, chmod 0600 at once, listen(world_size - 1);
  3. accept connections in any order; check each peer's uid with SO_PEERCRED;
     read the 4-byte ranks of all of them at once (one poll set, so a silent
     connection cannot delay the verdict on a bad one); refuse bad and
     duplicate ranks; at most 2*(n-1) connections may wait to announce at once
     (more fail the bootstrap, naming them); done when ranks 1..n-1 are all in;
  4. send the probe byte 0x5a to peers 1..n-1 in ascending order.

Peer k:
  1. connect, retrying ENOENT/ECONNREFUSED/EAGAIN/EINTR until the connect
     deadline (rank 0 may not be listening yet); fail fast on anything else --
     EACCES/EPERM included, since a permission problem does not heal by waiting
     (upstream retries it for 120 s and then reports the last strerror);
  2. check the listener's uid with SO_PEERCRED (a rogue rank 0 in the abstract
     namespace or a swapped path is refused);
  3. under the init deadline: send ``struct.pack("=i", k)``, read one byte and
     accept only 0x5a;
  4. a reset (not an orderly close) before the probe means the listener went
     away without accepting us (a previous incarnation): back to step 1.

While rank 0 waits for more peers it also watches the joined ones: a joined
peer that hangs up (or talks before the probe) fails the bootstrap at once,
naming it, instead of at the init deadline.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Final

from ._config import BroadcasterConfig
from ._errors import (
    BroadcastError,
    BroadcastTimeoutError,
    HandshakeError,
    PeerClosedError,
    SecurityError,
    errno_name,
)
from ._framed import DecisionBoard
from ._io import Deadline, Site, recv_exact, send_all
from ._paths import FileId, ensure_private_dir, file_id, prepare_socket_path, unlink_if_same
from ._wire import PROBE, PROBE_BYTE, RANK_SIZE, pack_rank, socket_address, unpack_rank

__all__ = ["Links", "bootstrap_peer", "bootstrap_root", "close_quietly", "path_label"]

_SOCK_FLAGS: Final = socket.SOCK_STREAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK
_UCRED: Final = struct.Struct("3i")  # struct ucred {pid_t pid; uid_t uid; gid_t gid;}
_RETRY_CONNECT: Final = frozenset(
    {errno.ENOENT, errno.ECONNREFUSED, errno.EAGAIN, errno.EINTR, errno.ETIMEDOUT}
)


@dataclass(slots=True)
class Links:
    """What a successful bootstrap holds: sockets by rank, and rank 0's file."""

    peers: list[socket.socket | None] = field(default_factory=list)
    listener: socket.socket | None = None
    socket_path: str | None = None
    socket_id: FileId | None = None
    owner_pid: int | None = None
    # A self-pipe that wakes a broadcast blocked in poll (reset from another
    # thread); -1 when closed, like every other fd here.
    abort_r: int = -1
    abort_w: int = -1
    # The framed wire's shared decision words (None on wire v1), and rank 0's state file
    # while it still exists (only until every peer has mapped it).
    board: DecisionBoard | None = None
    state_path: str | None = None
    state_id: FileId | None = None

    def open_abort_pipe(self) -> None:
        self.abort_r, self.abort_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)

    def request_abort(self) -> None:
        """Make ``abort_r`` readable (never blocks; a full pipe is already readable)."""
        if self.abort_w >= 0:
            with contextlib.suppress(BlockingIOError):
                os.write(self.abort_w, b"!")

    def close(self, *, unlink: bool) -> None:
        """Close every socket/fd (slot set to None / -1) and optionally unlink our file."""
        for fd in (self.abort_r, self.abort_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.abort_r = self.abort_w = -1
        for index, sock in enumerate(self.peers):
            if sock is not None:
                close_quietly(sock)
                self.peers[index] = None
        if self.listener is not None:
            close_quietly(self.listener)
            self.listener = None
        # Unlink only in the process that bound it, and only our own inode:
        # a forked child or a newer group at the same path must keep theirs.
        if unlink and self.socket_path is not None and self.owner_pid == os.getpid():
            unlink_if_same(self.socket_path, self.socket_id)
        if self.board is not None:
            self.board.close()
            self.board = None
        if unlink and self.state_path is not None:
            unlink_if_same(self.state_path, self.state_id)
        self.state_path = None
        self.state_id = None
        self.socket_path = None
        self.socket_id = None
        self.owner_pid = None


def close_quietly(sock: socket.socket) -> None:
    """Close a socket; errors on close tell nothing useful at this point."""
    with contextlib.suppress(OSError):
        sock.close()


def path_label(path: str, *, abstract: bool) -> str:
    """How a socket address appears in messages (``@name`` for abstract, as ss does)."""
    return f"@{path}" if abstract else path


def _peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    pid, uid, gid = _UCRED.unpack(
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    )
    return pid, uid, gid


def _allowed_text(allowed: frozenset[int]) -> str:
    return ", ".join(str(u) for u in sorted(allowed))


def bootstrap_root(
    world_size: int, path: str, config: BroadcasterConfig, *, abstract: bool
) -> Links:
    """Rank 0's half of the bootstrap; returns peers indexed by rank (slot 0 None)."""
    deadline = Deadline(config.init_timeout)
    label = path_label(path, abstract=abstract)
    links = Links(peers=[None] * world_size)
    try:
        if not abstract:
            directory = os.path.dirname(os.path.abspath(path))
            if config.verify_socket_dir:
                ensure_private_dir(directory)
            else:
                os.makedirs(directory, exist_ok=True)
            prepare_socket_path(path)
        listener = socket.socket(socket.AF_UNIX, _SOCK_FLAGS)
        links.listener = listener
        try:
            listener.bind(socket_address(path, abstract=abstract))
        except OSError as exc:
            in_use = exc.errno == errno.EADDRINUSE
            raise (SecurityError if in_use else BroadcastError)(
                "another process holds this socket name; give each group its own session id"
                if in_use
                else f"bind failed: {exc.strerror}",
                rank=0,
                phase="bind",
                path=label,
                errno_name=errno_name(exc.errno),
            ) from exc
        if not abstract:
            links.socket_path = path
            links.socket_id = file_id(path)
            links.owner_pid = os.getpid()
            os.chmod(path, 0o600)  # before listen(): nobody can connect yet
        listener.listen(world_size - 1)
        _accept_peers(links, listener, deadline=deadline, config=config, label=label)
        for peer in range(1, world_size):
            sock = links.peers[peer]
            assert sock is not None
            send_all(
                sock,
                memoryview(PROBE),
                deadline,
                Site(rank=0, peer=peer, phase="probe", path=label, who=f"peer {peer}"),
            )
    except BaseException:
        links.close(unlink=True)
        raise
    return links


_CLOSED_ERRNOS: Final = frozenset({errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.ESHUTDOWN})


@dataclass(slots=True)
class _Pending:
    """An accepted connection whose 4-byte rank announcement is not complete yet."""

    conn: socket.socket
    pid: int
    index: int  # 1-based accept order, as error messages count connections
    raw: bytearray = field(default_factory=lambda: bytearray(RANK_SIZE))
    got: int = 0

    def site(self, label: str) -> Site:
        return Site(
            rank=0,
            peer=None,
            phase="handshake",
            path=label,
            who=f"connection {self.index} (pid {self.pid})",
        )


@dataclass(slots=True)
class _Handshakes:
    """Rank 0's accept + handshake state: ONE poll set over the listener, every
    connection still announcing its rank, and every peer already in.

    Why multiplexed: reading announcements one at a time in accept order (as
    upstream does) lets a connection that never speaks hold up the verdict on
    every later one until the init deadline, and the error then names the silent
    connection rather than the one that announced a bad or duplicate rank.  Here
    each readable connection is read as far as it goes, so a bad announcement
    fails initialize as soon as it arrives, naming its pid and what it sent.  No
    threads: a single ``poll`` under the one init deadline.
    """

    links: Links
    listener: socket.socket
    deadline: Deadline
    label: str
    allowed: frozenset[int] | None
    pending: dict[int, _Pending] = field(default_factory=dict)  # by fd
    pids: dict[int, int] = field(default_factory=dict)  # joined peer rank -> pid
    accepted: int = 0

    @property
    def world_size(self) -> int:
        return len(self.links.peers)

    @property
    def max_pending(self) -> int:
        """How many accepted connections may wait to announce their rank at once.

        Room for every expected peer twice over (a stale or reconnecting incarnation
        next to each live one). Each pending connection holds an fd and a poll slot
        until the init deadline, so without a cap a flood of silent connections (a
        rogue, a runaway launcher) would pin rank 0 at the fd limit instead of failing.
        """
        return 2 * (self.world_size - 1)

    def run(self) -> None:
        """Until every peer is in; pending connections are closed whatever happens
        (once all ranks are in, a still-pending one is surplus and gets no probe)."""
        try:
            while len(self.pids) < self.world_size - 1:
                self._accept_ready()
                self._wait_and_read()
        finally:
            for pending in self.pending.values():
                close_quietly(pending.conn)
            self.pending.clear()

    def _accept_ready(self) -> None:
        """Accept every connection waiting in the backlog and check its uid."""
        while True:
            try:
                conn, _addr = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                raise self._error(
                    BroadcastError, f"accept failed: {exc.strerror}", "accept", exc.errno
                ) from exc
            conn.setblocking(False)
            self.accepted += 1
            try:
                pid = self._check_uid(conn)
                self._check_room(pid)
            except BaseException:
                close_quietly(conn)
                raise
            self.pending[conn.fileno()] = _Pending(conn, pid, self.accepted)

    def _check_room(self, pid: int) -> None:
        """Refuse the connection that would exceed :attr:`max_pending`."""
        if len(self.pending) < self.max_pending:
            return
        waiting = sorted(self.pending.values(), key=lambda p: p.index)
        raise self._error(
            HandshakeError,
            f"too many connections waiting to announce their rank: connection "
            f"{self.accepted} (pid {pid}) would be pending number {len(waiting) + 1}, over "
            f"the cap of {self.max_pending} (2*(world_size-1), world_size "
            f"{self.world_size}); already pending: "
            + ", ".join(
                f"connection {p.index} (pid {p.pid}, {p.got}/{RANK_SIZE} bytes)" for p in waiting
            ),
            "accept",
        )

    def _check_uid(self, conn: socket.socket) -> int:
        pid, uid, _gid = _peer_credentials(conn)
        if self.allowed is not None and uid not in self.allowed:
            raise self._error(
                SecurityError,
                f"rejected a connection from pid {pid} uid {uid}: only uid(s) "
                f"{_allowed_text(self.allowed)} may join (BroadcasterConfig.allowed_uids "
                "widens this)",
                "accept",
            )
        return pid

    def _wait_and_read(self) -> None:
        """One poll over everything; act on what is ready, or fail at the deadline."""
        poller = select.poll()
        poller.register(self.listener.fileno(), select.POLLIN)
        for fd in self.pending:
            poller.register(fd, select.POLLIN)
        watched = {s.fileno(): peer for peer, s in enumerate(self.links.peers) if s is not None}
        for fd in watched:
            poller.register(fd, select.POLLIN)
        timeout = self.deadline.poll_ms()
        ready = poller.poll(timeout) if timeout != 0 else []
        for fd, _events in ready:
            if fd in self.pending:
                self._read(self.pending[fd])
            elif fd in watched:
                peer = watched[fd]
                _fail_on_joined_peer_activity(
                    peer, self.links, self.pids, self.deadline, self.label
                )
        if not ready and self.deadline.expired():
            raise self._timeout()

    def _read(self, pending: _Pending) -> None:
        """Read what ``pending`` has sent so far; judge its rank once all 4 bytes are in."""
        view = memoryview(pending.raw)[pending.got :]
        try:
            n = pending.conn.recv_into(view, len(view))
        except (BlockingIOError, InterruptedError):
            return  # spurious wake-up
        except OSError as exc:
            if exc.errno not in _CLOSED_ERRNOS:
                raise pending.site(self.label).fail(
                    BroadcastError,
                    exc.strerror or str(exc),
                    verb="read from",
                    done=pending.got,
                    total=RANK_SIZE,
                    deadline=self.deadline,
                    code=exc.errno,
                ) from exc
            n = 0
        if n == 0:
            raise HandshakeError(
                f"pid {pending.pid} closed the connection after {pending.got}/{RANK_SIZE} "
                "bytes of its rank handshake",
                rank=0,
                phase="handshake",
                bytes_done=pending.got,
                bytes_total=RANK_SIZE,
                elapsed=self.deadline.elapsed(),
                path=self.label,
            )
        pending.got += n
        if pending.got == RANK_SIZE:
            self._take_slot(pending)

    def _take_slot(self, pending: _Pending) -> None:
        """Check the announced rank; the connection takes that rank's slot."""
        peer = unpack_rank(pending.raw)
        world_size, pid = self.world_size, pending.pid
        if not 0 < peer < world_size:
            raise self._error(
                HandshakeError,
                f"bad peer rank {peer} (world_size {world_size}) from pid {pid}; a peer "
                f"must announce 0 < rank < {world_size}",
                "handshake",
            )
        if self.links.peers[peer] is not None:
            raise self._error(
                HandshakeError,
                f"duplicate peer rank {peer} from pid {pid} (pid {self.pids[peer]} announced "
                "it first)",
                "handshake",
                peer=peer,
            )
        del self.pending[pending.conn.fileno()]
        self.links.peers[peer] = pending.conn
        self.pids[peer] = pid

    def _timeout(self) -> BroadcastError:
        """The deadline passed: blame the first connection still announcing, if any,
        else the ranks that never connected."""
        if self.pending:
            first = min(self.pending.values(), key=lambda p: p.index)
            return first.site(self.label).fail(
                BroadcastTimeoutError,
                f"{self.deadline.describe()} passed (no data from peer)",
                verb="read from",
                done=first.got,
                total=RANK_SIZE,
                deadline=self.deadline,
                code=errno.ETIMEDOUT,
            )
        world_size = self.world_size
        missing = [r for r in range(1, world_size) if r not in self.pids]
        return self._error(
            BroadcastTimeoutError,
            f"{self.deadline.describe()} passed with {len(self.pids)}/{world_size - 1} peers "
            f"connected; missing rank(s) {missing}",
            "accept",
            errno.ETIMEDOUT,
        )

    def _error(
        self,
        cls: type[BroadcastError],
        reason: str,
        phase: str,
        code: int | None = None,
        *,
        peer: int | None = None,
    ) -> BroadcastError:
        return cls(
            reason,
            rank=0,
            peer=peer,
            phase=phase,
            elapsed=self.deadline.elapsed(),
            path=self.label,
            errno_name=errno_name(code),
        )


def _accept_peers(
    links: Links,
    listener: socket.socket,
    *,
    deadline: Deadline,
    config: BroadcasterConfig,
    label: str,
) -> None:
    """Fill ``links.peers[1:]`` by announced rank (see :class:`_Handshakes`)."""
    allowed = config.accepted_uids(os.geteuid())
    _Handshakes(links, listener, deadline, label, allowed).run()


def _fail_on_joined_peer_activity(
    peer: int, links: Links, pids: dict[int, int], deadline: Deadline, label: str
) -> None:
    """A peer that already joined woke rank 0 while it waited for the others: it hung up
    (:class:`PeerClosedError`) or sent bytes out of turn (:class:`HandshakeError`).  A
    wake-up with nothing to read is spurious and returns."""
    sock = links.peers[peer]
    assert sock is not None
    try:
        data = sock.recv(64)
    except (BlockingIOError, InterruptedError):
        return  # spurious wake-up
    except OSError as exc:
        data = b""
        code: int | None = exc.errno
    else:
        code = None
    if not data:
        raise PeerClosedError(
            f"peer {peer} (pid {pids[peer]}) closed the connection while rank 0 waited for "
            "the other peers",
            rank=0,
            peer=peer,
            phase="accept",
            elapsed=deadline.elapsed(),
            path=label,
            errno_name=errno_name(code),
        )
    raise HandshakeError(
        f"peer {peer} (pid {pids[peer]}) sent {len(data)} unexpected byte(s) after its rank, "
        "before the link probe",
        rank=0,
        peer=peer,
        phase="accept",
        elapsed=deadline.elapsed(),
        path=label,
    )


def _connect(
    rank: int, path: str, config: BroadcasterConfig, deadline: Deadline, *, abstract: bool
) -> socket.socket:
    label = path_label(path, abstract=abstract)
    address = socket_address(path, abstract=abstract)
    attempts = 0

    def failure(cls: type[BroadcastError], reason: str, code: int) -> BroadcastError:
        return cls(
            reason,
            rank=rank,
            peer=0,
            phase="connect",
            action="connect to rank 0",
            elapsed=deadline.elapsed(),
            path=label,
            errno_name=errno_name(code),
        )

    while True:
        attempts += 1
        sock = socket.socket(socket.AF_UNIX, _SOCK_FLAGS)
        code = sock.connect_ex(address)
        if code == 0:
            return sock
        close_quietly(sock)
        if code in (errno.EACCES, errno.EPERM):
            raise failure(
                SecurityError,
                "permission denied connecting to rank 0's socket; it or its directory "
                "belongs to another user. Fix this and try again (same user, or a path "
                "you own).",
                code,
            )
        if code not in _RETRY_CONNECT:
            raise failure(BroadcastError, f"connect failed: {os.strerror(code)}", code)
        left = deadline.remaining()
        if left <= 0:
            raise failure(
                BroadcastTimeoutError,
                f"rank 0 was not reachable after {attempts} attempts within "
                f"{deadline.describe()}; last error: {os.strerror(code)}",
                code,
            )
        time.sleep(min(config.connect_retry_interval, left))  # retry interval, not a sync


def bootstrap_peer(
    rank: int, world_size: int, path: str, config: BroadcasterConfig, *, abstract: bool
) -> Links:
    """Peer ``rank``'s half of the bootstrap; returns ``peers[0]`` = link to rank 0.

    A connection reset before any probe byte (ECONNRESET/EPIPE) means the
    listener we reached closed without accepting us -- typically the previous
    incarnation's rank 0 still resetting while this rank re-initializes with the
    same path -- so we connect again while the connect deadline lasts.  An
    orderly close (EOF) after rank 0 accepted us is its verdict: fail at once.
    """
    label = path_label(path, abstract=abstract)
    connect_deadline = Deadline(config.connect_timeout)
    while True:
        sock = _connect(rank, path, config, connect_deadline, abstract=abstract)
        try:
            _handshake_with_root(sock, rank, config, label)
        except PeerClosedError as exc:
            close_quietly(sock)
            never_accepted = exc.errno_name in {"ECONNRESET", "EPIPE"} and not exc.bytes_done
            if never_accepted and connect_deadline.remaining() > 0:
                continue
            raise
        except BaseException:
            close_quietly(sock)
            raise
        links = Links(peers=[None] * world_size)
        links.peers[0] = sock
        return links


def _handshake_with_root(
    sock: socket.socket, rank: int, config: BroadcasterConfig, label: str
) -> None:
    """Credentials, rank handshake and probe on a fresh connection to rank 0."""
    deadline = Deadline(config.init_timeout)
    allowed = config.accepted_uids(os.geteuid())
    pid, uid, _gid = _peer_credentials(sock)
    if allowed is not None and uid not in allowed:
        raise SecurityError(
            f"the process listening on rank 0's socket (pid {pid} uid {uid}) is not an "
            f"allowed uid ({_allowed_text(allowed)}); refusing to join",
            rank=rank,
            peer=0,
            phase="connect",
            action="connect to rank 0",
            path=label,
        )
    send_all(
        sock,
        memoryview(pack_rank(rank)),
        deadline,
        Site(rank=rank, peer=0, phase="handshake", path=label, who="rank 0"),
    )
    probe = bytearray(1)
    try:
        recv_exact(
            sock,
            memoryview(probe),
            deadline,
            Site(rank=rank, peer=0, phase="probe", path=label, who="rank 0"),
        )
    except PeerClosedError as exc:
        raise PeerClosedError(
            "rank 0 closed the connection before sending the link probe (it may have "
            "rejected this rank or failed; see rank 0's error)",
            **{**exc.fields(), "action": None},
        ) from exc
    if probe[0] != PROBE_BYTE:
        raise HandshakeError(
            f"bad link probe byte: expected 0x{PROBE_BYTE:02x}, got 0x{probe[0]:02x}",
            rank=rank,
            peer=0,
            phase="probe",
            elapsed=deadline.elapsed(),
            path=label,
        )
