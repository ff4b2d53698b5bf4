"""The rank side of a warm group: a loop that runs one target per command, then resets.

A warm rank is an ordinary rank (``_rank.rank_main``) whose target is :func:`serve`: it
runs the group's setup once (a torch process group, say), then reads commands from its
own pipe, runs each target by reference with a fresh :class:`WarmContext`, puts back the
state a target may have changed, and replies on its reply pipe.  A target that raises is
not caught here: the exception leaves ``serve``, so ``rank_main`` records it and the rank
exits exactly as a rank of ``run_ranks`` does (per-rank traceback, exit code, fail-fast);
the parent then re-forks the group for the next target.  A skip is an answer, not an end.

Frames on both pipes are ``<u32 length><pickle>``, written with plain ``os.write`` loops.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # CPython's C module behind signal
import importlib
import os
import pickle
import signal
import struct
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ._channel import frame
from ._context import RankContext
from ._faults import PlannedFault
from ._rank import DISPATCH_CODES, skip_reason

__all__ = [
    "RankPipes",
    "TargetRef",
    "WarmContext",
    "read_frame",
    "serve",
    "write_all",
]

_LEN = struct.Struct("<I")


@dataclass(frozen=True)
class TargetRef:
    """A target named by module and qualified name: what a warm rank imports and calls.

    Code is never pickled into a warm rank: the rank was forked from the parent, so the
    module is usually imported already, and a name resolves to the very function the
    caller passed (checked here, in the parent, before anything is sent)."""

    module: str
    qualname: str

    @classmethod
    def of(cls, target: Callable[..., object] | TargetRef) -> TargetRef:
        if isinstance(target, TargetRef):
            return target
        module = getattr(target, "__module__", None)
        qualname = getattr(target, "__qualname__", None)
        if not module or not qualname or "<" in qualname:
            raise TypeError(
                f"a warm group runs targets by reference: {target!r} has no importable "
                f"name (module {module!r}, qualname {qualname!r}); define it at module or "
                f"class level, not as a lambda or a nested function"
            )
        ref = cls(module, qualname)
        resolved = ref.resolve()
        if resolved is not target and getattr(resolved, "__func__", None) is not getattr(
            target, "__func__", target
        ):
            raise TypeError(
                f"a warm group runs targets by reference: {module}.{qualname} names "
                f"{resolved!r}, not the target passed ({target!r})"
            )
        return ref

    def resolve(self) -> Callable[..., object]:
        obj: object = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            obj = getattr(obj, part)
        if not callable(obj):
            raise TypeError(f"{self.module}.{self.qualname} is not callable: {obj!r}")
        return obj

    def __str__(self) -> str:
        return f"{self.module}:{self.qualname}"


@dataclass(frozen=True)
class RankPipes:
    """One rank's two pipe ends: commands in, replies out (inherited through fork)."""

    commands: int
    replies: int


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks: list[bytes] = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> tuple[str, object] | None:
    """One ``(kind, payload)`` frame from a blocking fd; None at EOF (the writer is gone)."""
    head = _read_exact(fd, _LEN.size)
    if head is None:
        return None
    body = _read_exact(fd, _LEN.unpack(head)[0])
    if body is None:
        return None
    kind, payload = pickle.loads(body)  # noqa: S301 - written by our own parent
    return str(kind), payload


class WarmContext(RankContext):
    """The context of one target in a warm rank: its own deadline, seed, fault plan and
    sync names (scoped by the target's sequence number, since sync point names are
    single-use per group and the group outlives the target); the mesh end is shared."""

    def __init__(self, base: RankContext, *, seq: int, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._mesh_end = base._mesh
        self._scope = f"t{seq}."

    def sync(self, name: str, timeout: float | None = None) -> None:
        super().sync(self._scope + name, timeout)

    def notify(self, name: str) -> None:
        super().notify(self._scope + name)

    def wait(self, name: str, timeout: float | None = None) -> None:
        super().wait(self._scope + name, timeout)


class RankBaseline:
    """What a target may change in its rank and the next target must not inherit.

    Put back after every target: the environment, the working directory, the umask,
    ``sys.path``, every signal disposition and the signal mask.  Not restorable, so the
    rank reports it and the parent re-forks the group: a thread the target left running,
    a child process it left behind (running or unreaped)."""

    def __init__(self) -> None:
        self.environ = dict(os.environ)
        self.cwd = os.getcwd()
        self.umask = os.umask(0o022)
        os.umask(self.umask)
        self.path = list(sys.path)
        self.handlers = {
            sig: _signal.getsignal(sig)
            for sig in signal.valid_signals()
            if sig not in (signal.SIGKILL, signal.SIGSTOP)
        }
        self.mask = _signal.pthread_sigmask(_signal.SIG_BLOCK, ())
        self.threads = {t.ident for t in threading.enumerate()}

    def restore(self) -> tuple[str, ...]:
        """Put the restorable state back; return what could not be (re-fork reasons)."""
        if dict(os.environ) != self.environ:
            for key in set(os.environ) - set(self.environ):
                del os.environ[key]
            for key, value in self.environ.items():
                if os.environ.get(key) != value:
                    os.environ[key] = value
        if os.getcwd() != self.cwd:
            os.chdir(self.cwd)
        os.umask(self.umask)
        if sys.path != self.path:
            sys.path[:] = self.path
        for sig, handler in self.handlers.items():
            if _signal.getsignal(sig) != handler and handler is not None:
                _signal.signal(sig, handler)
        _signal.pthread_sigmask(_signal.SIG_SETMASK, self.mask)
        dirty = [
            f"thread {t.name!r} left running"
            for t in threading.enumerate()
            if t.ident not in self.threads and t.is_alive()
        ]
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            pass  # no child at all: the common case
        else:
            dirty.append(f"child process {pid} left behind" if pid else "child process running")
        return tuple(dirty)


def _truncate(fds: tuple[int, ...]) -> None:
    """Empty the rank's capture files, so a report shows this target's output only."""
    for fd in fds:
        os.ftruncate(fd, 0)


Hooks = tuple[TargetRef | None, TargetRef | None, TargetRef | None, tuple[object, ...]]
"""``(setup, teardown, check, setup_args)`` of a warm group."""


def serve(ctx: RankContext, pipes: RankPipes, hooks: Hooks, capture_fds: tuple[int, ...]) -> object:
    """A warm rank's target: setup once, then one target per command until EOF.

    Returns the last target's value (the parent closes the command pipe to end a rank
    cleanly, after a failure of a peer or at the end of the group), so the rank's final
    record is the value of the target its report is about."""
    setup, teardown, check, setup_args = hooks
    if setup is not None:
        setup.resolve()(ctx, *setup_args)
    baseline = RankBaseline()
    last: object = None
    while True:
        command = read_frame(pipes.commands)
        if command is None:
            if teardown is not None:
                teardown.resolve()(ctx, *setup_args)
            return last
        _, payload = command
        assert isinstance(payload, dict)
        _truncate(capture_fds)
        start = time.monotonic()
        faults: Mapping[str, tuple[PlannedFault, ...]] = payload["faults"]
        target_ctx = WarmContext(
            ctx,
            seq=payload["seq"],
            rank=ctx.rank,
            world_size=ctx.world_size,
            workdir=ctx.workdir,
            seed=payload["seed"],
            deadline=start + payload["timeout"],
            start=start,
            timeout=payload["timeout"],
            mesh=ctx._mesh_source,
            writer=ctx._writer,
            faults=faults,
        )
        target = TargetRef(*payload["target"]).resolve()
        try:
            last = target(target_ctx, *payload["args"])
        except BaseException as exc:
            reason = skip_reason(exc)
            if reason is None:
                raise  # recorded by rank_main: the rank ends as in run_ranks
            dirty = baseline.restore()
            write_all(pipes.replies, frame("skipped", {"message": reason, "dirty": dirty}))
            last = None
            continue
        dirty = baseline.restore()
        if check is not None:
            dirty += tuple(str(why) for why in check.resolve()(ctx, *setup_args) or ())  # type: ignore[attr-defined]
        write_all(pipes.replies, frame("ok", {"value": last, "dirty": dirty}))


DISPATCH_CODES.add(serve.__code__)
