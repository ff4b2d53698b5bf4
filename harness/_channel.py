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

__all__ = ["Record", "RecordWriter", "read_records"]

_LEN = struct.Struct("<I")


@dataclass(frozen=True)
class Record:
    """``kind`` is ``"fault"``, ``"fds"``, ``"ok"`` or ``"raised"``; ``payload`` depends on it."""

    kind: str
    payload: object


class RecordWriter:
    """Appends records to an fd owned by the rank (O_APPEND, no buffering)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, kind: str, payload: object) -> None:
        """Pickle and append; raises ``pickle.PicklingError``/``TypeError`` for bad payloads
        *before* writing anything, so a failed record never corrupts the channel."""
        body = pickle.dumps(Record(kind, payload), protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(_LEN.pack(len(body)) + body)
        while view:
            written = os.write(self.fd, view)
            view = view[written:]


def read_records(path: str) -> list[Record]:
    """All complete records in ``path`` (missing file = no records)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    records: list[Record] = []
    offset = 0
    while offset + _LEN.size <= len(data):
        (length,) = _LEN.unpack_from(data, offset)
        start = offset + _LEN.size
        if start + length > len(data):
            break  # the rank died mid-write: drop the torn tail
        try:
            record = pickle.loads(data[start : start + length])  # noqa: S301 - our own ranks
        except Exception as exc:  # noqa: BLE001 - an unloadable value is reported, not fatal
            record = Record("unloadable", f"{type(exc).__name__}: {exc}")
        if isinstance(record, Record):
            records.append(record)
        offset = start + length
    return records
