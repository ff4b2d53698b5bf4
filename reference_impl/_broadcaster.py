"""``CpuTpBroadcaster``: the state machine around the wire-v1 bootstrap and broadcast.

States: uninitialized -> initialized -> (broken) -> uninitialized (``reset``).

- ``initialize``: argument checks first (also ``0 <= rank < world_size``, which
  upstream leaves to rank 0); identical re-init is a no-op at every world size
  (upstream's TP=1 quirk of not storing base_path is NOT copied); a different
  one raises :class:`ReinitMismatchError`; a failed initialize leaves nothing
  behind, so a retry works.
- ``broadcast`` check order: not initialized, broken, ``root != 0`` (before
  the no-op cases, unlike upstream, so a bad root is caught at TP=1 too), then
  world_size 1 or 0 bytes moves nothing.
- A failed broadcast leaves the byte stream out of sync: the instance turns
  broken, closes its connections at once (so the other ranks see EOF promptly
  instead of waiting for their deadline), and refuses to broadcast until
  ``reset()``.
- Not re-entrant: a broadcast or initialize that overlaps another call
  (another thread, a signal handler) raises instead of corrupting the stream;
  ``reset()`` from another thread during a broadcast aborts that broadcast
  (a self-pipe wakes its poll), waits for it to leave, then tears down -- the
  broadcast never touches a closed or reused fd.
- After ``fork()`` the child forgets every inherited connection (closes its
  copies, unlinks nothing): two processes on one stream would corrupt it.
"""

from __future__ import annotations

import atexit
import os
import select
import socket
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Final, final

from ._bootstrap import Links, bootstrap_peer, bootstrap_root, path_label
from ._bootstrap_framed import framed_bootstrap_peer, framed_bootstrap_root
from ._buffers import flat_buffer, prepare_buffers
from ._config import BroadcasterConfig
from ._errors import (
    BroadcastError,
    BrokenBroadcasterError,
    ConfigurationError,
    NotInitializedError,
    ReinitMismatchError,
)
from ._exchange import Turn, check_not_stale, peer_exchange, root_exchange
from ._framed import ABORT_BIT, broadcast_timeout_from_env, next_generation
from ._io import Deadline, Site, make_poller, recv_exact, recv_views, send_all, send_views
from ._wire import check_path_length, socket_path

__all__ = ["BroadcasterStatistics", "CpuTpBroadcaster", "instance"]

_REASON_MAX: Final = 300
# How long reset() from another thread waits for an aborted broadcast to leave;
# the broadcast wakes from poll at once, so this only bounds a pathological case.
_ABORT_WAIT: Final = 10.0
_get_ident: Final = threading.get_ident


@dataclass(frozen=True, slots=True)
class _Route:
    """What every broadcast of one initialized group reuses, made once by ``initialize``.

    ``links``: (socket, error site, ``poll`` object) for each peer 1..n-1 in wire order
    on rank 0, for rank 0 alone on a peer.  The error sites (rank, peer, path label)
    and the pollers (socket + abort pipe) are built here so that a broadcast allocates
    nothing for them; dropped (set to None) whenever the links close.
    """

    links: tuple[tuple[socket.socket, Site, select.poll], ...]
    abort_fd: int | None

    @classmethod
    def build(cls, links: Links, rank: int, label: str) -> _Route:
        abort_fd = links.abort_r if links.abort_r >= 0 else None
        out: list[tuple[socket.socket, Site, select.poll]] = []
        for peer, sock in enumerate(links.peers):
            if sock is None or peer == rank:
                continue
            who = f"peer {peer}" if rank == 0 else "rank 0"
            site = Site(rank=rank, peer=peer, phase="broadcast", path=label, who=who)
            out.append((sock, site, make_poller(sock, writing=rank == 0, abort_fd=abort_fd)))
        return cls(tuple(out), abort_fd)


@dataclass(frozen=True, slots=True)
class BroadcasterStatistics:
    """A snapshot for tests and logs; None fields mean "not initialized"."""

    rank: int | None
    world_size: int | None
    base_path: str | None
    generation: int
    initialized: bool
    broken: bool
    bytes_sent: int
    bytes_received: int
    broadcasts: int


def _check_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(
            f"{name} must be an int, got {value!r} (type={type(value).__name__})"
        )
    return value


def _check_arguments(rank: object, world_size: object, base_path: object) -> None:
    size = _check_int("world_size", world_size)
    me = _check_int("rank", rank)
    if size < 1:
        raise ConfigurationError(f"world_size must be >= 1, got {size}")
    if not 0 <= me < size:
        raise ConfigurationError(f"rank must satisfy 0 <= rank < world_size ({size}), got {me}")
    if not isinstance(base_path, str) or not base_path:
        raise ConfigurationError(f"base_path must be a non-empty str, got {base_path!r}")
    if "\0" in base_path:
        raise ConfigurationError(f"base_path must not contain NUL bytes, got {base_path!r}")
    check_path_length(socket_path(base_path))


@final
class CpuTpBroadcaster:
    """Broadcast CPU bytes from rank 0 to the ranks of one TP group on one host.

    :param config: default settings for ``initialize`` (deadlines, security).
    """

    def __init__(self, config: BroadcasterConfig | None = None) -> None:
        self._default_config = config if config is not None else BroadcasterConfig()
        self._new_locks()
        self._generation = 0
        self._links = Links()
        self._route: _Route | None = None
        self._set_uninitialized()
        _LIVE.add(self)

    def _set_uninitialized(self) -> None:
        self._rank: int | None = None
        self._world_size: int | None = None
        self._base_path: str | None = None
        self._config: BroadcasterConfig | None = None
        # The whole-call I/O deadline, built once per initialize and restarted by
        # each broadcast.
        self._deadline = Deadline(None)
        self._initialized = False
        self._broken: str | None = None
        self._bytes_sent = 0
        self._bytes_received = 0
        self._broadcasts = 0
        # The framed wire's generation of the last committed broadcast (0 after initialize).
        self._committed = 0

    # -- guards -------------------------------------------------------------

    def _new_locks(self) -> None:
        # Which call holds the instance, and in which thread: ``{0: (name, ident)}``.
        # Claimed with ONE ``dict.setdefault`` and released with one ``pop``: each is
        # atomic under the GIL, also against a signal handler (handlers run between
        # bytecodes), so a caller always sees who is busy -- never a call that holds
        # the instance but has not named itself yet, or has just unnamed itself (that
        # window made reset() from another thread fail with "while None() is
        # running") -- and a broadcast takes no lock at all.  ``_state`` orders
        # reset() against the calls it waits for (``_idle``); it is re-entrant so a
        # signal handler that calls in while this thread holds it does not deadlock.
        self._claim: dict[int, tuple[str, int]] = {}
        self._state = threading.RLock()
        self._idle = threading.Condition(self._state)
        # reset() calls waiting on _idle; a call that leaves notifies only when > 0.
        self._resets_waiting = 0

    @property
    def _busy(self) -> str | None:
        """The call that holds the instance (None: idle)."""
        held = self._claim.get(0)
        return None if held is None else held[0]

    def _take(self, what: str) -> tuple[str, int] | None:
        """Claim the instance for ``what`` in this thread; None, or the holder's claim."""
        mine = (what, _get_ident())
        held = self._claim.setdefault(0, mine)
        return None if held is mine else held

    def _leave(self) -> None:
        self._claim.pop(0, None)
        if self._resets_waiting:
            with self._state:
                self._idle.notify_all()

    def _refuse(self, what: str, busy: str) -> BroadcastError:
        return BroadcastError(
            f"{what}() called while {busy}() is running (another thread or a "
            "signal handler); a broadcaster is not re-entrant",
            rank=self._rank,
            phase=what,
        )

    @contextmanager
    def _guard(self, what: str) -> Iterator[None]:
        held = self._take(what)
        if held is not None:
            raise self._refuse(what, held[0])
        try:
            yield
        finally:
            self._leave()

    # -- public API ---------------------------------------------------------

    @property
    def config(self) -> BroadcasterConfig:
        """The settings in force (of the current init, else the default)."""
        return self._config if self._config is not None else self._default_config

    @property
    def generation(self) -> int:
        """+1 on every ``reset()`` (even when uninitialized); ``initialize`` keeps it."""
        return self._generation

    def is_initialized(self) -> bool:
        return self._initialized

    def initialize(
        self,
        rank: int,
        world_size: int,
        base_path: str,
        *,
        config: BroadcasterConfig | None = None,
    ) -> None:
        """Join the group ``base_path`` as ``rank`` of ``world_size``.

        Rank 0 listens on ``<base_path>_0.sock``; the others connect to it.
        Returns once every peer is connected (the probe is a barrier).

        :raises ConfigurationError: bad arguments or a path over 107 bytes.
        :raises ReinitMismatchError: already initialized with other values.
        :raises SecurityError: untrusted socket dir/path or a foreign peer uid.
        :raises HandshakeError: bad/duplicate/truncated rank, bad probe byte.
        :raises BroadcastTimeoutError: the connect or init deadline passed.
        :raises PeerClosedError: the other side closed during the bootstrap.
        """
        _check_arguments(rank, world_size, base_path)
        with self._guard("initialize"):
            if self._initialized:
                if (rank, world_size, base_path) == (
                    self._rank,
                    self._world_size,
                    self._base_path,
                ):
                    if self._broken is not None and self.config.wire == "framed":
                        # Upstream returns silently and stays failed; a caller that
                        # re-initializes to recover must hear that it did not.
                        raise BrokenBroadcasterError(
                            f"initialize() on a failed instance ({self._broken}) does not "
                            "recover it; call reset() first, then initialize()",
                            rank=self._rank,
                            phase="initialize",
                        )
                    return
                raise ReinitMismatchError(
                    f"re-init mismatch: was rank={self._rank} world_size={self._world_size} "
                    f"base_path={self._base_path!r}, now rank={rank} world_size={world_size} "
                    f"base_path={base_path!r}; call reset() first",
                    rank=self._rank,
                    phase="initialize",
                )
            cfg = config if config is not None else self._default_config
            path = socket_path(base_path)
            io_timeout = cfg.io_timeout
            if world_size > 1:
                abstract = cfg.abstract_namespace
                if cfg.wire == "framed":
                    given, from_env = broadcast_timeout_from_env(os.environ)
                    if given:
                        io_timeout = from_env
                    if rank == 0:
                        links = framed_bootstrap_root(
                            world_size, base_path, path, cfg, abstract=abstract
                        )
                    else:
                        links = framed_bootstrap_peer(
                            rank, world_size, base_path, path, cfg, abstract=abstract
                        )
                elif rank == 0:
                    links = bootstrap_root(world_size, path, cfg, abstract=abstract)
                else:
                    links = bootstrap_peer(rank, world_size, path, cfg, abstract=abstract)
                try:
                    links.open_abort_pipe()
                except BaseException:
                    links.close(unlink=True)
                    raise
                self._links = links
                self._route = _Route.build(
                    links, rank, path_label(path, abstract=cfg.abstract_namespace)
                )
            self._rank, self._world_size, self._base_path = rank, world_size, base_path
            self._config = cfg
            self._deadline = Deadline(io_timeout)
            self._committed = 0
            self._initialized = True

    def broadcast(self, buffers: object, root: int = 0) -> None:
        """Send rank 0's bytes to every rank; in place on peers.

        :param buffers: one buffer or a list/tuple (sent back to back): bytes-like
            (``bytes`` only on rank 0), numpy arrays, torch CPU tensors.
        :param root: must be 0 (star topology).
        :raises NotInitializedError: before ``initialize`` / after ``reset``.
        :raises BrokenBroadcasterError: a previous broadcast failed; ``reset()``.
        :raises ConfigurationError: ``root != 0`` or an unusable buffer.
        :raises PeerClosedError: the other side closed (EOF/EPIPE/ECONNRESET).
        :raises BroadcastTimeoutError: ``io_timeout`` passed.
        """
        # _guard("broadcast") inline: a generator-based context manager costs more
        # than the rest of a small broadcast.
        held = self._take("broadcast")
        if held is not None:
            raise self._refuse("broadcast", held[0])
        try:
            if not self._initialized:
                raise NotInitializedError(
                    "broadcast called before initialize (or after reset)", phase="broadcast"
                )
            if self._broken is not None:
                raise BrokenBroadcasterError(
                    f"a previous broadcast failed, so the byte stream is out of sync "
                    f"({self._broken}); call reset() and initialize() again",
                    rank=self._rank,
                    phase="broadcast",
                )
            if isinstance(root, bool) or root != 0:
                raise ConfigurationError(
                    f"root must be 0 (star topology: only rank 0 sends), got {root!r}",
                    rank=self._rank,
                    phase="broadcast",
                )
            is_root = self._rank == 0
            data = flat_buffer(buffers, writable=not is_root)
            if data is None:
                self._broadcast_prepared(buffers, is_root)
                return
            # The hot path: one flat byte buffer, handed to the socket as it is.
            route = self._route
            total = len(data)
            if route is not None and self._links.board is not None:
                self._framed([memoryview(data).cast("B")], total, is_root, route)
                return
            if route is None or total == 0:  # world_size 1 (no route) or nothing to move
                self._broadcasts += 1
                return
            deadline = self._deadline.restart()
            try:
                if is_root:
                    abort_fd = route.abort_fd
                    for sock, site, poller in route.links:
                        send_all(sock, data, deadline, site, abort_fd=abort_fd, poller=poller)
                        self._bytes_sent += total
                else:
                    sock, site, poller = route.links[0]
                    recv_exact(
                        sock,
                        data,
                        deadline,
                        site,
                        abort_fd=route.abort_fd,
                        poller=poller,
                        wait_first=True,
                    )
                    self._bytes_received += total
            except BaseException as exc:
                self._break(exc)
                raise
            self._broadcasts += 1
        finally:
            self._leave()

    def _broadcast_prepared(self, buffers: object, is_root: bool) -> None:
        """Anything else: flattened (and refused with a reason) by ``prepare_buffers``."""
        prepared = prepare_buffers(buffers, writable=not is_root)
        try:
            total = prepared.total
            route = self._route
            if route is not None and self._links.board is not None:
                self._framed(prepared.views, total, is_root, route)
                prepared.finish()
                return
            if route is None or total == 0:
                self._broadcasts += 1
                return
            deadline = self._deadline.restart()
            try:
                if is_root:
                    self._send(prepared.views, total, deadline, route)
                else:
                    self._receive(prepared.views, total, deadline, route)
            except BaseException as exc:
                self._break(exc)
                raise
            prepared.finish()
            self._broadcasts += 1
        finally:
            prepared.release()

    def _framed(self, views: list[memoryview], total: int, is_root: bool, route: _Route) -> None:
        """One framed broadcast (``_exchange``), zero bytes included: every call is a
        frame, so a rank whose size differs from rank 0's is detected, never skipped."""
        board = self._links.board
        assert board is not None and self._rank is not None
        generation = next_generation(self._committed)
        deadline = self._deadline.restart()
        try:
            seen = check_not_stale(board, generation, self._rank)
            turn = Turn(board, generation, seen, deadline, route.abort_fd)
            if is_root:
                root_exchange(route.links, views, total, turn)
                self._bytes_sent += total * len(route.links)
            else:
                peer_exchange(route.links[0], views, total, turn)
                self._bytes_received += total
        except BaseException as exc:
            self._break(exc)
            raise
        self._committed = generation
        self._broadcasts += 1

    def abort(self, reason: str) -> None:
        """Fail the group's next broadcast on purpose (a rank's own validation failed).

        Framed wire: publishes the abort of the next generation in the shared words, so
        every other rank's next broadcast raises before any I/O; v1 (no shared decision):
        closes the links, so the others fail on EOF.  Either way this instance is failed
        until ``reset()``, also at world size 1 (upstream's abort is a silent no-op there).
        Repeating it is a no-op; it is refused while a broadcast runs.

        :raises NotInitializedError: before ``initialize``.
        :raises BroadcastError: in flight, or the next generation is already committed.
        """
        with self._guard("abort"):
            if not self._initialized:
                raise NotInitializedError(
                    f"abort({reason!r}) called before initialize (or after reset)",
                    phase="abort",
                )
            if self._broken is not None:
                return
            board = self._links.board
            if board is not None:
                generation = next_generation(self._committed)
                seen = board.load(generation)
                if seen != generation | ABORT_BIT:
                    decided = board.publish(generation, seen, generation | ABORT_BIT)
                    if decided == generation:
                        raise BroadcastError(
                            f"cannot abort generation {generation}: it is already committed "
                            f"({reason})",
                            rank=self._rank,
                            phase="abort",
                        )
            self._break(BroadcastError(f"abort({reason!r})", rank=self._rank, phase="abort"))

    def reset(self) -> None:
        """Close every connection, remove rank 0's socket file, forget the group.

        Idempotent; bumps ``generation`` every time.  The other ranks see EOF
        (reading) or EPIPE (writing) on their next I/O.  Called from another
        thread while a broadcast is in flight, it makes that broadcast fail
        (BroadcastError, "aborted") and waits for it to leave before closing
        anything, so the broadcast never touches a closed or reused fd.

        :raises BroadcastError: called while ``initialize`` runs, re-entrantly
            from the broadcasting thread (a signal handler), or the broadcast
            did not stop within ``_ABORT_WAIT`` seconds.
        """
        ident = _get_ident()
        with self._state:
            while (held := self._take("reset")) is not None:
                busy, thread = held
                if busy != "broadcast" or thread == ident:
                    raise BroadcastError(
                        f"reset() called while {busy}() is running (a signal handler, or "
                        "another thread during initialize); a broadcaster is not re-entrant",
                        rank=self._rank,
                        phase="reset",
                    )
                # Under _state no other reset can close the pipe while we write, so the
                # fd is still ours; a broadcast that slips in between our wait and our
                # claim is aborted the same way on the next turn.
                self._links.request_abort()
                self._resets_waiting += 1
                try:
                    left = self._idle.wait_for(lambda: 0 not in self._claim, timeout=_ABORT_WAIT)
                finally:
                    self._resets_waiting -= 1
                if not left:
                    raise BroadcastError(
                        f"reset() asked the in-flight broadcast to stop, but it did not within "
                        f"{_ABORT_WAIT:g} s",
                        rank=self._rank,
                        phase="reset",
                    )
        try:
            self._route = None
            self._links.close(unlink=True)
            self._links = Links()
            self._set_uninitialized()
            self._generation += 1
        finally:
            self._leave()

    def statistics(self) -> BroadcasterStatistics:
        """A frozen snapshot of the state and byte counters."""
        return BroadcasterStatistics(
            rank=self._rank,
            world_size=self._world_size,
            base_path=self._base_path,
            generation=self._generation,
            initialized=self._initialized,
            broken=self._broken is not None,
            bytes_sent=self._bytes_sent,
            bytes_received=self._bytes_received,
            broadcasts=self._broadcasts,
        )

    def __repr__(self) -> str:
        s = self.statistics()
        state = "broken" if s.broken else "initialized" if s.initialized else "uninitialized"
        return (
            f"<CpuTpBroadcaster {state} rank={s.rank} world_size={s.world_size} "
            f"base_path={s.base_path!r} generation={s.generation}>"
        )

    # -- internals ----------------------------------------------------------

    def _send(self, views: list[memoryview], total: int, deadline: Deadline, route: _Route) -> None:
        abort_fd = route.abort_fd
        for sock, site, poller in route.links:
            send_views(sock, views, deadline, site, total=total, abort_fd=abort_fd, poller=poller)
            self._bytes_sent += total

    def _receive(
        self,
        views: list[memoryview],
        total: int,
        deadline: Deadline,
        route: _Route,
    ) -> None:
        sock, site, poller = route.links[0]
        self._bytes_received += recv_views(
            sock,
            views,
            deadline,
            site,
            total=total,
            abort_fd=route.abort_fd,
            poller=poller,
            wait_first=True,
        )

    def _break(self, exc: BaseException) -> None:
        reason = str(exc) or type(exc).__name__
        self._broken = reason if len(reason) <= _REASON_MAX else reason[:_REASON_MAX] + "..."
        # Closing the connections is the only signal the other ranks get: they
        # see EOF/EPIPE now instead of hanging until their io_timeout.
        for index, sock in enumerate(self._links.peers):
            if sock is not None:
                # shutdown first: a forked child's copy of the fd must not keep the link up.
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
                self._links.peers[index] = None

    def _forget_after_fork(self) -> None:
        """In a forked child: drop inherited connections, unlink nothing."""
        self._new_locks()
        self._route = None
        self._links.close(unlink=False)
        self._links = Links()
        self._set_uninitialized()


_LIVE: weakref.WeakSet[CpuTpBroadcaster] = weakref.WeakSet()


class _Singleton:
    """Holder of the process-wide instance (no module globals to rebind)."""

    lock = threading.Lock()
    value: CpuTpBroadcaster | None = None


def instance() -> CpuTpBroadcaster:
    """The process-wide broadcaster (upstream's ``CpuTpBroadcaster::instance()``)."""
    with _Singleton.lock:
        if _Singleton.value is None:
            _Singleton.value = CpuTpBroadcaster()
        return _Singleton.value


def _after_fork_in_child() -> None:
    _Singleton.lock = threading.Lock()
    for bcast in list(_LIVE):
        bcast._forget_after_fork()


def _reset_at_exit() -> None:
    # Upstream's singleton destructor calls reset(), so a normal exit removes
    # rank 0's socket file; do the same for every live instance we own.
    for bcast in list(_LIVE):
        with suppress(BroadcastError):
            bcast.reset()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_reset_at_exit)
