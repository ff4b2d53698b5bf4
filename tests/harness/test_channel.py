"""The result channel survives a rank killed mid-write; the mesh spots dead ranks."""

from __future__ import annotations

import os
import struct

from tpbcast.harness._channel import RecordWriter, frame, ok_record, read_records
from tpbcast.harness._mesh import Mesh


def test_records_round_trip_and_a_torn_tail_is_dropped(tmp_path):
    path = str(tmp_path / "res")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    writer = RecordWriter(fd)
    writer.write("fault", {"a": 1})
    writer.write("ok", [1, 2, 3])
    os.write(fd, struct.pack("<I", 1000) + b"partial")  # killed mid-record
    os.close(fd)
    records = read_records(path)
    assert [(r.kind, r.payload) for r in records] == [("fault", {"a": 1}), ("ok", [1, 2, 3])]
    assert read_records(str(tmp_path / "missing")) == []


def test_unloadable_record_is_reported_not_fatal(tmp_path):
    path = str(tmp_path / "res")
    with open(path, "wb") as f:
        f.write(struct.pack("<I", 3) + b"xyz")
    (rec,) = read_records(path)
    assert rec.kind == "unloadable"


def test_mesh_sees_a_peer_end_and_keeps_its_messages():
    mesh = Mesh.create(2)
    pid = os.fork()
    if pid == 0:  # rank 1: send one message, then end
        code = 1
        try:
            end = mesh.for_rank(1)
            end.send("N", "hello", deadline=float("inf"))
            code = 0
        finally:
            os._exit(code)
    end0 = mesh.for_rank(0)
    os.waitpid(pid, 0)
    for _ in range(3):
        end0.pump(5.0)
        if 1 in end0.ended:
            break
    fds = [end0.inbox, end0.life_w, *end0.peers_w.values(), *end0.life_r.values()]
    for fd in fds:
        os.close(fd)
    assert end0.ended == {1}
    assert end0.messages == [("N", 1, "hello")]


def test_the_record_of_a_returned_none_is_the_same_as_a_pickled_one(tmp_path):
    """``ok_record(None)`` is bytes built once at import (no pickling in a fresh rank);
    they read back exactly like the ``ok`` record of any other value."""
    path = str(tmp_path / "res")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    writer = RecordWriter(fd)
    writer.append(ok_record(None))
    writer.append(ok_record(0))
    os.close(fd)
    assert [(r.kind, r.payload) for r in read_records(path)] == [
        ("ok", {"value": None}),
        ("ok", {"value": 0}),
    ]


def test_a_short_write_is_finished_in_order(tmp_path, monkeypatch):
    path = str(tmp_path / "res")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    real_write = os.write

    def three_bytes_at_a_time(target, data):
        return real_write(target, bytes(data[:3]))

    monkeypatch.setattr(os, "write", three_bytes_at_a_time)
    RecordWriter(fd).append(ok_record(None))
    RecordWriter(fd).write("fault", {"a": 1})
    RecordWriter(fd).append(frame("ok", [1]))
    monkeypatch.undo()
    os.close(fd)
    assert [(r.kind, r.payload) for r in read_records(path)] == [
        ("ok", {"value": None}),
        ("fault", {"a": 1}),
        ("ok", [1]),
    ]


def test_the_returned_none_record_alone_reads_back_as_a_fresh_ok_record(tmp_path):
    """The runner reads this, the commonest file, without an unpickler: it must still be
    the record the rank wrote, and callers must not share (and so alter) one payload."""
    path = tmp_path / "0.res"
    path.write_bytes(ok_record(None))
    first, second = read_records(str(path)), read_records(str(path))
    assert [(r.kind, r.payload) for r in first] == [("ok", {"value": None})]
    assert first[0].payload is not second[0].payload
