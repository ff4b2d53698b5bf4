"""The queue handle's rendezvous file: vLLM passes it through a torch.distributed
collective; the adapter contract has no process group, so rank 0 writes it to a file next
to the base path and the readers poll for it.

No vLLM import here (the self-tests run without vLLM).  The handle is plain data (lists,
ints, strings) and travels as JSON, never as a pickle: a file planted at the path must not
run code in the readers.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "FORMAT",
    "HandleFile",
    "HandleFileError",
    "handle_path",
    "process_start_time",
    "read_handle",
    "remove_if_ours",
    "wait_for_handle",
    "write_handle",
]

FORMAT: Final = "tpbcast-vllm-handle/1"
SUFFIX: Final = "_vllm_handle.json"
POLL_INTERVAL: Final = 0.01


class HandleFileError(RuntimeError):
    """The handle file is missing, unreadable, malformed or from another group."""


@dataclass(frozen=True)
class HandleFile:
    """One handle file's content: who wrote it, for which group, and vLLM's handle."""

    pid: int
    start_time: int  # the writer's start time in clock ticks (/proc/<pid>/stat field 22)
    nonce: str  # fresh per write: a reader never uses the same handle twice
    world_size: int
    handle: Mapping[str, Any]  # dataclasses.asdict(vllm ... Handle)


def handle_path(base_path: str) -> str:
    """``<base_path>_vllm_handle.json``: next to where rank 0's socket would be."""
    return f"{base_path}{SUFFIX}"


def process_start_time(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat`` (None: no such process), against pid reuse."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


def write_handle(path: str, world_size: int, handle: Mapping[str, Any]) -> HandleFile:
    """Write the file atomically: a 0600 temporary in the same directory, then
    ``os.replace``, so a reader sees either no file or a whole one."""
    pid = os.getpid()
    start = process_start_time(pid)
    entry = HandleFile(pid, start or 0, secrets.token_hex(16), world_size, dict(handle))
    doc = {
        "format": FORMAT,
        "pid": entry.pid,
        "start_time": entry.start_time,
        "nonce": entry.nonce,
        "world_size": entry.world_size,
        "handle": entry.handle,
    }
    data = json.dumps(doc, sort_keys=True).encode()
    tmp = f"{path}.{pid}.{entry.nonce[:8]}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return entry


def _field(doc: Mapping[str, Any], key: str, kind: type, path: str) -> Any:
    value = doc.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise HandleFileError(f"handle file {path}: {key!r} is not a {kind.__name__}: {value!r}")
    return value


def read_handle(path: str) -> HandleFile | None:
    """The file's content, or None if there is no file (yet).

    :raises HandleFileError: the file exists but is not a handle file of this format.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        name = errno.errorcode.get(exc.errno or 0, "unknown errno")
        raise HandleFileError(
            f"handle file {path}: cannot read it: {name} ({exc.strerror or exc})"
        ) from None
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise HandleFileError(f"handle file {path}: not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise HandleFileError(f"handle file {path}: not a {FORMAT} document")
    return HandleFile(
        pid=_field(doc, "pid", int, path),
        start_time=_field(doc, "start_time", int, path),
        nonce=_field(doc, "nonce", str, path),
        world_size=_field(doc, "world_size", int, path),
        handle=_field(doc, "handle", dict, path),
    )


def _writer_alive(entry: HandleFile) -> bool:
    return process_start_time(entry.pid) == entry.start_time


def wait_for_handle(
    path: str,
    *,
    rank: int,
    world_size: int,
    deadline: float,
    used: set[str],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> HandleFile:
    """Poll for a handle file this reader may use, until ``deadline`` seconds from now.

    Skipped (polling on): no file yet, a file whose writer process is gone (a previous
    group's), a file whose nonce this process already used (the writer of the previous
    initialize has not replaced it yet).  A file for another world size is an error.

    :raises TimeoutError: no usable file within the deadline (names path, rank, seconds).
    """
    start = clock()
    last = "no file"
    while True:
        entry = read_handle(path)
        if entry is not None:
            if entry.world_size != world_size:
                raise HandleFileError(
                    f"rank {rank}: handle file {path} is for world_size {entry.world_size}, "
                    f"this rank has world_size {world_size}"
                )
            if entry.nonce in used:
                last = "only the handle of the previous initialize"
            elif not _writer_alive(entry):
                last = f"only a stale handle (writer pid {entry.pid} is gone)"
            else:
                used.add(entry.nonce)
                return entry
        elapsed = clock() - start
        if elapsed >= deadline:
            raise TimeoutError(
                f"rank {rank}: no vLLM queue handle from rank 0 at {path} within the "
                f"connect deadline of {deadline:g} s ({last})"
            )
        sleep(min(POLL_INTERVAL, max(0.0, deadline - elapsed)))


def remove_if_ours(path: str, entry: HandleFile) -> None:
    """Remove the handle file at ``path`` if it is still ``entry`` (same nonce): a later
    group's rank 0 may have replaced it, and its file is not ours to remove."""
    try:
        current = read_handle(path)
    except RuntimeError:
        return
    if current is not None and current.nonce == entry.nonce:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
