"""A TCP fan-out broadcaster (transport ``tcp``), written for the suite from scratch.

The correct member of the ``tcp`` mutant family: ``tools/mutants.py`` judges it as a
baseline (no MUST FAIL/ERROR; every ``uds-v1``/``shm`` clause NOT_APPLICABLE) and the
``m_tcp_*`` mutants each break one behaviour of it.  It shares no code with the reference,
the shared-memory ring, gloo or torch's TCPStore.

Topology.  A star: rank 0 listens, every peer connects to it.  With an endpoint
(``set_endpoint(host, port, local_host)``) rank 0 listens on exactly ``host:port`` (never
the wildcard address) and each peer binds its socket to ``local_host`` before it connects,
so every packet of the group uses the addresses it was given.  Without one, rank 0 listens
on 127.0.0.1 at a port the kernel picks and publishes ``{host, port, nonce}`` in
``<base_path>.tcp`` (0600, written to a temporary file and renamed), which it removes once
every peer is in.  The listener stays open while the group is initialized (as a rendezvous
store's does), so what it accepts after the bootstrap is judged too: each broadcast of
rank 0 first accepts and closes whatever connected since.

Handshake.  A peer sends 24 bytes: magic ``tpbtcp01``, its rank, the world size and an
8-byte group key (the file's nonce; with an endpoint, a hash of the base path and world
size, which every rank computes alike).  Rank 0 answers one byte: ``Y`` (a member now),
``S`` (another group's key: a stale rendezvous file, the peer looks again) or ``N`` (a rank
out of range, a duplicate, another world size: the peer raises at once).  Anything that is
not a hello (garbage, silence, a connection closed early) is closed without an answer.
Rank 0 multiplexes its listener, the hellos in progress and the members already in with
``poll``, so a stranger never delays a member; a member that closes during the bootstrap
fails it at once, naming the rank.  Once every peer is in, rank 0 sends each the byte
``0x5a``: a peer's ``initialize`` returns only then (a barrier, as wire v1's probe).

Broadcast.  Rank 0 sends each peer, in rank order, an 8-byte length and the payload, then
reads one acknowledgement byte from each, checks that no peer has closed since, and only
then sends each the commit byte; a peer returns only on the commit.  So rank 0 buffers no
broadcast for a peer that reads nothing (``buffered_broadcasts = 0``), and a broadcast one
rank fails (a peer killed, stopped past a deadline) fails on every rank: the others see
its connections close, never a commit.  What this cannot make atomic is the commit itself:
a rank 0 that dies between two peers' commit bytes, or a peer whose deadline passes just
after rank 0 looked, leaves one peer returned and one raised (the framed wire's shared
decision word has no TCP counterpart).  A peer whose expected length differs raises and
closes.  A zero-byte broadcast moves nothing.  A failed broadcast closes every connection
at once (the others fail promptly) and leaves the instance broken until ``reset``.

Liveness.  A process that dies has its kernel close its connections: the others see EOF or
a reset in milliseconds.  A host that vanishes sends nothing at all, so every connection
has TCP keepalive (idle :data:`KEEPIDLE` s, a probe every :data:`KEEPINTVL` s,
:data:`KEEPCNT` probes) for a peer waiting on a silent root, and ``TCP_USER_TIMEOUT``
(:data:`USER_TIMEOUT_MS`) for rank 0's unacknowledged bytes, where keepalive does not
probe: either way the kernel ends the connection with ETIMEDOUT within about
``USER_TIMEOUT_MS``, well inside TCP-4's 10 s.  A process that is alive but stopped keeps
answering at the TCP level: the I/O deadline ends that wait.

Every wait polls in slices of :data:`SLICE` s against its deadline and the ``reset()``
flag, so ``reset`` from another thread ends a blocked call promptly, then closes the
sockets only once that call has let go of them.  Python's sockets and the rendezvous file
are close-on-exec.  One broadcast at a time: a second concurrent call is refused.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import hashlib
import ipaddress
import json
import math
import os
import secrets
import select
import socket
import struct
import threading
import time
import weakref
from collections.abc import Mapping
from typing import Any, Final

DEFAULTS: Final[Mapping[str, float | None]] = {"connect": 60.0, "init": 60.0, "io": 300.0}
LOOPBACK: Final = "127.0.0.1"
BACKLOG: Final = 64
KEEPIDLE: Final = 2
KEEPINTVL: Final = 1
KEEPCNT: Final = 3
USER_TIMEOUT_MS: Final = 5000
SLICE: Final = 0.05
MAGIC: Final = b"tpbtcp01"
_HELLO: Final = struct.Struct("!8sII8s")  # magic, rank, world size, group key
_LENGTH: Final = struct.Struct("!Q")
ACCEPTED, STALE, REFUSED = b"Y", b"S", b"N"
GO: Final = b"\x5a"
ACK: Final = b"\x06"
COMMIT: Final = b"\x07"
# A peer's connect fails with these while rank 0 is not (yet) listening: it tries again.
_RETRY: Final = frozenset(
    {errno.ECONNREFUSED, errno.ECONNRESET, errno.ETIMEDOUT, errno.EHOSTUNREACH}
    | {errno.ENETUNREACH, errno.EAGAIN, errno.EINTR}
)


class TcpError(Exception):
    """Every error of this broadcaster; carries rank/peer/phase/bytes/errno attributes."""

    def __init__(
        self,
        message: str,
        *,
        rank: int | None = None,
        peer: int | None = None,
        phase: str = "",
        address: str | None = None,
        bytes_done: int | None = None,
        bytes_total: int | None = None,
        elapsed: float | None = None,
        errno_name: str | None = None,
        path: str | None = None,
    ) -> None:
        super().__init__(message)
        self.rank = rank
        self.peer = peer
        self.phase = phase
        self.address = address
        self.bytes_done = bytes_done
        self.bytes_total = bytes_total
        self.elapsed = elapsed
        self.errno_name = errno_name
        self.path = path


class TcpConfigurationError(TcpError, ValueError):
    """Bad arguments, or a group that does not match this rank's."""


class TcpNotInitializedError(TcpError, RuntimeError):
    """broadcast before initialize / after reset."""


class TcpReinitMismatchError(TcpError, RuntimeError):
    """initialize again with other values."""


class TcpBrokenError(TcpError, RuntimeError):
    """A previous broadcast failed; reset first."""


class TcpBusyError(TcpError, RuntimeError):
    """A broadcast started while another call holds the instance."""


class TcpTimeoutError(TcpError, TimeoutError):
    """A deadline passed."""


class TcpPeerClosedError(TcpError, ConnectionError):
    """The other side closed, reset, or its host stopped answering."""


def _errno_name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, str(exc.errno))


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET


def _endpoint_key(base_path: str, world_size: int) -> bytes:
    """The group key with an endpoint: the same on every rank, another group's differs."""
    return hashlib.sha256(f"{base_path}\0{world_size}".encode()).digest()[:8]


def rendezvous_path(base_path: str) -> str:
    """Where rank 0 publishes its loopback port when no endpoint was set."""
    return base_path + ".tcp"


class _Link:
    """A member's connection, as rank 0 or a peer sees it."""

    def __init__(self, sock: socket.socket, peer: int, address: str) -> None:
        self.sock = sock
        self.peer = peer
        self.address = address


_LIVE: weakref.WeakSet[TcpFanoutBroadcaster] = weakref.WeakSet()


def _reset_all_at_exit() -> None:
    for bcast in list(_LIVE):
        with contextlib.suppress(Exception):  # best effort at interpreter exit
            bcast.reset()


atexit.register(_reset_all_at_exit)


class TcpFanoutBroadcaster:
    """The adapter-contract object (DESIGN.md): one group membership at a time."""

    name = "tpbcast-tcp-fanout"
    version = "1"
    transport = "tcp"
    buffered_broadcasts = 0  # rank 0 returns only once every peer acknowledged
    capabilities: frozenset[str] = frozenset(
        {"deadlines", "generation", "multi_buffer", "endpoint", "error_details"}
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closing = False
        self._deadlines: dict[str, float | None] = dict(DEFAULTS)
        self._endpoint: tuple[str, int, str] | None = None
        self._generation = 0
        self._rank, self._world_size, self._base_path = -1, 0, ""
        self._initialized = False
        self._broken: str | None = None
        self._listener: socket.socket | None = None
        self._links: list[_Link] = []
        self._pending: dict[socket.socket, tuple[bytearray, str]] = {}
        self._published: tuple[str, int, int] | None = None  # path, st_dev, st_ino
        _LIVE.add(self)

    # ------------------------------------------------------------------ contract extras

    def set_deadlines(
        self, *, connect: float | None = None, init: float | None = None, io: float | None = None
    ) -> None:
        """Seconds; None keeps a value; ``math.inf`` disables the I/O deadline."""
        for key, value in (("connect", connect), ("init", init), ("io", io)):
            if value is None:
                continue
            if value <= 0 or (value == math.inf and key != "io"):
                raise TcpConfigurationError(f"{key} deadline must be positive, got {value!r}")
            self._deadlines[key] = None if value == math.inf else float(value)

    def default_deadlines(self) -> Mapping[str, float | None]:
        return dict(DEFAULTS)

    def set_endpoint(self, host: str, port: int, local_host: str | None = None) -> None:
        """Rank 0 listens on ``host:port``; this rank's sockets use ``local_host``."""
        local = host if local_host is None else local_host
        try:
            if _family(host) != _family(local):
                raise ValueError(f"{host} and {local} are not of one address family")
        except ValueError as exc:
            raise TcpConfigurationError(f"set_endpoint: {exc}") from None
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise TcpConfigurationError(f"set_endpoint: port must be in 1..65535, got {port!r}")
        self._endpoint = (host, port, local)

    @property
    def generation(self) -> int:
        return self._generation

    def is_initialized(self) -> bool:
        return self._initialized

    # ------------------------------------------------------------------ one-line hooks
    # (each the single place a mutant of tests/mutants/m_tcp_*.py changes)

    def _bind_address(self, host: str) -> str:
        """The address rank 0's listener binds: the one it was given."""
        return host

    def _tune_liveness(self, sock: socket.socket) -> None:
        """Make the kernel end a connection whose other host stopped answering."""
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPIDLE)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, KEEPINTVL)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, KEEPCNT)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, USER_TIMEOUT_MS)

    def _tune(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._tune_liveness(sock)

    # ------------------------------------------------------------------ initialize

    def initialize(self, rank: int, world_size: int, base_path: str) -> None:
        _check_arguments(rank, world_size, base_path)
        with self._lock:
            if self._initialized:
                if (rank, world_size, base_path) == (
                    self._rank,
                    self._world_size,
                    self._base_path,
                ):
                    return
                raise TcpReinitMismatchError(
                    f"re-init mismatch: was rank={self._rank} world_size={self._world_size} "
                    f"base_path={self._base_path!r}, now rank={rank} world_size={world_size} "
                    f"base_path={base_path!r}; call reset() first",
                    rank=self._rank,
                    phase="initialize",
                )
            self._closing = False
            self._broken = None
            self._rank, self._world_size, self._base_path = rank, world_size, base_path
            if world_size > 1:
                try:
                    if rank == 0:
                        self._serve(world_size, base_path)
                    else:
                        self._join(rank, world_size, base_path)
                except BaseException:
                    self._teardown()
                    raise
            self._initialized = True

    def _fail(
        self, cls: type[TcpError], what: str, phase: str, start: float, **attrs: Any
    ) -> TcpError:
        """An error naming this rank, the phase and what happened."""
        elapsed = time.monotonic() - start
        return cls(
            f"rank {self._rank}: {phase} failed: {what} (after {elapsed:.3f}s)",
            rank=self._rank,
            phase=phase,
            elapsed=elapsed,
            **attrs,
        )

    def _serve(self, world_size: int, base_path: str) -> None:
        """Rank 0's bootstrap: listen, take a hello from every peer, then send GO."""
        start = time.monotonic()
        deadline = _deadline(self._deadlines["init"])
        listener, where = self._listen(start)
        if self._endpoint:
            key = _endpoint_key(base_path, world_size)
        else:
            key = secrets.token_bytes(8)
            self._publish(base_path, listener.getsockname()[1], key)
        members: dict[int, _Link] = {}
        while len(members) < world_size - 1:
            missing = [r for r in range(1, world_size) if r not in members]
            if self._closing:
                raise self._fail(
                    TcpPeerClosedError, "ended by reset() (closed)", "initialize", start
                )
            if time.monotonic() >= deadline:
                raise self._fail(
                    TcpTimeoutError,
                    f"init deadline ({self._deadlines['init']}s) passed waiting for peer "
                    f"rank(s) {missing} to connect to {where}",
                    "initialize",
                    start,
                    peer=missing[0],
                    address=where,
                )
            poller = select.poll()
            for sock in (listener, *self._pending, *(m.sock for m in members.values())):
                poller.register(sock, select.POLLIN)
            ready = {fd for fd, _ev in poller.poll(_slice_ms(deadline))}
            for link in members.values():
                if link.sock.fileno() in ready:  # a member says nothing before GO: it left
                    raise self._fail(
                        TcpPeerClosedError,
                        f"peer {link.peer} at {link.address} closed its connection during the "
                        f"bootstrap (closed); still waiting for peer rank(s) {missing}",
                        "initialize",
                        start,
                        peer=link.peer,
                        address=link.address,
                    )
            for sock in [s for s in self._pending if s.fileno() in ready]:
                joined = self._read_hello(sock, world_size, key, members)
                if joined is not None:
                    members[joined.peer] = joined
            if listener.fileno() in ready:
                self._accept_strangers(keep=True)
        self._links = [members[r] for r in sorted(members)]
        self._drop_pending()
        for link in self._links:
            self._send(link, memoryview(GO), deadline, "initialize", (0, 0, start))
        self._unpublish()

    def _listen(self, start: float) -> tuple[socket.socket, str]:
        """Rank 0's listener on the endpoint (SO_REUSEADDR: a re-init on the same port does
        not wait out the previous group's TIME_WAIT), else on loopback at a free port."""
        host, port = (self._endpoint[0], self._endpoint[1]) if self._endpoint else (LOOPBACK, 0)
        listener = socket.socket(_family(host), socket.SOCK_STREAM)
        self._listener = listener
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        where = f"{self._bind_address(host)}:{port}"
        try:
            listener.bind((self._bind_address(host), port))
            listener.listen(BACKLOG)
        except OSError as exc:
            raise self._fail(
                TcpConfigurationError,
                f"cannot listen on {where}: {_errno_name(exc)} ({exc.strerror})",
                "initialize",
                start,
                address=where,
                errno_name=_errno_name(exc),
            ) from None
        listener.setblocking(False)
        return listener, f"{self._bind_address(host)}:{listener.getsockname()[1]}"

    def _accept_strangers(self, *, keep: bool) -> None:
        """Accept what is waiting at the listener: keep it for a hello (bootstrap), or close
        it at once (after the bootstrap: the group is complete, nobody else belongs)."""
        assert self._listener is not None
        while True:
            try:
                sock, addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # ECONNABORTED and the like: that caller is gone already
                continue
            if not keep:
                sock.close()
                continue
            try:
                self._tune(sock)
            except OSError:
                sock.close()
                continue
            self._pending[sock] = (bytearray(), f"{addr[0]}:{addr[1]}")

    def _read_hello(
        self, sock: socket.socket, world_size: int, key: bytes, members: Mapping[int, _Link]
    ) -> _Link | None:
        """Read more of a hello; a complete valid one makes a member, anything else is
        answered (a hello of another group or rank) or closed (not a hello at all)."""
        got, address = self._pending[sock]
        try:
            chunk = sock.recv(_HELLO.size - len(got))
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            chunk = b""
        if not chunk or not MAGIC.startswith(bytes(got + chunk)[: len(MAGIC)]):
            self._close_pending(sock)  # closed early, or garbage: no answer
            return None
        got += chunk
        if len(got) < _HELLO.size:
            return None
        _magic, rank, world, their_key = _HELLO.unpack(got)
        answer = ACCEPTED
        if their_key != key:
            answer = STALE
        elif world != world_size or not 0 < rank < world_size or rank in members:
            answer = REFUSED
        try:
            sock.send(answer, socket.MSG_NOSIGNAL)
        except OSError:
            answer = b""
        if answer != ACCEPTED:
            self._close_pending(sock)
            return None
        del self._pending[sock]
        return _Link(sock, rank, address)

    def _close_pending(self, sock: socket.socket) -> None:
        self._pending.pop(sock, None)
        sock.close()

    def _drop_pending(self) -> None:
        for sock in list(self._pending):
            self._close_pending(sock)

    def _publish(self, base_path: str, port: int, key: bytes) -> None:
        path = rendezvous_path(base_path)
        record = {"host": LOOPBACK, "port": port, "key": key.hex(), "pid": os.getpid()}
        tmp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o600)
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(record, fh)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        st = os.lstat(path)
        self._published = (path, st.st_dev, st.st_ino)

    def _unpublish(self) -> None:
        """Remove the rendezvous file if it is still the one this rank wrote."""
        published, self._published = self._published, None
        if published is None:
            return
        path, dev, ino = published
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(path)
            if (st.st_dev, st.st_ino) == (dev, ino):
                os.unlink(path)

    def _join(self, rank: int, world_size: int, base_path: str) -> None:
        """A peer's bootstrap: connect and be accepted (connect deadline), then wait for GO
        (init deadline)."""
        start = time.monotonic()
        deadline = _deadline(self._deadlines["connect"])
        backoff = 0.005
        while True:
            if self._closing:
                raise self._fail(TcpPeerClosedError, "ended by reset() (closed)", "connect", start)
            target, why = self._target(base_path, world_size)
            if target is not None:
                tried = self._try_member(target, rank, world_size, (deadline, start))
                if isinstance(tried, _Link):
                    link = tried
                    break
                why = tried
            if time.monotonic() >= deadline:
                raise self._fail(
                    TcpTimeoutError,
                    f"connect deadline ({self._deadlines['connect']}s) passed: {why}",
                    "connect",
                    start,
                    peer=0,
                    address=None if target is None else f"{target[0]}:{target[1]}",
                )
            time.sleep(min(backoff, max(0.0, deadline - time.monotonic())))
            backoff = min(backoff * 2, 0.1)
        self._links = [link]
        got = bytearray(1)
        init = _deadline(self._deadlines["init"])
        self._recv(link, memoryview(got), init, "initialize", (0, 1, start))
        if bytes(got) != GO:
            raise self._fail(
                TcpConfigurationError,
                f"rank 0 at {link.address} sent {bytes(got)!r} instead of the GO byte",
                "initialize",
                start,
                peer=0,
                address=link.address,
            )

    def _target(self, base_path: str, world_size: int) -> tuple[tuple[str, int, bytes] | None, str]:
        """Rank 0's address and the group key: the endpoint, or the rendezvous file."""
        if self._endpoint:
            host, port, _local = self._endpoint
            return (host, port, _endpoint_key(base_path, world_size)), ""
        path = rendezvous_path(base_path)
        try:
            with open(path) as fh:
                record = json.load(fh)
            return (str(record["host"]), int(record["port"]), bytes.fromhex(record["key"])), ""
        except FileNotFoundError:
            return None, f"no rendezvous file {path}"
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return None, f"unreadable rendezvous file {path} ({exc})"

    def _try_member(
        self,
        target: tuple[str, int, bytes],
        rank: int,
        world_size: int,
        when: tuple[float, float],
    ) -> _Link | str:
        """One attempt to join before the connect deadline (``when``: deadline, start):
        the member's link, or why to try again.  A refusal waiting cannot fix raises."""
        host, port, key = target
        deadline, start = when
        where = f"{host}:{port}"
        sock = socket.socket(_family(host), socket.SOCK_STREAM)
        link = _Link(sock, 0, where)
        try:
            self._tune(sock)
            if self._endpoint:
                sock.bind((self._endpoint[2], 0))
            code = sock.connect_ex((host, port))
            if code == errno.EINPROGRESS:
                self._wait(link, select.POLLOUT, deadline)
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if code:
                if code in _RETRY:
                    sock.close()
                    return f"connecting to rank 0 at {where}: {errno.errorcode.get(code, code)}"
                raise OSError(code, os.strerror(code))
            hello = _HELLO.pack(MAGIC, rank, world_size, key)
            self._send(link, memoryview(hello), deadline, "connect", (0, len(hello), start))
            answer = bytearray(1)
            self._recv(link, memoryview(answer), deadline, "connect", (0, 1, start))
        except TcpError as exc:  # closed, reset() or the deadline: the caller's loop decides
            sock.close()
            return f"handshake with rank 0 at {where}: {exc}"
        except OSError as exc:
            sock.close()
            raise self._fail(
                TcpConfigurationError,
                f"cannot connect to rank 0 at {where}: {_errno_name(exc)} ({exc.strerror})",
                "connect",
                start,
                peer=0,
                address=where,
                errno_name=_errno_name(exc),
            ) from None
        if bytes(answer) == ACCEPTED:
            return link
        sock.close()
        if bytes(answer) == STALE:
            return f"rank 0 at {where} serves another group (stale rendezvous)"
        raise self._fail(
            TcpConfigurationError,
            f"rank 0 at {where} refused rank {rank} of {world_size} (out of range, taken, or "
            "another world size)",
            "connect",
            start,
            peer=0,
            address=where,
        )

    # ------------------------------------------------------------------ deadline-bound I/O

    def _wait(self, link: _Link, events: int, deadline: float) -> None:
        """Until ``link`` is ready for ``events`` (or has an error for the next call to
        report), ``reset()`` is called, or ``deadline`` passes (raising)."""
        poller = select.poll()
        poller.register(link.sock, events)
        while True:
            if self._closing:
                raise TcpPeerClosedError("ended by reset() (closed)")
            if time.monotonic() >= deadline:
                raise TcpTimeoutError("deadline")
            if poller.poll(_slice_ms(deadline)):
                return

    def _send(
        self,
        link: _Link,
        data: memoryview,
        deadline: float,
        phase: str,
        progress: tuple[int, int, float],
    ) -> None:
        """All of ``data`` to ``link``; ``progress`` is (bytes done before, total, start)."""
        sent = 0
        while sent < len(data):
            try:
                sent += link.sock.send(data[sent:], socket.MSG_NOSIGNAL)
                continue
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as exc:
                raise self._io_error(link, exc, phase, progress[0] + sent, progress) from None
            try:
                self._wait(link, select.POLLOUT, deadline)
            except TcpError as exc:
                raise self._io_error(link, exc, phase, progress[0] + sent, progress) from None

    def _recv(
        self,
        link: _Link,
        view: memoryview,
        deadline: float,
        phase: str,
        progress: tuple[int, int, float],
    ) -> None:
        """Fill ``view`` from ``link``; ``progress`` is (bytes done before, total, start)."""
        got = 0
        while got < len(view):
            try:
                n = link.sock.recv_into(view[got:])
            except (BlockingIOError, InterruptedError):
                try:
                    self._wait(link, select.POLLIN, deadline)
                except TcpError as exc:
                    raise self._io_error(link, exc, phase, progress[0] + got, progress) from None
                continue
            except OSError as exc:
                raise self._io_error(link, exc, phase, progress[0] + got, progress) from None
            if n == 0:
                raise self._io_error(link, None, phase, progress[0] + got, progress)
            got += n

    def _io_error(
        self,
        link: _Link,
        exc: OSError | TcpError | None,
        phase: str,
        done: int,
        progress: tuple[int, int, float],
    ) -> TcpError:
        """What went wrong on ``link``, naming rank, peer, address, bytes and errno."""
        _before, total, start = progress
        name = None
        cls: type[TcpError] = TcpPeerClosedError
        if exc is None:
            what = "connection closed by the other side (closed, EOF)"
        elif isinstance(exc, TcpTimeoutError):
            cls, what = TcpTimeoutError, f"{phase} deadline passed"
            if phase == "broadcast":
                what = f"I/O deadline ({self._deadlines['io']}s) passed"
        elif isinstance(exc, TcpError):
            what = str(exc)
        else:
            name = _errno_name(exc)
            what = f"connection lost ({name}: {exc.strerror})"
            if exc.errno == errno.ETIMEDOUT:
                what += " - its host stopped answering (keepalive / TCP_USER_TIMEOUT)"
        who = f"peer {link.peer}" if self._rank == 0 else "rank 0"
        return self._fail(
            cls,
            f"{who} at {link.address}: {what}; {done} of {total} bytes done",
            phase,
            start,
            peer=link.peer,
            address=link.address,
            bytes_done=done,
            bytes_total=total,
            errno_name=name,
        )

    # ------------------------------------------------------------------ broadcast

    def broadcast(self, buffer: Any, root: int = 0) -> None:
        # One call at a time, refused rather than queued: a second broadcast waiting behind
        # a stalled one would only add a second stalled caller.
        if not self._lock.acquire(blocking=False):
            raise TcpBusyError(
                f"rank {self._rank}: another call (broadcast, initialize or reset) is in "
                "flight on this instance; one broadcast at a time",
                rank=self._rank,
                phase="broadcast",
            )
        try:
            self._broadcast_locked(buffer, root)
        finally:
            self._lock.release()

    def _broadcast_locked(self, buffer: Any, root: int) -> None:
        if isinstance(buffer, list | tuple):
            self._broadcast_list(list(buffer), root)
            return
        if not self._initialized:
            raise TcpNotInitializedError(
                "broadcast before initialize (or after reset)", phase="broadcast"
            )
        if self._broken is not None:
            raise TcpBrokenError(
                f"rank {self._rank}: broadcaster is broken by an earlier failure "
                f"({self._broken}); call reset()",
                rank=self._rank,
                phase="broadcast",
            )
        if isinstance(root, bool) or root != 0:
            raise TcpConfigurationError(
                f"root must be 0 (rank 0 is the only sender), got {root!r}",
                rank=self._rank,
                phase="broadcast",
            )
        view = _flat(buffer, writable=self._rank != 0)
        if self._world_size == 1 or view.nbytes == 0:
            return
        try:
            if self._rank == 0:
                self._fan_out(view)
            else:
                self._take(view)
        except TcpError as exc:
            self._broken = str(exc)
            self._close_sockets()  # the other ranks see the failure at once
            raise

    def _broadcast_list(self, buffers: list[Any], root: int) -> None:
        """Several buffers back to back as one payload (capability ``multi_buffer``); every
        buffer is checked before a byte moves, and a peer's are filled only once the whole
        payload has arrived."""
        views = [_flat(b, writable=self._rank != 0) for b in buffers]
        if self._rank == 0:
            self._broadcast_locked(b"".join(v.tobytes() for v in views), root)
            return
        joined = bytearray(sum(v.nbytes for v in views))
        self._broadcast_locked(joined, root)
        done = 0
        for view in views:
            view[:] = joined[done : done + view.nbytes]
            done += view.nbytes

    def _fan_out(self, view: memoryview) -> None:
        total = view.nbytes
        start = time.monotonic()
        deadline = _deadline(self._deadlines["io"])
        self._accept_strangers(keep=False)
        header = memoryview(_LENGTH.pack(total))
        for link in self._links:
            self._send(link, header, deadline, "broadcast", (0, total, start))
            self._send(link, view, deadline, "broadcast", (0, total, start))
        for link in self._links:
            ack = bytearray(1)  # the payload went out whole: only this is missing
            self._recv(link, memoryview(ack), deadline, "broadcast", (total, total, start))
            if bytes(ack) != ACK:
                raise self._fail(
                    TcpConfigurationError,
                    f"peer {link.peer} at {link.address} answered {bytes(ack)!r}, not the "
                    f"acknowledgement; {total} of {total} bytes done",
                    "broadcast",
                    start,
                    peer=link.peer,
                    address=link.address,
                    bytes_done=total,
                    bytes_total=total,
                )
        for link in self._links:  # a peer that gave up after acknowledging has closed by now
            if _spoke(link.sock):
                raise self._io_error(link, None, "broadcast", total, (total, total, start))
        for link in self._links:
            self._send(link, memoryview(COMMIT), deadline, "broadcast", (total, total, start))

    def _take(self, view: memoryview) -> None:
        total = view.nbytes
        start = time.monotonic()
        deadline = _deadline(self._deadlines["io"])
        link = self._links[0]
        header = bytearray(_LENGTH.size)
        self._recv(link, memoryview(header), deadline, "broadcast", (0, total, start))
        (sent,) = _LENGTH.unpack(header)
        if sent != total:
            raise self._fail(
                TcpConfigurationError,
                f"size mismatch: rank 0 at {link.address} broadcasts {sent} bytes, this rank "
                f"expects {total}; 0 of {total} bytes done",
                "broadcast",
                start,
                peer=0,
                address=link.address,
                bytes_done=0,
                bytes_total=total,
            )
        self._recv(link, view, deadline, "broadcast", (0, total, start))
        self._send(link, memoryview(ACK), deadline, "broadcast", (total, total, start))
        commit = bytearray(1)
        self._recv(link, memoryview(commit), deadline, "broadcast", (total, total, start))
        if bytes(commit) != COMMIT:
            raise self._fail(
                TcpConfigurationError,
                f"rank 0 at {link.address} sent {bytes(commit)!r}, not the commit; "
                f"{total} of {total} bytes done",
                "broadcast",
                start,
                peer=0,
                address=link.address,
                bytes_done=total,
                bytes_total=total,
            )

    # ------------------------------------------------------------------ reset

    def reset(self) -> None:
        self._closing = True  # a call blocked in another thread ends at its next poll slice
        with self._lock:
            self._teardown()
            self._initialized = False
            self._broken = None
            self._closing = False
            self._generation += 1

    def _close_sockets(self) -> None:
        for link in self._links:
            link.sock.close()
        self._links = []
        self._drop_pending()
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def _teardown(self) -> None:
        try:
            self._close_sockets()
        finally:
            self._unpublish()
        self._rank, self._world_size, self._base_path = -1, 0, ""


def _check_arguments(rank: object, world_size: object, base_path: object) -> None:
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise TcpConfigurationError(f"world_size must be an int >= 1, got {world_size!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise TcpConfigurationError(
            f"rank must be in [0, {world_size}), got {rank!r}", phase="initialize"
        )
    if not isinstance(base_path, str) or not base_path or "\0" in base_path:
        raise TcpConfigurationError(f"base_path must be a non-empty path, got {base_path!r}")


def _spoke(sock: socket.socket) -> bool:
    """Whether the other side closed (or sent something out of turn): readable now."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def _deadline(seconds: float | None) -> float:
    return math.inf if seconds is None else time.monotonic() + seconds


def _slice_ms(deadline: float) -> int:
    """One poll slice in milliseconds: at most :data:`SLICE`, never past ``deadline``."""
    return max(0, math.ceil(min(SLICE, deadline - time.monotonic()) * 1000))


def _flat(buffer: Any, *, writable: bool) -> memoryview:
    try:
        view = memoryview(buffer)
    except TypeError as exc:
        raise TcpConfigurationError(f"not a buffer: {type(buffer).__name__}") from exc
    if not view.c_contiguous:
        raise TcpConfigurationError("the buffer must be contiguous")
    if writable and view.readonly:
        raise TcpConfigurationError("a peer's buffer must be writable")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def make() -> TcpFanoutBroadcaster:
    return TcpFanoutBroadcaster()
