"""Watching what a call must not touch, and releasing the waits a wrong one blocks in.

A conforming implementation refuses at once (a loose, foreign or symlinked socket dir,
something at the socket path, a live listener) or fails at once (a peer whose rank 0
failed).  A wrong one may go on and *wait*: rank 0 in ``accept`` for peers, a peer in
``connect`` for a rank 0 that will never listen, a rank for bytes on a connection the
other side leaked.  Without the ``deadlines`` capability that wait has no end, the
harness stops the group and the clause comes out ERROR although the violation was plain
to see.  The suite owns these waits instead, and so does every deadline clause: it
waits for the call a bounded time (longer than the deadline under test plus its margin,
:func:`notified`, :func:`unfinished`) and then releases it the way a real peer or root
could.  Against a conforming implementation nothing here is ever needed: the call fails
within its deadline, the rank notifies, and the watcher returns without touching anything.

* :class:`Call` runs a call in a daemon thread, so a rank can stop waiting for it
  (:class:`Ended` says how far it got);
* :func:`poke` connects to a rank 0 waiting for peers and closes at once (it sees a
  connection end before its rank announcement);

* :func:`watched` runs a call while a thread watches what the call must not touch (a
  path, a directory); at the first change it notes what it saw and releases the call by
  joining as the peers rank 0 waits for, so ``initialize`` returns and the test judges
  the change it saw (FAIL), within a second;
* :func:`turn_away_peers` plays rank 0 after the real rank 0's ``initialize`` failed: it
  accepts the waiting peers, reads their announcements and closes (an orderly EOF: a
  verdict a peer must not retry), so they fail at once instead of retrying ``connect``
  until a deadline they may not have;
* :func:`shutdown_leaked` ends the connections an implementation kept open after
  ``reset()``, once the other rank was waited for as long as the clause allows;
* :func:`exchange` lets the ranks of a group compare values they computed (their base
  paths) before they bootstrap on them, so paths that disagree are judged, not hung on.

Everything here runs inside forked ranks.  SIGPIPE is at SIG_DFL there (the harness
default), so every send passes ``MSG_NOSIGNAL``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from tpbcast.harness import CapabilityMissing, SyncError, SyncTimeoutError, wire

from . import _support as s

# How often a watcher looks; each look is an lstat or a listdir (microseconds).
POLL: Final = 0.005
# Pause between two release attempts while the released call has not returned yet.
RETRY: Final = 0.05
# How long a joining peer waits for the probe before it closes (rank 0 needs to see the
# connection, not necessarily to finish with it).
PROBE_WAIT: Final = 1.0


@dataclass(frozen=True)
class Watched:
    """A call made under a watcher: what it raised, what the watcher saw change."""

    raised: s.Raised | None
    change: str | None  # the first change the watcher saw while the call ran
    released: bool  # the suite had to join as the peers to end the call
    elapsed: float

    @property
    def refused(self) -> bool:
        """The call raised without changing anything first: a refusal."""
        return self.raised is not None and self.change is None

    def describe(self, call: str = "initialize") -> str:
        """What happened, in words, for a check message."""
        ended = "returned" if self.raised is None else f"raised {self.raised}"
        if self.change is None:
            return f"{call} {ended} after {self.elapsed:.3f}s"
        how = "the suite released it by joining as its peer, then it" if self.released else "it"
        return f"while {call} ran, {self.change}; {how} {ended} after {self.elapsed:.3f}s"


def watched(
    call: Callable[[], object],
    changed: Callable[[], str | None],
    release: Callable[[], bool],
    *,
    timeout: float = s.OBSERVE,
) -> Watched:
    """Run ``call`` here while a thread polls ``changed()``; release it after a change.

    ``changed`` returns None while everything the call must not touch is as it was, else
    a sentence saying what changed.  From the first change on, the thread calls
    ``release()`` every :data:`RETRY` s until ``call`` returns (``release`` returns True
    once it reached the implementation).  The watcher gives up after ``timeout`` s; a
    call still blocked then is left to the group deadline.
    """
    done = threading.Event()
    seen: list[str] = []
    released: list[bool] = []

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while not done.is_set() and time.monotonic() < deadline:
            if not seen:
                what = changed()
                if what is None:
                    done.wait(POLL)
                    continue
                seen.append(what)
            if release():
                released.append(True)
            done.wait(RETRY)

    thread = threading.Thread(target=watch, name="tpbcast-suite-watcher", daemon=True)
    thread.start()
    start = time.monotonic()
    raised = s.attempt(call)
    elapsed = time.monotonic() - start
    done.set()
    thread.join(timeout + PROBE_WAIT + 1.0)
    return Watched(raised, seen[0] if seen else None, bool(released), elapsed)


def _kind(mode: int) -> str:
    """What a mode is, as :func:`_support.kind_of` names it."""
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    return "special file"


def _send(sock: socket.socket, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[sock.send(view, socket.MSG_NOSIGNAL) :]


def join_as_peers(path: str, ranks: Iterable[int] = (1,), probe_wait: float = PROBE_WAIT) -> bool:
    """Connect to ``path`` as each of ``ranks`` (wire v1 announcement), wait up to
    ``probe_wait`` s for a byte, close.  True if every connection was made.

    A rank 0 waiting in ``accept`` for exactly these peers completes its bootstrap (or
    fails on the close): either way its ``initialize`` returns.  Nothing is retried
    here; :func:`watched` calls this again while the call is still blocked.
    """
    socks: list[socket.socket] = []
    try:
        for rank in ranks:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            socks.append(sock)
            if sock.connect_ex(path) != 0:
                return False
            _send(sock, struct.pack("=i", rank))
        for sock in socks:
            s.read_window(sock, probe_wait)
    except OSError:
        return bool(socks)
    finally:
        for sock in socks:
            sock.close()
    return True


def path_changed(path: str, before: os.stat_result | None) -> Callable[[], str | None]:
    """A ``changed`` for :func:`watched`: what is at ``path`` is no longer ``before``
    (None: nothing was there)."""
    was = "nothing" if before is None else f"a {_kind(before.st_mode)}"

    def changed() -> str | None:
        try:
            now: os.stat_result | None = os.lstat(path)
        except FileNotFoundError:
            now = None
        if before is None and now is None:
            return None
        if (
            before is not None
            and now is not None
            and (now.st_ino, now.st_mode) == (before.st_ino, before.st_mode)
        ):
            return None
        what = "nothing" if now is None else f"a new {_kind(now.st_mode)}"
        return f"{path} went from {was} to {what}"

    return changed


def dir_filled(directory: str) -> Callable[[], str | None]:
    """A ``changed`` for :func:`watched`: something was created in ``directory``."""

    def changed() -> str | None:
        names = s.entries(directory)
        if not names:
            return None
        return f"{', '.join(names)} was created in {directory}"

    return changed


def connect_unless(
    address: str, stop: Callable[[], bool], deadline: wire.Deadline
) -> socket.socket:
    """Connect like a peer retrying a rank 0 not yet listening (:func:`wire.connect`, so
    only ENOENT/ECONNREFUSED are retried: a permission fault fails at once), in rounds of
    :data:`RETRY` s, giving up once ``stop()`` (e.g. rank 0 reported its initialize failed)
    or at ``deadline``.

    :raises wire.WireError: the last round's timeout when it gave up, or a connect error
        that retrying cannot cure.
    """
    while True:
        round_ends = wire.Deadline(min(deadline.at, wire.Deadline.after(RETRY).at))
        try:
            return wire.connect(address, round_ends)
        except wire.WireTimeoutError:
            if stop() or deadline.expired():
                raise


def turn_away_peers(path: str, peers: int = 1, timeout: float = s.OBSERVE) -> int:
    """Play rank 0 after the real one failed: turn away up to ``peers`` peers.

    Binds ``path`` (replacing a stale socket the failed rank 0 left, creating its dir if
    rank 0 did not; anything else there is left alone and nobody stands in), accepts
    each peer, reads its 4-byte announcement and closes: an orderly EOF before the
    probe, so the peer's ``initialize`` fails at once.  Gives up after ``timeout`` s;
    removes its socket file.  Returns how many peers it turned away.
    """
    kind = s.kind_of(path)
    if kind == "missing":
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    elif kind == "socket" and s.connect_refused(path):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    else:
        return 0
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    turned = 0
    ident = None
    try:
        try:
            listener.bind(path)
        except OSError:
            return 0
        ident = os.lstat(path).st_ino
        listener.listen(max(1, peers))
        deadline = time.monotonic() + timeout
        while turned < peers:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            listener.settimeout(left)
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                break
            with conn, contextlib.suppress(OSError, TimeoutError):
                # Read the announcement first: closing with unread bytes is a reset,
                # which a peer may take for "not accepted yet" and retry.
                wire.recv_exact(conn, 4, wire.Deadline.after(min(PROBE_WAIT, left)))
            turned += 1
    finally:
        listener.close()
        with contextlib.suppress(OSError):
            if ident is not None and os.lstat(path).st_ino == ident:
                os.unlink(path)
    return turned


def shutdown_leaked(before: dict[s.FdKey, str], bcast: object = None) -> int:
    """Shut down every socket opened since ``before`` (``_support.fd_table()``) that is
    still open: connections an implementation kept after ``reset()``.  The other side
    then sees EOF.  Returns how many were shut down."""
    count = 0
    for _, sock in s.new_sockets(before, bcast):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError as exc:
            if exc.errno != errno.ENOTCONN:
                raise
            continue
        count += 1
    return count


@dataclass(frozen=True)
class Ended:
    """How a :class:`Call` ended, as far as the rank waited for it (picklable)."""

    done: bool
    raised: s.Raised | None
    value: Any
    waited: float

    @property
    def failed(self) -> bool:
        """The call ended by raising."""
        return self.done and self.raised is not None

    def __str__(self) -> str:
        if not self.done:
            return f"still inside the call {self.waited:.2f}s after it started"
        return "returned normally" if self.raised is None else str(self.raised)

    __repr__ = __str__


class Call:
    """``fn(*args)`` in a daemon thread, so a rank can stop waiting for it.

    A call that never returns is left behind when the rank ends (ranks end in
    ``os._exit``): never touch that broadcaster again, it is still busy.
    ``CapabilityMissing`` (no answer of the implementation: see :func:`s.attempt`) is
    raised again by :meth:`ended`, in the rank's own thread.

    ``on_end`` runs in the call's thread the moment the call ends, before its end is
    published: a fault "right after the call returned" lands there, microseconds after it
    (a root whose bytes are still in a helper thread's queue still holds them).

    :meth:`hold` is how a fault test proves a rank died *inside* its call: the call's
    thread must take the gate before its end reaches the caller, so while the rank holds
    the gate (until its own SIGKILL) a call that had not returned never does.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *args: Any,
        on_end: Callable[[Ended], None] | None = None,
    ) -> None:
        self._out: dict[str, tuple[s.Raised | None, Any]] = {}
        self._missing: CapabilityMissing | None = None
        self._gate = threading.Lock()
        self._end = threading.Event()
        self.started = time.monotonic()

        def run() -> None:
            start = time.monotonic()
            try:
                end: tuple[s.Raised | None, Any] = (None, fn(*args))
            except CapabilityMissing as exc:
                self._missing = exc
                end = (s.capture(exc, time.monotonic() - start), None)
            except Exception as exc:
                end = (s.capture(exc, time.monotonic() - start), None)
            if on_end is not None:  # in this thread, before anything else of the rank runs
                on_end(Ended(True, end[0], end[1], time.monotonic() - self.started))
            with self._gate:
                self._out["end"] = end
                self._end.set()

        self.thread = threading.Thread(target=run, daemon=True, name="tpbcast-call")
        self.thread.start()

    @property
    def done(self) -> bool:
        return "end" in self._out

    def wait(self, timeout: float, until: Callable[[], bool] | None = None) -> bool:
        """Up to ``timeout`` s for the call to end (or ``until()`` to hold); True if it ended.
        Without ``until`` it wakes the moment the call ends (a fault "right after the
        call returned" lands right after)."""
        if until is None:
            self._end.wait(timeout)
        else:
            s.wait_for(lambda: self.done or until(), timeout)
        return self.done

    def hold(self) -> bool:
        """Close the gate; True if the call had not returned (and now cannot, until
        :meth:`release`).  The caller SIGKILLs itself while holding it, or releases it."""
        self._gate.acquire()
        return not self.done

    def release(self) -> None:
        """Open the gate :meth:`hold` closed."""
        self._gate.release()

    def ended(self) -> Ended:
        if self._missing is not None and self.done:
            raise self._missing
        raised, value = self._out.get("end", (None, None))
        return Ended(self.done, raised, value, time.monotonic() - self.started)


def notified(ctx: Any, name: str, timeout: float) -> bool:
    """Wait up to ``timeout`` s for ``notify(name)``; False if it did not come.

    Also False when every other rank ended without notifying (``SyncError``): whatever
    the watcher does next must be harmless then.
    """
    try:
        ctx.wait(name, timeout=timeout)
    except (SyncTimeoutError, SyncError):
        return False
    return True


def unfinished(ctx: Any, names: list[str], timeout: float) -> list[str]:
    """Those of ``names`` not notified within ``timeout`` s (one deadline for all)."""
    end = time.monotonic() + timeout
    return [name for name in names if not notified(ctx, name, max(0.01, end - time.monotonic()))]


def poke(path: str) -> bool:
    """Connect to the listener at ``path`` and close at once: wakes a rank 0 waiting
    for peers (it sees a connection end before its rank announcement).  True if the
    connection was made."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(1.0)
    try:
        sock.connect(path)
    except OSError:
        return False
    finally:
        sock.close()
    return True


def exchange(ctx: Any, name: str, value: object) -> list[Any]:
    """Every rank's ``value`` (JSON), by rank, through files in the group's workdir.

    For values a rank computed and the group must agree on before it acts on them (a
    base path the ranks bootstrap on): two ranks that disagree would wait for each other
    at two paths.  Collective: every rank of the group calls it with the same ``name``.
    """
    mine = os.path.join(ctx.workdir, f".exchange-{name}-{ctx.rank}")
    with open(mine + ".tmp", "w") as fh:
        json.dump(value, fh)
    os.replace(mine + ".tmp", mine)
    ctx.sync(f"exchange-{name}")
    values = []
    for rank in range(ctx.world_size):
        with open(os.path.join(ctx.workdir, f".exchange-{name}-{rank}")) as fh:
            values.append(json.load(fh))
    ctx.sync(f"exchange-{name}-read")
    os.unlink(mine)
    return values
