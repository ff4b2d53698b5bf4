"""Shared plumbing of the vLLM repros: plain Python + vLLM, no tpbcast.

Each repro forks a writer and readers (as vLLM's workers are forked), passes the queue
handle through a pipe (vLLM uses a torch.distributed broadcast), and supervises them from
the parent with a hard deadline: every child is SIGKILLed and reaped at the end, whatever
happened, so a repro never hangs.  Copy this file next to a repro to run it elsewhere.

vLLM is set up as its parallel_state does: ``MessageQueue(n_reader, n_local_reader,
local_reader_ranks=[1..n], max_chunk_bytes=1 << 22, max_chunks=6)``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import pickle
import select
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# vLLM logs its long-wait warning every VLLM_RINGBUFFER_WARNING_INTERVAL seconds (60 by
# default); 2 s lets a repro see it.  Its IPC socket files go to VLLM_RPC_BASE_PATH
# (default: tempfile.gettempdir(), i.e. /tmp); a private directory lets a repro count them
# without littering /tmp.  Both must be set before vLLM is imported.
os.environ.setdefault("VLLM_RINGBUFFER_WARNING_INTERVAL", "2")
RPC_DIR = os.environ.setdefault(
    "VLLM_RPC_BASE_PATH", tempfile.mkdtemp(prefix="vllm-repro-rpc-", dir="/tmp")
)

# vLLM 0.33 configures its loggers only when an engine starts (vllm/logger.py,
# configure_logging); INFO on stderr, as an engine would, shows its long-wait warnings.
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")

from vllm.distributed.device_communicators.shm_broadcast import (  # noqa: E402
    Handle,
    MessageQueue,
)

MAX_CHUNK_BYTES = 1 << 22  # vllm/distributed/parallel_state.py: (cpu_group, 1 << 22, 6)
MAX_CHUNKS = 6
Target = Callable[["Report"], None]


class Report:
    """A child's line-per-event channel to the parent (JSON lines on a pipe)."""

    def __init__(self, fd: int, go_fd: int) -> None:
        self.fd = fd
        self.go_fd = go_fd

    def wait_go(self) -> None:
        """Block until the parent calls ``Child.go()`` (or dies)."""
        os.read(self.go_fd, 1)

    def __call__(self, event: str, **details: Any) -> None:
        line = json.dumps({"event": event, "t": time.monotonic(), **details}) + "\n"
        os.write(self.fd, line.encode())


@dataclass
class Child:
    name: str
    pid: int
    fd: int  # read end of its report pipe
    log: str  # its stdout+stderr
    go_fd: int  # write end of its go pipe
    events: list[dict[str, Any]] = field(default_factory=list)
    status: int | None = None
    _partial: bytes = b""

    def go(self) -> None:
        with contextlib.suppress(BrokenPipeError):  # the child is gone already
            os.write(self.go_fd, b"g")

    def has(self, event: str) -> bool:
        return any(e["event"] == event for e in self.events)

    def get(self, event: str) -> dict[str, Any] | None:
        return next((e for e in self.events if e["event"] == event), None)

    def alive(self) -> bool:
        if self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = status
        return self.status is None

    def output(self) -> str:
        try:
            with open(self.log, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""


class Group:
    """Forked children under one deadline; ``close()`` kills and reaps every one."""

    def __init__(self, deadline: float) -> None:
        self.deadline = time.monotonic() + deadline
        self.children: list[Child] = []
        self.logdir = tempfile.mkdtemp(prefix="vllm-repro-log-")  # kept: the children's output

    def fork(self, name: str, target: Target, *, new_pgroup: bool = False) -> Child:
        rfd, wfd = os.pipe()
        go_r, go_w = os.pipe()
        log = os.path.join(self.logdir, f"{name}.log")
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # child
            code = 0
            try:
                os.close(rfd)
                os.close(go_w)
                if new_pgroup:
                    os.setpgid(0, 0)
                out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(out, 1)
                os.dup2(out, 2)
                target(Report(wfd, go_r))
            except BaseException as exc:
                with contextlib.suppress(OSError):
                    Report(wfd, go_r)("raised", type=type(exc).__name__, message=str(exc))
                code = 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        os.close(wfd)
        os.close(go_r)
        child = Child(name, pid, rfd, log, go_w)
        self.children.append(child)
        return child

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def pump(self, seconds: float) -> None:
        """Collect events from every child for ``seconds`` (never past the deadline)."""
        until = min(self.deadline, time.monotonic() + seconds)
        while True:
            fds = [c.fd for c in self.children if c.fd >= 0]
            wait = until - time.monotonic()
            if not fds or wait <= 0:
                return
            ready, _, _ = select.select(fds, [], [], wait)
            for child in self.children:
                if child.fd in ready:
                    data = os.read(child.fd, 65536)
                    if not data:
                        os.close(child.fd)
                        child.fd = -1
                        continue
                    child._partial += data
                    *lines, child._partial = child._partial.split(b"\n")
                    child.events += [json.loads(line) for line in lines if line]

    def wait_for(self, child: Child, event: str, seconds: float) -> dict[str, Any] | None:
        until = min(self.deadline, time.monotonic() + seconds)
        while not child.has(event) and time.monotonic() < until:
            self.pump(min(0.05, until - time.monotonic()))
            if child.fd < 0 and not child.has(event):
                break
        return child.get(event)

    def close(self) -> None:
        """Kill and reap every child, then remove the queue segments they left."""
        for child in self.children:
            if child.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGKILL)
                _, child.status = os.waitpid(child.pid, 0)
            if child.fd >= 0:
                os.close(child.fd)
                child.fd = -1
            if child.go_fd >= 0:
                os.close(child.go_fd)
                child.go_fd = -1
        for child in self.children:
            if child.has("handle"):
                segment = handle_of(child).buffer_handle
                if segment is not None:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(f"/dev/shm/{segment[3]}")


def new_writer_queue(n_readers: int) -> MessageQueue:
    return MessageQueue(
        n_reader=n_readers,
        n_local_reader=n_readers,
        local_reader_ranks=list(range(1, n_readers + 1)),
        max_chunk_bytes=MAX_CHUNK_BYTES,
        max_chunks=MAX_CHUNKS,
    )


def writer_with_handle(body: Callable[[MessageQueue, Report], None], n_readers: int) -> Target:
    """A writer target: create the queue, report its handle, wait_until_ready, ``body``."""

    def target(report: Report) -> None:
        queue = new_writer_queue(n_readers)
        report("handle", handle=pickle.dumps(queue.export_handle()).hex(), pid=os.getpid())
        queue.wait_until_ready()
        report("ready")
        body(queue, report)

    return target


def handle_of(child: Child) -> Handle:
    event = child.get("handle")
    if event is None:
        raise RuntimeError(f"{child.name} reported no handle:\n{child.output()}")
    handle: Handle = pickle.loads(bytes.fromhex(event["handle"]))  # noqa: S301 - our child
    return handle


def reader_of(handle: Handle, rank: int, body: Callable[[MessageQueue, Report], None]) -> Target:
    def target(report: Report) -> None:
        queue = MessageQueue.create_from_handle(handle, rank)
        queue.wait_until_ready()
        report("ready")
        body(queue, report)

    return target


def main_loop(one_run: Callable[[int], bool], doc: str | None) -> int:
    """``--runs N`` runs of ``one_run(i)`` (True: the defect showed); prints the tally and
    returns 1 if the defect showed at least once.  ``doc``: the repro's docstring."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1, help="how many times (default 1)")
    args = parser.parse_args()
    shown = 0
    try:
        for i in range(args.runs):
            shown += bool(one_run(i))
    finally:
        if RPC_DIR.startswith("/tmp/vllm-repro-rpc-"):
            shutil.rmtree(RPC_DIR, ignore_errors=True)
    print(f"SUMMARY: defect shown in {shown} of {args.runs} run(s)")
    return 1 if shown else 0
