"""Everything that happens inside a forked rank, from fork to ``os._exit``.

The one rule: a forked rank never returns into the caller's code (pytest!). Every path,
including a bug in this module, ends in ``os._exit``. Order matters and is commented.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # CPython's C module behind signal
import contextlib
import faulthandler
import os
import pickle
import signal
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ._channel import RecordWriter, ok_record
from ._context import RankContext
from ._exitpipe import ExitEnd, report_failure
from ._faults import PlannedFault
from ._forksafety import make_rank_torch_safe
from ._leaks import LeakWatch, note_held, watch_this_rank
from ._mesh import Mesh
from ._observe import describe_fd, open_fds
from ._plumbing import private_fds
from ._proc import (
    PR_SET_PDEATHSIG_KILL,
    devnull_fd,
    save_coverage,
    set_pdeathsig,
)
from ._tempenv import point_temp_dirs
from ._workdir import CaptureFds, disable_pooling

__all__ = ["RankSpec", "make_context", "rank_main", "skip_reason"]

_SIG_DFL = int(signal.SIG_DFL)
_SIGUSR1 = int(signal.SIGUSR1)

# Exit codes of the bootstrap itself (never used for a target's own outcome).
EXIT_ORPHANED = 71  # parent died between fork and PR_SET_PDEATHSIG
EXIT_BOOTSTRAP = 70  # the harness failed inside the rank before/after the target

#: Code objects of harness frames that call a target on the rank's behalf (a warm rank's
#: dispatch loop adds its own): cut from the top of a reported traceback.
DISPATCH_CODES: set[object] = set()


@dataclass(frozen=True)
class RankSpec:
    """What a rank needs, fixed in the parent before fork (inherited, never pickled)."""

    rank: int
    world_size: int
    parent_pid: int
    workdir: str
    capture: CaptureFds  # opened by the parent
    seed: int
    start: float
    deadline: float
    timeout: float
    restore_handlers: tuple[tuple[int, object], ...]  # the parent's, undoing its deferral
    reset_signals: tuple[int, ...]
    reset_wakeup_fd: bool
    signal_mask: tuple[int, ...]  # the parent's, restored once our handlers exist
    single_torch: bool
    close_fds: tuple[int, ...]
    exit_end: ExitEnd  # held until exit; a byte on it wakes the parent early (_exitpipe)
    check_fds: bool
    faults: Mapping[str, tuple[PlannedFault, ...]]
    leak_watch: LeakWatch | None = None  # what existed outside the workdir at the start


class _FdBytes:
    """``sys.stdout.buffer`` of :class:`_FdText`: bytes straight to the fd."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        return len(data)

    def flush(self) -> None:
        pass

    def fileno(self) -> int:
        return self._fd


class _FdText(_FdBytes):
    """A minimal unbuffered text stream on an fd, used as ``sys.stdout``/``sys.stderr`` in
    ranks: every write reaches the capture file at once (survives SIGKILL), and it is far
    cheaper to create in a fresh fork than ``io.TextIOWrapper`` (codec lookup, buffers:
    each page a forked child touches costs a copy-on-write fault)."""

    encoding = "utf-8"
    errors = "backslashreplace"

    def __init__(self, fd: int) -> None:
        super().__init__(fd)
        self.buffer = _FdBytes(fd)

    def write(self, text: str) -> int:  # type: ignore[override]
        super().write(text.encode("utf-8", "backslashreplace"))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    @property
    def closed(self) -> bool:
        return False


# Built once, at import in the parent: a rank only installs them (creating objects in a
# fresh fork touches type and allocator pages, each a copy-on-write fault; ~45 per rank).
_STREAMS = (("stdout", "__stdout__", _FdText(1)), ("stderr", "__stderr__", _FdText(2)))

# The streams a rank replaces, kept referenced until ``os._exit``: dropping the last
# reference would deallocate the parent's stream objects in the rank, which flushes (their
# buffered bytes would land in this rank's capture) and touches their pages (~75 us of
# copy-on-write faults per rank, measured).
_REPLACED: list[tuple[object, ...]] = []


def _exc_type_name(exc: BaseException) -> str:
    cls = type(exc)
    mod = cls.__module__
    return cls.__qualname__ if mod in ("builtins", "__main__") else f"{mod}.{cls.__qualname__}"


def _pickled_or_none(exc: BaseException) -> bytes | None:
    """The exception itself, pickled, so the runner can hand the caller a real object to
    ``isinstance`` (a layer above reads its fields instead of parsing its text); None when
    it does not pickle.  Pickled apart from the record: an unpicklable exception must not
    cost the record its type, message and traceback."""
    try:
        return pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return None


# The exceptions that mean "skip this test", matched by name along the MRO so the harness
# imports neither unittest nor pytest (which may be absent): unittest's SkipTest (torch's
# skip decorators raise it) and pytest's ``pytest.skip`` (``Skipped``, a BaseException
# whose ``__module__`` pytest sets to "builtins": its base class names its home).
_SKIPTEST = "unittest.case.SkipTest"
_PYTEST_OUTCOME = "_pytest.outcomes.OutcomeException"


def skip_reason(exc: BaseException) -> str | None:
    """The reason if ``exc`` asks to skip the test (``unittest.SkipTest``, ``pytest.skip``
    or a subclass), else None."""
    mro = type(exc).__mro__
    names = {f"{cls.__module__}.{cls.__qualname__}" for cls in mro}
    pytest_skip = _PYTEST_OUTCOME in names and any(c.__qualname__ == "Skipped" for c in mro)
    if _SKIPTEST not in names and not pytest_skip:
        return None
    reason = getattr(exc, "msg", None)  # pytest's Skipped keeps it there
    return str(reason) if reason else _exc_message(exc)


def _exc_message(exc: BaseException) -> str:
    """``str(exc)``, unless that raises too: the rank must still report the exception
    (``traceback`` already copes; a plain ``str()`` here lost the whole outcome)."""
    try:
        return str(exc)
    except Exception as err:
        return f"<str() of the exception failed: {type(err).__name__}: {err}>"


def make_context(spec: RankSpec, mesh: Mesh, writer: RecordWriter) -> RankContext:
    """The rank's context, built in the parent before any rank is forked.

    Nothing in it depends on the child (no pid, no clock): built here, a rank saves the
    copy-on-write faults of creating it after the fork (~40 per rank), and the parent
    pays nothing extra, since none of its pages are shared with a child yet.
    """
    return RankContext(
        rank=spec.rank,
        world_size=spec.world_size,
        workdir=spec.workdir,
        seed=spec.seed,
        deadline=spec.deadline,
        start=spec.start,
        timeout=spec.timeout,
        mesh=mesh,
        writer=writer,
        faults=spec.faults,
    )


def rank_main(
    spec: RankSpec,
    ctx: RankContext,
    writer: RecordWriter,
    target: Callable[..., object],
    args: tuple[object, ...],
) -> None:
    """Run in the child right after ``os.fork()``; never returns.

    A failure of the harness itself goes to the rank's own stderr capture, also when it
    happens before step 4 below made fd 2 that capture: fd 2 is still the parent's then
    (pytest's stderr), where nobody would connect it to this rank's report.
    """
    code = EXIT_BOOTSTRAP
    progress = _Progress()
    try:
        code = _run(spec, ctx, writer, target, args, progress=progress)
    except BaseException:
        when = "after" if progress.captured else "before"
        text = (
            f"tpbcast harness: rank {spec.rank} (pid {os.getpid()}) failed inside the "
            f"harness {when} its output capture started:\n{traceback.format_exc()}"
        )
        with contextlib.suppress(BaseException):
            os.write(
                2 if progress.captured else spec.capture.stderr,
                text.encode(errors="backslashreplace"),
            )
    finally:
        try:
            if code != 0:  # wake the parent now, not at the end of its short-group wait
                report_failure(spec.exit_end)
        finally:
            os._exit(code)


class _Progress:
    """How far the bootstrap got (one flag: whether fd 2 is our capture yet)."""

    captured = False


def _run(
    spec: RankSpec,
    ctx: RankContext,
    writer: RecordWriter,
    target: Callable[..., object],
    args: tuple[object, ...],
    *,
    progress: _Progress,
) -> int:
    # 1. Own process group (the parent does the same from its side, closing the race),
    #    so the runner can SIGKILL the rank and everything it forked with one killpg.
    os.setpgid(0, 0)
    # 2. Die with the parent. If it died before prctl took effect, we were reparented:
    #    leave now instead of running unsupervised.
    set_pdeathsig(PR_SET_PDEATHSIG_KILL)
    if os.getppid() != spec.parent_pid:
        return EXIT_ORPHANED
    watch_this_rank(spec.leak_watch)  # a fault that SIGKILLs this rank notes what it held
    # 3. Signals: the parent forked with its handlers deferred (see DeferredSignals): put
    #    its own back. The parent (pytest, a plugin) may have handlers of its own; the
    #    runner computed which ones to reset before fork (SIGPIPE back to SIG_DFL by default).
    for sig, handler in spec.restore_handlers:
        _signal.signal(sig, handler)
    for sig in spec.reset_signals:
        # _signal, not signal: the public wrapper converts results to enums, which
        # touches (copy-on-write faults) dozens of pages in a fresh fork.
        _signal.signal(sig, _SIG_DFL)
    if spec.reset_wakeup_fd:
        signal.set_wakeup_fd(-1)
    # 4. Drop the other ranks' pipe ends (see _mesh) and capture files, then capture at
    #    the fd level into our files (opened by the parent: no file creation here):
    #    survives SIGKILL and C-level writes.
    for fd in spec.close_fds:
        os.close(fd)
    out, err, stk = spec.capture.stdout, spec.capture.stderr, spec.capture.stack
    os.dup2(devnull_fd(), 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    progress.captured = True
    os.close(out)
    os.close(err)
    _REPLACED.append((sys.stdin, sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__))
    sys.stdin = None
    # Replace pytest's capture objects too: they write to pytest's files, not to fd 1/2.
    for name, dunder, stream in _STREAMS:
        setattr(sys, name, stream)
        setattr(sys, dunder, stream)
    # 5. Stack dumps: SIGUSR1 -> every thread's Python stack into the stk file (the runner
    #    sends it to hung ranks); crashes (SIGSEGV, SIGABRT, ...) -> stack on stderr.
    faulthandler.register(_SIGUSR1, file=stk, all_threads=True, chain=False)
    faulthandler.enable(file=2, all_threads=True)
    # 5b. Every handler is in place: let in the signals held since fork (see
    #     _proc.fork_child). One sent right after fork is delivered now, to our handler.
    _signal.pthread_sigmask(_signal.SIG_SETMASK, spec.signal_mask)
    # 6. The torch fork hazard (see _forksafety); nested groups clean up after themselves.
    if spec.single_torch:
        make_rank_torch_safe()
    disable_pooling()
    # 6b. TMPDIR and the engines' base-path variables -> the group's workdir (_tempenv).
    point_temp_dirs(spec.workdir)
    # 7. The target, with the fd snapshot around it when asked; ctx and the writer (on
    #    the res capture fd) were built in the parent (make_context).
    before = open_fds() if spec.check_fds else set()
    try:
        value = target(ctx, *args)
    except SystemExit as exc:
        _finish(spec, writer, before)
        _flush_and_save()
        return _system_exit_code(exc)
    except BaseException as exc:
        _finish(spec, writer, before)
        reason = skip_reason(exc)
        if reason is not None:  # a skip is an outcome, not a failure (exit 0: no early wake)
            writer.write("skipped", {"type": _exc_type_name(exc), "message": reason})
            _flush_and_save()
            return 0
        writer.write(
            "raised",
            {
                "type": _exc_type_name(exc),
                "message": _exc_message(exc),
                "traceback": _traceback_text(exc),
                "exception": _pickled_or_none(exc),
            },
        )
        _flush_and_save()
        return 1
    _finish(spec, writer, before)
    # Pickled here, written after the try: a failed write (ENOSPC) must not be reported as
    # a value that does not pickle.
    try:
        record = ok_record(value)
    except Exception as exc:
        writer.write(
            "raised",
            {
                "type": "tpbcast.harness.UnpicklableResult",
                "message": (
                    f"rank {spec.rank} returned a value of type {type(value).__name__} "
                    f"that cannot be pickled back to the runner: {type(exc).__name__}: {exc}"
                ),
                "traceback": "".join(traceback.format_exception(exc)),
            },
        )
        _flush_and_save()
        return 1
    writer.append(record)
    _flush_and_save()
    return 0


def _traceback_text(exc: BaseException) -> str:
    """The traceback from the target down: the harness frame that called it is cut (it
    is the same in every report and names no code of the test)."""
    tb = exc.__traceback__
    if tb is not None and tb.tb_next is not None and tb.tb_frame.f_code is _run.__code__:
        tb = tb.tb_next
    # A warm rank's dispatch loop (``_warm_rank``) sits between: its frames are cut too.
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code in DISPATCH_CODES:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _system_exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _finish(spec: RankSpec, writer: RecordWriter, before: set[int]) -> None:
    note_held(spec.leak_watch, spec.rank)  # while the rank lives: what it holds proves ownership
    if not spec.check_fds:
        return
    leaked = sorted(open_fds() - before - private_fds())  # not the adapter's channels
    writer.write("fds", tuple(describe_fd(fd) for fd in leaked))


def _flush_and_save() -> None:
    for stream in (sys.stdout, sys.stderr):
        if type(stream) is _FdText:
            continue  # unbuffered: nothing to flush (and no code to run in a fresh fork)
        try:  # noqa: SIM105 - contextlib.suppress costs copy-on-write faults here
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    save_coverage()
