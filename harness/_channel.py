"""The one-way result channel from a rank to the runner: an append-only file of records.

A file, not a pipe: the rank may write a large return value long before the parent reads
it (a pipe would block the rank at 64 KiB), and whatever was written survives a SIGKILL one
instruction later. Each record is ``<u32 length><pickle>`` written with one ``os.write``
loop and no user-space buffering, so a fault record is on its way to the parent before the
fault acts. A truncated last record (rank killed mid-write) is ignored, never misread.
"""

from __future__ import annotations

import os
import pickle
import struct
from dataclasses import dataclass

__all__ = ["Record", "RecordWriter", "frame", "ok_record", "read_all", "read_records"]

_LEN = struct.Struct("<I")


@dataclass(frozen=True)
class Record:
    """``kind`` is ``"fault"``, ``"fds"``, ``"ok"``, ``"raised"`` or ``"skipped"``;
    ``payload`` depends on it."""

    kind: str
    payload: object


def frame(kind: str, payload: object) -> bytes:
    """One record, ready to append: ``<u32 length><pickle of (kind, payload)>``; raises
    ``pickle.PicklingError``/``TypeError`` for a payload that does not pickle."""
    body = pickle.dumps((kind, payload), protocol=pickle.HIGHEST_PROTOCOL)
    return _LEN.pack(len(body)) + body


# The record of a target that returned None (most multi-rank tests assert and return
# nothing), built once at import in the parent: a rank then writes these bytes and runs
# no pickling at all.  In a freshly forked child, pickling and framing one small record
# touches ~0.2 ms worth of pages that a plain os.write of prebuilt bytes does not.
_OK_NONE = frame("ok", {"value": None})


def ok_record(value: object) -> bytes:
    """The ``"ok"`` record of a target that returned ``value`` (errors as :func:`frame`)."""
    return _OK_NONE if value is None else frame("ok", {"value": value})


class RecordWriter:
    """Appends records to an fd owned by the rank (O_APPEND, no buffering)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, kind: str, payload: object) -> None:
        """Pickle and append; a payload that does not pickle raises *before* anything is
        written, so a failed record never corrupts the channel."""
        self.append(frame(kind, payload))

    def append(self, record: bytes) -> None:
        """Append a record from :func:`frame` / :func:`ok_record`: one ``os.write`` (one
        O_APPEND write cannot interleave with another thread's); after a short write (a
        full disk, a signal) the rest follows in order, where another thread of the rank
        could slip a record in between."""
        written = os.write(self.fd, record)
        if written < len(record):
            view = memoryview(record)[written:]
            while view:
                view = view[os.write(self.fd, view) :]


def read_all(fd: int) -> bytes:
    """Read an fd to EOF with raw ``os.read`` calls (no buffered file object)."""
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def read_records(path: str) -> list[Record]:
    """All complete records in ``path`` (missing file = no records)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return []
    try:
        data = read_all(fd)
    finally:
        os.close(fd)
    if data == _OK_NONE:  # the common case, without an unpickler (~15 us, a few faults)
        return [Record("ok", {"value": None})]
    records: list[Record] = []
    offset = 0
    while offset + _LEN.size <= len(data):
        (length,) = _LEN.unpack_from(data, offset)
        start = offset + _LEN.size
        if start + length > len(data):
            break  # the rank died mid-write: drop the torn tail
        try:
            kind, payload = pickle.loads(data[start : start + length])  # noqa: S301 - our ranks
            records.append(Record(str(kind), payload))
        except Exception as exc:
            records.append(Record("unloadable", f"{type(exc).__name__}: {exc}"))
        offset = start + length
    return records
