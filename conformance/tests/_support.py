"""Building blocks of the conformance tests: making broadcasters, payloads, observations.

Everything here runs inside forked ranks or in the test body, and talks to the
implementation only through the adapter contract (DESIGN.md): ``impl.create()`` and the
members its declared capabilities promise.  Observations cross back to the test body as
small frozen dataclasses (pickled by the harness), so the checks, and their messages
citing the clause, live in the test.
"""

from __future__ import annotations

import errno
import hashlib
import os
import random
import re
import socket
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from tpbcast.conformance._checks import (
    PreconditionError,
    record,
    record_absent,
    record_unjudged,
)
from tpbcast.conformance._results import STAGED_ELSEWHERE, Verdict
from tpbcast.harness import CapabilityMissing, EngineNotAsked, observe
from tpbcast.harness.rogue import rogue_peer
from tpbcast.harness.runtime import WORKDIR_PREFIX, claim

_T = TypeVar("_T")

# Short deadlines keep fault tests fast; margins are generous because the machine may be
# 4x oversubscribed (helper rules): an error must come within deadline + MARGIN and not
# before EARLY * deadline.
SHORT: Final = 0.5
MARGIN: Final = 3.0
EARLY: Final = 0.8
# How long a rogue watches for a reaction; well above SHORT + scheduling noise.
OBSERVE: Final = 5.0
# How long a suite peer or root waits for what a working implementation does at once
# (accept a connection, send the probe): a generous bound, never reached when it works.
PATIENCE: Final = 10.0
# Per-group deadline for fault tests (a hang becomes ERROR quickly, not after minutes).
GROUP_TIMEOUT: Final = 20.0
MiB: Final = 1 << 20

ERROR_FIELDS: Final = (
    "rank",
    "peer",
    "phase",
    "bytes_done",
    "bytes_total",
    "elapsed",
    "path",
    "errno_name",
)


@dataclass(frozen=True)
class Raised:
    """What a call raised inside a rank (picklable, unlike many exceptions)."""

    type_name: str
    bases: tuple[str, ...]
    message: str
    elapsed: float
    attrs: dict[str, Any] = field(default_factory=dict)

    def is_a(self, name: str) -> bool:
        """True if ``name`` is the class or any base class of the exception."""
        return name in self.bases

    def __str__(self) -> str:
        return f"{self.type_name}: {self.message} (after {self.elapsed:.3f}s)"

    # Assertion messages show tuples of these: keep them readable in the reports.
    __repr__ = __str__


def capture(exc: BaseException, elapsed: float) -> Raised:
    """Freeze ``exc`` into a :class:`Raised`, keeping the documented error attributes."""
    attrs: dict[str, Any] = {}
    for name in ERROR_FIELDS:
        if hasattr(exc, name):
            value = getattr(exc, name)
            attrs[name] = (
                value if isinstance(value, int | float | str | type(None)) else repr(value)
            )
    return Raised(
        type_name=type(exc).__name__,
        bases=tuple(cls.__name__ for cls in type(exc).__mro__),
        message=str(exc),
        elapsed=elapsed,
        attrs=attrs,
    )


def attempt(fn: Callable[..., object], *args: Any, **kwargs: Any) -> Raised | None:
    """Call ``fn``; return what it raised (an ``Exception``) or None if it returned.

    ``CapabilityMissing`` is not caught: it is no answer of the implementation (the
    ``exec:`` adapter refusing a call before its driver is asked), so it ends the test
    as UNSUPPORTED instead of passing for the refusal the clause wants.
    """
    start = time.monotonic()
    try:
        fn(*args, **kwargs)
    except CapabilityMissing:
        raise
    except Exception as exc:
        return capture(exc, time.monotonic() - start)
    return None


@dataclass(frozen=True)
class NotAsked:
    """What the adapter said instead of its engine (an ``EngineNotAsked``): no answer at all.

    Equal to no bool and to no :class:`Raised`, so a check that wants ``False`` or an error
    does not hold on it: an engine without the surface never meets a clause about it (the
    message, shown as the check's "got", names the surface).  A check of another clause
    tests ``isinstance(x, NotAsked)`` and judges what the engine did answer.
    """

    message: str

    def __bool__(self) -> bool:
        # Truthy by default, "not x" would read as "said False" where it means "no answer".
        raise TypeError(
            "NotAsked has no truth value: judge it with says_initialized/says_uninitialized, "
            "or compare 'is False' where the state itself is the clause's subject"
        )

    def __str__(self) -> str:
        return f"no answer from the engine (the adapter's report: {self.message})"

    __repr__ = __str__


def _unless_not_asked(fn: Callable[..., _T], *args: Any) -> _T | NotAsked:
    """``fn(*args)``, or :class:`NotAsked` if an adapter raised ``EngineNotAsked``."""
    try:
        return fn(*args)
    except EngineNotAsked as exc:
        return NotAsked(str(exc))


def asked(fn: Callable[..., object], *args: Any) -> Raised | NotAsked | None:
    """:func:`attempt`, but an adapter's ``EngineNotAsked`` is returned as :class:`NotAsked`
    instead of ending the test: for a call whose non-answer decides only part of it."""
    return _unless_not_asked(attempt, fn, *args)


def initialized(bcast: Any) -> object:
    """``bcast.is_initialized()`` as it answered (INIT-12 wants exactly ``False`` or
    ``True``), or :class:`NotAsked` where the adapter keeps that state itself (the engine
    has no not-initialized state: it raises ``EngineNotAsked``)."""
    return _unless_not_asked(bcast.is_initialized)


def says_initialized(initialized: object) -> bool:
    """:func:`initialized` said True, or the engine has no such state to ask: for a clause
    other than INIT-12 and RESET-4, whose subject that state is (there NotAsked FAILs).
    A check whose only content is the state skips :class:`NotAsked` instead (nothing seen)."""
    return isinstance(initialized, NotAsked) or bool(initialized)


def says_uninitialized(initialized: object) -> bool:
    """:func:`initialized` said False, or the engine has no such state to ask (as
    :func:`says_initialized`)."""
    return isinstance(initialized, NotAsked) or not initialized


def check_state(
    cid: str, initialized: object, want: bool, sentence: str, *, rank: int | None = None
) -> None:
    """Check that :func:`initialized` answered ``want``, for a clause whose check is only
    that state; skipped on :class:`NotAsked` (nothing was seen: INIT-12's subject)."""
    if not isinstance(initialized, NotAsked):
        check(cid, bool(initialized) is want, sentence, initialized, rank=rank)


def timed(fn: Callable[..., object], *args: Any) -> tuple[Raised | None, float]:
    """:func:`attempt` plus the elapsed time either way."""
    start = time.monotonic()
    raised = attempt(fn, *args)
    return raised, time.monotonic() - start


def make(
    impl: Any,
    *,
    connect: float | None = None,
    init: float | None = None,
    io: float | None = None,
) -> Any:
    """A fresh broadcaster; deadlines are set only if given and the impl has ``deadlines``.

    ``reset()`` first: a factory may return a process-wide singleton (ADAPT-4), and the
    suite promises to reset it before each use (RESET-1 makes that safe).
    """
    bcast = impl.create()
    bcast.reset()
    if impl.supports("deadlines") and (connect, init, io) != (None, None, None):
        bcast.set_deadlines(connect=connect, init=init, io=io)
    return bcast


def short(impl: Any, **kwargs: float) -> Any:
    """A broadcaster with every deadline at :data:`SHORT` unless overridden."""
    values = {"connect": SHORT, "init": SHORT, "io": SHORT, **kwargs}
    return make(impl, **values)


def payload(seed: int, size: int, salt: object = "") -> bytes:
    """Deterministic random bytes for ``(seed, salt)``: reproducible from the session seed."""
    return random.Random(f"{seed}:{salt}:{size}").randbytes(size)


def digest(data: object) -> str:
    """SHA-256 of a buffer's bytes (cheap to send back from a rank)."""
    return hashlib.sha256(memoryview(data).cast("B")).hexdigest()  # type: ignore[arg-type]


FdKey = tuple[int, int]
"""An open fd as ``(pid, fd)``: the suite looks at this process and the implementation's others."""


def resource_pids(bcast: object = None) -> tuple[int, ...]:
    """The optional adapter member ``resource_pids()``: other processes holding the
    implementation's fds (an ``exec:`` driver); ``()`` for in-process adapters."""
    get = getattr(bcast, "resource_pids", None)
    return tuple(get()) if callable(get) else ()


def private_fds(bcast: object = None) -> frozenset[FdKey]:
    """The optional adapter member ``private_fds()``: ``(pid, fd)`` pairs of the adapter's
    plumbing (a driver channel), never counted as the implementation's."""
    get = getattr(bcast, "private_fds", None)
    return frozenset(get()) if callable(get) else frozenset()


def _proc_fds(pid: int) -> dict[FdKey, str]:
    return {(pid, fd): what for fd, what in observe.fd_targets(pid).items()}


def fd_table(bcast: object = None) -> dict[FdKey, str]:
    """Open fds of this process and of ``bcast``'s resource pids, minus its private fds.

    Keyed by ``(pid, fd)`` so an ``exec:`` implementation's sockets, which live in its
    driver process, are judged like an in-process implementation's.
    """
    table = _proc_fds(os.getpid())
    for pid in resource_pids(bcast):
        table.update(_proc_fds(pid))
    for key in private_fds(bcast):
        table.pop(key, None)
    return table


def new_fds(before: dict[FdKey, str], bcast: object = None) -> dict[FdKey, str]:
    """Fds open now that were not open (with the same target) in ``before``."""
    now = fd_table(bcast)
    return {key: what for key, what in now.items() if before.get(key) != what}


def socket_fds(bcast: object = None) -> dict[FdKey, str]:
    """Open socket fds of this process and of ``bcast``'s resource pids."""
    return {key: what for key, what in fd_table(bcast).items() if what.startswith("socket:")}


_SYS_PIDFD_GETFD: Final = 438  # the same number on every Linux architecture


def dup_fd(key: FdKey) -> int:
    """A new fd of this process for ``key``'s open file: ``os.dup`` for our own fds,
    ``pidfd_getfd(2)`` for another process's (same uid or ptrace permission).

    :raises OSError: the fd (or its process) is gone, or we may not take it.
    """
    pid, fd = key
    if pid == os.getpid():
        return os.dup(fd)
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    try:
        got = int(libc.syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0))
        if got < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"pidfd_getfd(pid {pid}, fd {fd}): {os.strerror(err)}")
        return got
    finally:
        os.close(pidfd)


def cloexec(key: FdKey) -> bool | None:
    """FD_CLOEXEC of ``key`` (for another process: :func:`observe.fd_cloexec`); None if gone."""
    import fcntl

    pid, fd = key
    if pid == os.getpid():
        try:
            return bool(fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC)
        except OSError:
            return None
    return observe.fd_cloexec(pid, fd)


def cloexec_missing(bcast: object = None) -> list[str]:
    """Socket fds of this process (and ``bcast``'s resource pids) without FD_CLOEXEC."""
    bad = []
    own = os.getpid()
    for key, what in socket_fds(bcast).items():
        if cloexec(key) is False:
            pid, fd = key
            where = f"fd {fd}" if pid == own else f"pid {pid} fd {fd}"
            bad.append(f"{where} ({what})")
    return bad


def entries(directory: str) -> list[str]:
    """Sorted names in ``directory`` (empty if it does not exist)."""
    try:
        return sorted(os.listdir(directory))
    except FileNotFoundError:
        return []


def kind_of(path: str) -> str:
    """``socket``, ``file``, ``dir``, ``symlink``, ``missing`` or ``other``."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "missing"
    if stat.S_ISLNK(st.st_mode):
        return "symlink"
    if stat.S_ISSOCK(st.st_mode):
        return "socket"
    if stat.S_ISREG(st.st_mode):
        return "file"
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    return "other"


def connect_refused(path: str) -> bool:
    """True if nobody listens at ``path`` (ECONNREFUSED/ENOENT)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as exc:
        return exc.errno in (errno.ECONNREFUSED, errno.ENOENT)
    finally:
        sock.close()
    return False


wait_for: Final = observe.wait_until
"""Poll a predicate until true or a timeout passes (a deadline, not a sleep)."""


def wait_until_blocked(thread: Any, timeout: float = 10.0) -> bool:
    """Poll until ``thread`` sleeps in the kernel on something other than a lock.

    A call blocked in I/O (recv, poll, send: state ``S`` with a wchan that is not a
    futex, which is what a GIL or lock wait shows) is in flight.  This replaces "start
    the thread and sleep 0.2 s", which on a loaded machine may fire before the call has
    even begun, so the test would judge something else.  Returns False at ``timeout``.
    """
    return wait_for(lambda: blocked_in_kernel(thread), timeout)


def blocked_in_kernel(thread: Any) -> bool:
    """``thread`` sleeps in the kernel on something other than a lock (in I/O, a poll, a
    timed sleep between retries): inside a call that waits, as :func:`wait_until_blocked`
    says."""
    seen = observe.thread_wait(thread.native_id)
    return seen is not None and seen[0] == "S" and "futex" not in seen[1]


def group_roundtrip(
    ctx: Any,
    bcast: Any,
    sizes: list[int],
    *,
    salt: object = "",
) -> list[str]:
    """Broadcast one payload per size (root fills, peers receive); return peer digests.

    Peers pre-fill their buffer with a pattern that differs from the payload, so a
    broadcast that moves nothing cannot pass.
    """
    out = []
    for index, size in enumerate(sizes):
        data = payload(ctx.seed, size, (salt, index))
        if ctx.rank == 0:
            buf = bytearray(data)
        else:
            buf = bytearray(b"\xa5" * size) if size else bytearray()
            if size and buf == data:
                buf[0] ^= 0xFF
        bcast.broadcast(buf)
        out.append(digest(buf))
    return out


def fail_init_then_broadcast(
    ctx: Any, impl: Any, *, bad_rank: int, after: int
) -> tuple[Raised | None, Raised | None, Any]:
    """Two failures on one instance of a 2-rank group, each followed by ``reset()``.

    Rank 0 runs the implementation: its initialize fails (rank 1 is a rogue that announces
    ``bad_rank``), reset, initialize again, its broadcast fails (the rogue closes after
    ``after`` payload bytes), reset; then it notifies ``"failures_done"``.  Returns
    ``(failed_init, failed_bcast, bcast)`` on rank 0, for the caller to prove both faults
    happened (neither is None) and go on with ``bcast``; ``(None, None, None)`` on rank 1.
    """
    if ctx.rank == 0:
        bcast = make(impl, init=10.0, io=10.0)
        failed_init = attempt(bcast.initialize, 0, 2, ctx.base_path)
        bcast.reset()
        ctx.notify("again")
        bcast.initialize(0, 2, ctx.base_path)
        failed_bcast = attempt(bcast.broadcast, bytearray(4 * MiB))
        bcast.reset()
        ctx.notify("failures_done")
        return failed_init, failed_bcast, bcast
    rogue_peer("announce", rank=bad_rank, observe=OBSERVE)(ctx)
    ctx.wait("again", timeout=15)
    rogue_peer("close_mid_payload", rank=1, after=after)(ctx)
    return None, None, None


def expected_digests(seed: int, sizes: list[int], *, salt: object = "") -> list[str]:
    """What :func:`group_roundtrip` must return on every rank."""
    return [digest(payload(seed, size, (salt, index))) for index, size in enumerate(sizes)]


def precondition(cid: str, holds: object, what: str) -> None:
    """Raise :class:`PreconditionError` for clause ``cid`` naming ``what`` unless ``holds``.

    Every fault test calls this on the proof that its fault happened before it judges
    the implementation's reaction.  The message starts with the clause id, so the verdict
    rules make that clause ERROR (inconclusive), and only that clause: a clause the test
    had already judged keeps its verdict.
    """
    if not holds:
        raise PreconditionError(cid, what)


def fault_happened(cid: str, holds: object, evidence: object) -> None:
    """The precondition of every fault check: the fault was staged, proved by ``holds``
    (a rank's SIGKILL, a rogue's recorded action).  Otherwise ``cid`` is ERROR, "the
    fault did not happen: <evidence>", never judged on a fault that never came."""
    precondition(cid, holds, f"the fault did not happen: {evidence}")


def killed(cid: str, outcome: Any) -> None:
    """:func:`fault_happened` for a rank the test SIGKILLed: its outcome says so."""
    fault_happened(cid, outcome.signal_name == "SIGKILL", outcome.summary())


def rogue_did(cid: str, outcome: Any, action: str) -> Any:
    """:func:`fault_happened` for a rogue rank's ``action`` (its report's ``did``); returns
    the report."""
    report = outcome.value
    fault_happened(cid, report is not None and report.did(action), outcome.summary())
    return report


def stageable(cid: str, holds: object, what: str) -> bool:
    """Record ``cid`` UNSUPPORTED ("not stageable on this implementation: ...") unless
    ``holds``; return ``bool(holds)``.

    For a precondition the *implementation's own behaviour* denies, judged by another clause
    (BCAST-13 needs a broadcast that fails on a dead peer: an implementation that hangs there
    instead FAILs FAULT-1, and BCAST-13 cannot be staged on it).  Never PASS, never FAIL,
    and not ERROR either: :func:`precondition` is for a fault the suite could not stage.
    """
    if holds:
        return True
    record_unjudged(cid, Verdict.UNSUPPORTED, f"not stageable on this implementation: {what}")
    return False


def optional_present(cid: str, present: object, what: str) -> bool:
    """For a MAY clause: record the option absent (``what`` was seen instead) unless
    ``present``; return ``bool(present)``, so the test judges the option only where it is.

    An absent option is what a MAY clause allows: the clause holds (PASS, marked absent in
    the reports), it is not UNSUPPORTED (the test staged the situation and saw what the
    implementation does).  The rule lives in the verdict machinery (``_results``) for every
    MAY clause; a MUST or SHOULD clause given to this is a suite defect (ERROR).
    """
    if present:
        return True
    record_absent(cid, what)
    return False


def staged_elsewhere(cid: str, holds: object, what: str, other: str) -> bool:
    """Record ``cid`` NOT_TESTED by this test ("not staged by this test (<what>); <other>
    stages it") unless ``holds``; return ``bool(holds)``.

    For a staging that rests on another clause the implementation does not meet (INIT-11's
    retry after a bad argument needs INIT-1's refusal first) when ``other``, a test that
    needs no such thing, stages the same clause: the clause is judged there, PASS or FAIL,
    instead of being UNSUPPORTED here (an UNSUPPORTED check outweighs every PASS and FAIL
    of the clause).  Never PASS: the test's implicit PASS of a clause with no check of its
    own does not apply either.  Two stagings may defer to each other: when every test of
    the clause deferred (or staged it through another transport), the clause is UNSUPPORTED,
    not stageable on this implementation (``_results.counted_checks``).
    """
    if holds:
        return True
    record_unjudged(cid, Verdict.NOT_TESTED, f"{STAGED_ELSEWHERE} ({what}); {other} stages it")
    return False


def clause(cid: str, sentence: str, got: object, *, rank: int | None = None) -> str:
    """An assertion message that states the clause first: ``ID: sentence -- got ...``.

    ``sentence`` is the requirement (what was expected), ``got`` what was observed.
    With ``rank`` the message reads ``ID: sentence -- rank N: got ...`` (for the reader;
    the report's "failing rank" column comes from the check's ``rank`` field).
    """
    who = "" if rank is None else f"rank {rank}: "
    return f"{cid}: {sentence} -- {who}got {got}"


def check(
    cid: str, holds: object, sentence: str, got: object = "", *, rank: int | None = None
) -> bool:
    """Judge one check of clause ``cid``: record it and go on (a *soft* check).

    The test keeps running after a failed check, so its later checks are judged too,
    and a check can only decide its own clause (a SHOULD wording check never fails the
    MUST clause of the same test).  Returns ``bool(holds)``, for a test whose next
    step only makes sense if this one held::

        if not s.check("INIT-10", raised is not None, "a wrong probe is refused", "none"):
            return

    Called inside a forked rank (or outside a conformance run) a failed check raises
    ``CheckFailed`` (an ``AssertionError`` carrying the clause and rank) instead, since
    nobody would read the rank's copy of the log.  ``got`` is only formatted when the check fails.
    """
    passed = bool(holds)
    message = clause(cid, sentence, got, rank=rank) if not passed else f"{cid}: {sentence}"
    return record(cid, passed, message, rank=None if passed else rank)


def ok_values(result: Any) -> list[Any]:
    """Each rank's returned value (the group must have succeeded)."""
    return [outcome.value for outcome in result.outcomes]


def status_of(outcome: Any) -> str:
    """``OK``, ``RAISED``, ``EXITED``, ``SIGNALED`` or ``TIMED_OUT``."""
    return str(outcome.status.name)


def read_window(sock: socket.socket, window: float) -> bytes | None:
    """Whatever arrives within ``window`` s: None if nothing, b"" on EOF.

    Proving that something does NOT happen needs an observation window; this is
    that window, not a synchronisation.
    """
    sock.settimeout(window)
    try:
        return sock.recv(1 << 16)
    except TimeoutError:
        return None
    except ConnectionResetError:
        return b""


def new_sockets(
    before: dict[FdKey, str], bcast: object = None
) -> Iterator[tuple[FdKey, socket.socket]]:
    """Each socket opened since ``before`` (:func:`fd_table`), as a socket of this process
    (a duplicate, closed when the loop moves on; the implementation's stays open).  One
    closed meanwhile (a refused connect attempt) is skipped."""
    for key, what in new_fds(before, bcast).items():
        if not what.startswith("socket:"):
            continue
        try:
            sock = socket.socket(fileno=dup_fd(key))
        except OSError:
            continue
        with sock:
            yield key, sock


def listening_sockets(before: dict[FdKey, str], bcast: object = None) -> list[str]:
    """Addresses of listening sockets opened since ``before`` (``SO_ACCEPTCONN``)."""
    found = []
    for _, sock in new_sockets(before, bcast):
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            name = sock.getsockname()
            found.append(name if isinstance(name, str) else repr(name))
    return found


# A path starts with "/" and a non-digit, not inside a word: "32768/65536" is no path.
_PATH_RE: Final = re.compile(r"(?<![\w/])/[A-Za-z._-][^\s'\"\]\),]*")


def mentions(raised: Raised, token: object) -> bool:
    """True if the error's message names ``token`` as a word, outside any path.

    Temporary paths contain random digits, so a plain ``"1" in message`` could pass
    for an error that names no rank at all.
    """
    text = _PATH_RE.sub(" ", raised.message)
    return re.search(rf"(?<![\w.-]){re.escape(str(token))}(?![\w])", text) is not None


def once_per_run(shared_dir: Any, name: str, compute: Callable[[], Any], timeout: float) -> Any:
    """``compute()`` once per conformance run, whichever xdist worker asks first.

    The first caller takes an exclusive lock on ``<shared_dir>/<name>.lock``, computes and
    pickles the value; the others wait (up to ``timeout`` s) and unpickle it.  A failed
    computation is not cached: the next caller retries and fails on its own.
    """
    import fcntl
    import pickle

    base = os.path.join(str(shared_dir), name)
    deadline = time.monotonic() + timeout
    with open(base + ".lock", "a+b") as lock:
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"{name}: another worker held the lock for {timeout}s"
                    ) from None
                time.sleep(0.05)
        try:
            if os.path.exists(base + ".pickle"):
                with open(base + ".pickle", "rb") as fh:
                    return pickle.load(fh)
            value = compute()
            with open(base + ".tmp", "wb") as fh:
                pickle.dump(value, fh)
            os.replace(base + ".tmp", base + ".pickle")
            return value
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# --------------------------------------------------------------------------- named leftovers


def private_tmpdir(ctx: Any) -> None:
    """Point this rank's TMPDIR (and :mod:`tempfile`) at its group's workdir, so whatever an
    implementation puts in TMPDIR (IPC socket files, rendezvous files) is seen by the
    harness's leftover check of the workdir: observed from outside, per group, with no
    interference from the other tests running beside it."""
    observe.private_tmpdir(ctx.workdir)


def shm_names_held(bcast: object = None) -> set[str]:
    """The /dev/shm files this rank (and ``bcast``'s resource pids) maps or holds open: the
    group's own segments, observed before reset so a later leftover check judges only them
    (tests running beside this one make their own /dev/shm entries; the harness's workdirs
    live there too and are never the implementation's)."""
    return observe.shm_names(resource_pids(bcast), exclude_prefix=WORKDIR_PREFIX)


def hand_to_cleanup(paths: list[str], result: Any) -> None:
    """Leftovers this test saw the group's ranks hold (``shm_names_held``, each rank's set
    its value): recorded for the suite's cleanup after the test (listed in its report),
    the first rank that held one as its creator (0: unknown)."""
    for path in paths:
        creator = next(
            (o.pid for o in result.outcomes if isinstance(o.value, set) and path in o.value), 0
        )
        try:
            st = os.lstat(path)
        except OSError:
            continue
        claim(path, (st.st_dev, st.st_ino), creator, result.label)


# --------------------------------------------------------------------------- deaths


def dead_peer_rounds(bcast: object) -> int:
    """How many broadcasts a dead-peer staging sends before it judges: at least 64, and more
    than twice the adapter's declared ``buffered_broadcasts`` (what its transport completes
    for a peer that reads nothing: ring slots), so buffering can never hide a death."""
    declared = getattr(bcast, "buffered_broadcasts", None)
    buffered = int(declared) if isinstance(declared, int) and declared > 0 else 0
    return max(64, 2 * buffered + 2)


def publish_pid(ctx: Any) -> None:
    """Publish this rank's pid in its group's workdir, so another rank (or the test body)
    can prove its death from the kernel (:func:`wait_dead`)."""
    observe.publish_pid(ctx.workdir, ctx.rank)


def published_pid(ctx: Any, rank: int, cid: str) -> int:
    """Rank ``rank``'s published pid; ``cid``'s precondition if it never appears."""
    pid = observe.published_pid(ctx.workdir, rank, PATIENCE)
    if pid is None:
        raise PreconditionError(cid, f"rank {rank} never published its pid")
    return pid


def wait_dead(ctx: Any, rank: int, cid: str, timeout: float = PATIENCE) -> float:
    """Wait until rank ``rank`` is gone (proved from the kernel); return the monotonic time
    it was seen gone.  ``cid``'s precondition if it never published its pid or outlives
    ``timeout``."""
    pid = published_pid(ctx, rank, cid)
    died = observe.wait_dead(pid, timeout)
    if died is None:
        raise PreconditionError(cid, f"rank {rank} (pid {pid}) is still alive")
    return died


# What a refusal of a second, concurrent broadcast says about itself (BCAST-15's wording).
_CONCURRENCY_WORDS: Final = (
    "concurren",
    "re-entrant",
    "reentrant",
    "in progress",
    "in flight",
    "running",
    "busy",
    "underway",
    "at a time",
    "already",
    "another thread",
)


def check_refusal_says_concurrent(raised: Raised, rank: int) -> None:
    """BCAST-15: a refused concurrent broadcast says why (one of the usual phrasings)."""
    check(
        "BCAST-15",
        any(w in raised.message.lower() for w in _CONCURRENCY_WORDS),
        "a refused concurrent broadcast says so",
        raised,
        rank=rank,
    )
