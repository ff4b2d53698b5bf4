"""``exec:<command ...>``: judge an implementation that runs as its own executable.

Each broadcaster object starts the command once, when it is created (in the rank that
creates it), and drives it over the protocol of :mod:`._exec_protocol` on one Unix socket
that is the driver's stdin and stdout. Why this shape:

* The driver dies with its rank: the child sets PR_SET_PDEATHSIG(SIGKILL) before exec
  (and exits at once if the rank is already gone). It stays in the rank's process group,
  so the harness's group kill, stack-dump and survivor sweep reach it too; a Kill or
  Pause aimed at the rank finds the driver idle between two calls (the rank drives every
  call), so stopping the rank stops the implementation's progress as well. The driver is
  started when the object is created, not lazily: PDEATHSIG follows the creating THREAD,
  and ranks create their broadcaster on the main thread even when they call it from others.
* A SignalStorm is different: it must interrupt the implementation's blocking syscalls,
  which run in the driver. After its hello the driver is registered as one of the rank's
  companions (:mod:`._companions`) with the storm signals it declared, so the storm
  signals it too; it is unregistered before it is reaped, so its pid is never signalled
  after the kernel may have reused it.
* A socket, not two pipes: ``send(MSG_NOSIGNAL)`` on the rank's side, so a dead driver is
  a clear :class:`ExecDriverError`, never a SIGPIPE in a rank that restored its default.
* The object closes its end when it is collected (or at interpreter exit); the driver then
  reads EOF and exits, and is killed if it has not done so within a bounded grace.
"""

from __future__ import annotations

import contextlib
import math
import os
import shlex
import shutil
import socket
import subprocess
import threading
import weakref
from collections.abc import Iterable
from functools import partial
from typing import Any, Final

from . import _companions
from ._contract import (
    Capability,
    Implementation,
    ImplementationLoadError,
    parse_capabilities,
    parse_transport,
)
from ._exec_errors import ExecDriverError, ExecNotAsked, from_record
from ._exec_protocol import (
    KEEP,
    MAX_FRAME,
    PROTOCOL_VERSION,
    STATUS_ERROR,
    STATUS_OK,
    Hello,
    Op,
    ProtocolError,
    Reader,
    broadcast_header,
    decode_error,
    decode_hello,
    initialize_request,
    request,
)
from ._observe import fd_targets
from ._outcome import signal_name
from ._plumbing import forget_private_fd, register_private_fd
from ._proc import PR_SET_PDEATHSIG_KILL, set_pdeathsig

__all__ = ["EXEC_PREFIX", "ExecBroadcaster", "load_exec_implementation"]

EXEC_PREFIX: Final = "exec:"
# After the rank closes its end, how long a driver may take to exit on its own (it runs
# its atexit handlers) before it is SIGKILLed. Bounded so a wedged driver cannot hang a
# rank's teardown.
_EXIT_GRACE: Final = 2.0
# Capabilities that need Python objects a byte protocol cannot carry (v1).
_NOT_CARRIED: Final = frozenset(
    {
        Capability.ABSTRACT_NAMESPACE,
        Capability.DISPATCH,
        Capability.BASE_PATH,
        Capability.TENSORS,
        Capability.ENDPOINT,  # not in protocol v1 (its request set has no set_endpoint)
    }
)
_LONG_MAX: Final = 2**31 - 1


def _fds_of(pid: int) -> frozenset[int]:
    """The fds ``pid`` holds now (empty if it is gone or /proc is unreadable)."""
    return frozenset(fd_targets(pid))


def _die_with(parent: int) -> None:  # pragma: no cover - runs in the child before exec
    """preexec_fn: PDEATHSIG, then make sure the parent did not die before it was set."""
    set_pdeathsig(PR_SET_PDEATHSIG_KILL)
    if os.getppid() != parent:
        os._exit(1)


def _stop(sock: socket.socket, proc: subprocess.Popen[bytes], owner: int) -> None:
    """Close the channel, give the driver :data:`_EXIT_GRACE` to exit, then kill it."""
    with contextlib.suppress(OSError):
        forget_private_fd(sock.fileno())
    sock.close()
    if os.getpid() != owner:  # a forked child of the rank: the driver is not ours
        return
    _companions.unregister(proc.pid)  # before the reap: never signal a reused pid
    try:
        proc.wait(timeout=_EXIT_GRACE)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()


class _Program:
    """The driver's executable, held open from load time and started via /proc/self/fd.

    Why: a rank may drop privileges before it creates its broadcaster (INIT-16 stages
    EACCES as ``nobody``); an in-process library was loaded before that, and so is this
    fd, so the executable need not be reachable by path for the new uid (a 0700 cache
    dir). ``None`` when the command cannot be opened: ``Popen`` then reports it.
    """

    def __init__(self, command: tuple[str, ...]) -> None:
        path = command[0] if "/" in command[0] else shutil.which(command[0])
        self.fd: int | None = None
        if path is not None:
            with contextlib.suppress(OSError):
                self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        if self.fd is not None:
            weakref.finalize(self, os.close, self.fd)


class _Driver:
    """One driver process and its socket; every request/reply goes through :meth:`call`."""

    def __init__(self, command: tuple[str, ...], program: _Program | None = None) -> None:
        self.command = command
        self.rank: int | None = None  # for messages: the rank of the last initialize
        self._failed: ExecDriverError | None = None
        self._lock = threading.Lock()
        self._program = program  # kept alive with the driver that may need it
        fd = program.fd if program is not None else None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.proc = subprocess.Popen(
                command,
                executable=None if fd is None else f"/proc/self/fd/{fd}",
                pass_fds=() if fd is None else (fd,),
                stdin=theirs.fileno(),
                stdout=theirs.fileno(),
                close_fds=True,
                preexec_fn=partial(_die_with, os.getpid()),  # noqa: PLW1509 - see _die_with
            )
        except (OSError, subprocess.SubprocessError) as exc:
            ours.close()
            raise ExecDriverError(
                f"could not start the exec: driver {shlex.join(command)}: "
                f"{type(exc).__name__}: {exc}",
                rank=None,
                command=command,
            ) from exc
        finally:
            theirs.close()
        self._sock = ours
        register_private_fd(ours.fileno())
        self._finalizer = weakref.finalize(self, _stop, ours, self.proc, os.getpid())
        self.startup_fds: frozenset[int] = frozenset()
        self.hello: Hello | None = None  # this process's own hello, once it answered

    def handshake(self) -> None:
        """One hello round trip, then record the driver's fds: whatever it holds once it
        answers (the channel as stdin/stdout, stderr, the program fd, its runtime's own)
        is plumbing, not something an ``initialize`` opened.  A driver that answered is
        registered as a companion of this rank with the storm signals it declared.  A
        failure is kept, and the first member call raises it (as every later call does)."""
        with contextlib.suppress(ExecDriverError, _ErrorReply):
            body = self.call("hello", (request(Op.HELLO),))
            try:
                self.hello = decode_hello(body)
            except ProtocolError as exc:
                self._failed = ExecDriverError(
                    f"{self._who()} broke the protocol in its hello reply: {exc}",
                    rank=self.rank,
                    command=self.command,
                )
        if self.hello is not None:
            _companions.register(self.proc.pid, self.hello.storm_signals)
        self.startup_fds = _fds_of(self.proc.pid)

    def close(self) -> None:
        """Close the channel and reap the driver (see :func:`_stop`)."""
        self._finalizer()

    @property
    def channel_fd(self) -> int:
        """The rank's end of the channel (-1 once closed)."""
        return self._sock.fileno()

    def _who(self) -> str:
        rank = f"rank {self.rank}" if self.rank is not None else "a rank (before initialize)"
        return f"{rank}'s exec: driver {shlex.join(self.command)} (pid {self.proc.pid})"

    def _died(self, what: str, cause: str) -> ExecDriverError:
        _companions.unregister(self.proc.pid)  # the wait below may reap it
        try:
            code = self.proc.wait(timeout=_EXIT_GRACE)
        except subprocess.TimeoutExpired:
            how = f"closed its channel ({cause}) but is still running"
        else:
            how = (
                f"was killed by {signal_name(-code)}" if code < 0 else f"exited with status {code}"
            )
        return ExecDriverError(
            f"{self._who()} {how} during {what}; no reply came (its stderr is in the rank's "
            "stderr capture)",
            rank=self.rank,
            command=self.command,
        )

    def _recv_exact(self, n: int, what: str) -> bytearray:
        out = bytearray(n)
        view = memoryview(out)
        got = 0
        while got < n:
            try:
                k = self._sock.recv_into(view[got:])
            except ConnectionResetError as exc:
                raise self._died(what, f"{type(exc).__name__}") from exc
            if k == 0:
                raise self._died(what, "EOF")
            got += k
        return out

    def call(self, what: str, parts: Iterable[bytes | memoryview]) -> Reader:
        """Send one request, read its reply; returns a reader past the status byte.

        :raises ExecBroadcastError: the driver replied with an error (a subclass by class).
        :raises ExecDriverError: the driver is gone or broke the protocol; every later
            call raises the same error (the stream cannot be trusted any more).
        """
        with self._lock:
            if self._failed is not None:
                raise self._failed
            try:
                return self._exchange(what, parts)
            except ExecDriverError as exc:
                self._failed = exc
                raise
            except ProtocolError as exc:
                self._failed = ExecDriverError(
                    f"{self._who()} broke the protocol in its {what} reply: {exc}",
                    rank=self.rank,
                    command=self.command,
                )
                raise self._failed from exc
            except _ErrorReply:
                raise  # a complete reply: the channel is in step
            except BaseException:
                # Interrupted mid-exchange (a signal handler raised): the reply, if any,
                # would be read by the next call. Refuse from now on instead.
                self._failed = ExecDriverError(
                    f"{self._who()}: a {what} call was interrupted before its reply; the "
                    "channel is out of sync, create a new broadcaster",
                    rank=self.rank,
                    command=self.command,
                )
                raise

    def _exchange(self, what: str, parts: Iterable[bytes | memoryview]) -> Reader:
        for part in parts:
            try:
                self._sock.sendall(part, socket.MSG_NOSIGNAL)
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise self._died(what, type(exc).__name__) from exc
        length = int.from_bytes(self._recv_exact(4, what), "little")
        reader = Reader(self._recv_exact(length, what), what)
        status = reader.u8()
        if status not in (STATUS_OK, STATUS_ERROR):
            raise ProtocolError(f"status byte {status} (0 = ok, 1 = error)")
        if status == STATUS_ERROR:
            record = decode_error(reader)
            raise _ErrorReply(record, reader)
        return reader


class _ErrorReply(Exception):  # noqa: N818 - internal control flow, never escapes
    """An error reply, with the reader positioned after the error record."""

    def __init__(self, record: Any, reader: Reader) -> None:
        super().__init__(record.message)
        self.record = record
        self.reader = reader


def _ms(name: str, seconds: float, command: tuple[str, ...]) -> int:
    """Seconds -> whole milliseconds on the wire (rounded up); ``math.inf`` is -1.

    :raises ExecNotAsked: a negative or NaN deadline (the wire has no way to carry it).
    """
    if seconds == math.inf:
        return -1
    if not math.isfinite(seconds) or seconds < 0:
        raise ExecNotAsked(
            "deadline_range",
            f"set_deadlines({name}={seconds!r}): the protocol carries only >= 0 ms or forever",
            command,
        )
    return min(_LONG_MAX, max(1, math.ceil(seconds * 1000))) if seconds > 0 else 0


def _c_int(name: str, value: int, command: tuple[str, ...]) -> int:
    """``value`` if it fits the protocol's i32.

    :raises ExecNotAsked: it does not (the driver's C ``int`` cannot receive it).
    """
    if not -(2**31) <= value < 2**31:
        raise ExecNotAsked(
            "int_range", f"{name}={value!r} does not fit the protocol's 32-bit int", command
        )
    return value


class ExecBroadcaster:
    """The adapter contract's members, each one request to the driver process."""

    def __init__(
        self, command: tuple[str, ...], hello: Hello, program: _Program | None = None
    ) -> None:
        self.name = hello.name
        self.version = hello.version
        words, transport = split_transport(hello.capabilities)
        self.capabilities = frozenset(words)
        self.transport = transport
        self._driver = _Driver(command, program)
        self._driver.handshake()
        self._rank: int | None = None

    @property
    def driver_pid(self) -> int:
        """The driver process's pid (for tests and reports)."""
        return self._driver.proc.pid

    def resource_pids(self) -> tuple[int, ...]:
        """Optional contract member: the implementation's fds live in the driver, so the
        suite's fd observations (leaks, listeners, CLOEXEC) must look there too."""
        return (self._driver.proc.pid,)

    def private_fds(self) -> frozenset[tuple[int, int]]:
        """Optional contract member, ``(pid, fd)`` pairs of the adapter's plumbing: the
        rank's end of the channel and the fds the driver held right after it started.
        Judging them would charge every ``exec:`` implementation with the adapter's fds."""
        driver = self._driver
        mine = {(os.getpid(), driver.channel_fd)} if driver.channel_fd >= 0 else set()
        return frozenset(mine | {(driver.proc.pid, fd) for fd in driver.startup_fds})

    def close(self) -> None:
        """End the driver now instead of when this object is collected."""
        self._driver.close()

    def _simple(self, what: str, data: bytes) -> Reader:
        try:
            return self._driver.call(what, (data,))
        except _ErrorReply as reply:
            raise from_record(reply.record) from None

    def set_deadlines(
        self, *, connect: float | None = None, init: float | None = None, io: float | None = None
    ) -> None:
        """Deadlines in seconds (``None`` keeps a value, ``math.inf`` waits forever)."""
        command = self._driver.command
        values = tuple(
            KEEP if v is None else _ms(n, v, command)
            for n, v in (("connect", connect), ("init", init), ("io", io))
        )
        self._simple(
            "set_deadlines", request(Op.SET_DEADLINES, ints=tuple(("q", v) for v in values))
        )

    def initialize(self, rank: int, world_size: int, base_path: str) -> None:
        command = self._driver.command
        path = os.fsencode(base_path)
        if b"\0" in path:
            raise ExecNotAsked(
                "nul_in_path",
                f"base_path {base_path!r} holds a NUL byte, which a C string cannot carry",
                command,
            )
        msg = initialize_request(
            _c_int("rank", rank, command), _c_int("world_size", world_size, command), path
        )
        self._driver.rank = rank
        self._simple("initialize", msg)
        self._rank = rank

    def broadcast(self, buffer: Any, root: int = 0) -> None:
        """Send ``buffer`` from the root or receive it in place; a list is sent back to back."""
        buffers: Iterable[Any] = buffer if isinstance(buffer, list | tuple) else (buffer,)
        # Every buffer is checked before the first request: a refusal asks the driver nothing.
        for flat, header in [self._prepare(one, root) for one in buffers]:
            self._broadcast_one(flat, header)

    def _prepare(self, buffer: Any, root: int) -> tuple[memoryview, bytes]:
        """The flat view and the request header for one buffer.

        :raises ExecNotAsked: what the adapter checks itself, before the driver (README,
            "Checked before the driver").
        """
        command = self._driver.command
        view = memoryview(buffer)
        if not view.c_contiguous:
            raise ExecNotAsked(
                "contiguous_buffer",
                f"a {type(buffer).__name__} of shape {view.shape} strides {view.strides} is "
                "not C-contiguous; the protocol carries one flat run of bytes",
                command,
            )
        flat = view.cast("B") if view.ndim != 1 or view.format != "B" else view
        nbytes = flat.nbytes
        if flat.readonly and nbytes and self._rank is not None and self._rank != root:
            # The driver would get a writable copy: it cannot be asked whether the
            # implementation refuses a buffer it cannot write (BCAST-11).
            raise ExecNotAsked(
                "read_only_buffer",
                f"rank {self._rank} (a peer) was given a read-only {type(buffer).__name__}; "
                "the driver only ever sees a writable copy, so whether the implementation "
                "refuses it cannot be asked",
                command,
            )
        if 13 + nbytes > MAX_FRAME:
            raise ExecNotAsked(
                "frame_size", f"{nbytes} bytes exceed one protocol frame ({MAX_FRAME})", command
            )
        return flat, broadcast_header(_c_int("root", root, command), nbytes)

    def _broadcast_one(self, flat: memoryview, header: bytes) -> None:
        nbytes = flat.nbytes
        error = None
        try:
            reader = self._driver.call("broadcast", (header, flat))
        except _ErrorReply as reply:
            reader, error = reply.reader, from_record(reply.record)
        # The buffer after the call (also after a failed one: a peer may hold a prefix).
        back = reader.u64()
        if back == nbytes and nbytes and not flat.readonly:
            flat[:] = reader.raw(back)
        if error is not None:
            raise error from None

    def reset(self) -> None:
        self._simple("reset", request(Op.RESET))
        self._rank = None

    def is_initialized(self) -> bool:
        return self._simple("is_initialized", request(Op.IS_INITIALIZED)).u8() != 0

    @property
    def generation(self) -> int:
        """The driver's generation counter (+1 on every reset)."""
        return self._simple("generation", request(Op.GENERATION)).u64()


def _command(spec: str) -> tuple[str, ...]:
    try:
        words = shlex.split(spec[len(EXEC_PREFIX) :])
    except ValueError as exc:
        raise ImplementationLoadError(
            f"implementation {spec!r}: the command after 'exec:' does not parse as shell "
            f"words: {exc}"
        ) from exc
    if not words:
        raise ImplementationLoadError(
            f"implementation {spec!r}: no command after 'exec:' "
            "(example: 'exec:./my_driver --flag')"
        )
    return tuple(words)


def _hello(spec: str, command: tuple[str, ...]) -> Hello:
    try:
        driver = _Driver(command)
    except ExecDriverError as exc:
        raise ImplementationLoadError(f"implementation {spec!r}: {exc}") from exc
    try:
        body = driver.call("hello", (request(Op.HELLO),))
        return decode_hello(body)
    except (ExecDriverError, ProtocolError, _ErrorReply) as exc:
        raise ImplementationLoadError(
            f"implementation {spec!r}: the driver did not answer the hello request: {exc}"
        ) from exc
    finally:
        driver.close()


TRANSPORT_WORD: Final = "transport="
"""A driver declares its transport profile as one more word of its hello's capabilities,
``transport=uds-framed`` (absent: ``uds-v1``); older drivers send no such word."""


def split_transport(words: Iterable[str]) -> tuple[tuple[str, ...], str]:
    """The hello's capability words without the ``transport=`` word, and the transport."""
    caps = tuple(w for w in words if not w.startswith(TRANSPORT_WORD))
    named = [w[len(TRANSPORT_WORD) :] for w in words if w.startswith(TRANSPORT_WORD)]
    return caps, parse_transport(named[-1] if named else None, source="exec: hello")


def load_exec_implementation(spec: str) -> Implementation:
    """Start the command once, read its hello (name, version, capabilities), stop it.

    :raises ImplementationLoadError: empty or unparsable command, a driver that cannot
        start or does not answer, another protocol version, or a capability that needs
        Python objects (``abstract_namespace``, ``dispatch``, ``base_path``, ``tensors``).
    :raises UnknownCapabilityError: a capability the contract does not define.
    """
    command = _command(spec)
    hello = _hello(spec, command)
    if hello.protocol != PROTOCOL_VERSION:
        raise ImplementationLoadError(
            f"implementation {spec!r}: the driver speaks protocol {hello.protocol}, this "
            f"suite speaks {PROTOCOL_VERSION}"
        )
    words, transport = split_transport(hello.capabilities)
    capabilities = parse_capabilities(words, source=f"{spec} hello")
    carried = sorted(capabilities & _NOT_CARRIED)
    if carried:
        raise ImplementationLoadError(
            f"implementation {spec!r} declares {', '.join(carried)}, which exec: cannot "
            "carry (they need Python objects); drop them from the driver's capabilities"
        )
    return Implementation(
        spec=spec,
        name=hello.name or os.path.basename(command[0]),
        version=hello.version or "unknown",
        capabilities=capabilities,
        transport=transport,
        factory=partial(ExecBroadcaster, command, hello, _Program(command)),
    )
