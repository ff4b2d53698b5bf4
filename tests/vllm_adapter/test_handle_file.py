"""The vLLM adapter's rendezvous file (``conformance/adapters/vllm/_handle.py``): written
atomically and private, read back strictly, polled with a deadline.  No vLLM needed."""

from __future__ import annotations

import json
import os
import stat
import threading

import pytest

from tpbcast.conformance.adapters.vllm import _handle
from tpbcast.conformance.adapters.vllm._handle import (
    HandleFileError,
    handle_path,
    read_handle,
    wait_for_handle,
    write_handle,
)

HANDLE = {"local_reader_ranks": [1], "buffer_handle": [1, 4194304, 6, "psm_x"]}


def test_path_is_next_to_the_base_path(tmp_path):
    assert handle_path(str(tmp_path / "g")) == str(tmp_path / "g_vllm_handle.json")


def test_written_0600_and_read_back(tmp_path):
    path = str(tmp_path / "g_vllm_handle.json")
    old = os.umask(0)  # even a permissive umask gives a private file
    try:
        entry = write_handle(path, 2, HANDLE)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert read_handle(path) == entry
    assert entry.pid == os.getpid() and entry.world_size == 2 and dict(entry.handle) == HANDLE
    assert os.listdir(tmp_path) == ["g_vllm_handle.json"]  # no temporary left


def test_a_failed_replace_leaves_neither_file_nor_temporary(tmp_path, monkeypatch):
    path = str(tmp_path / "g_vllm_handle.json")

    def broken(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_handle.os, "replace", broken)
    with pytest.raises(OSError, match="No space"):
        write_handle(path, 2, HANDLE)
    assert os.listdir(tmp_path) == []


def test_a_reader_never_sees_a_partial_file(tmp_path):
    """Rewritten 300 times while another thread reads: every read is a whole document."""
    path = str(tmp_path / "g_vllm_handle.json")
    big = {**HANDLE, "padding": "x" * 200_000}  # larger than one write() may move
    write_handle(path, 2, big)
    stop = threading.Event()
    seen: list[object] = []

    def reader():
        while not stop.is_set():
            try:
                seen.append(read_handle(path).nonce)
            except Exception as exc:  # a partial file would be a HandleFileError here
                seen.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for _ in range(300):
            write_handle(path, 2, big)
    finally:
        stop.set()
        thread.join(10)
    errors = [s for s in seen if isinstance(s, Exception)]
    assert seen and not errors, errors[:3]


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"{not json", "not JSON"),
        (b'{"format": "something-else"}', "not a tpbcast-vllm-handle/1"),
        (b'{"format": "tpbcast-vllm-handle/1", "pid": "1"}', "'pid' is not a int"),
    ],
)
def test_malformed_files_are_refused(tmp_path, content, match):
    path = tmp_path / "h.json"
    path.write_bytes(content)
    with pytest.raises(HandleFileError, match=match):
        read_handle(str(path))


def test_wait_skips_a_used_nonce_and_a_dead_writer_then_times_out(tmp_path):
    path = str(tmp_path / "g_vllm_handle.json")
    entry = write_handle(path, 2, HANDLE)
    used: set[str] = set()
    got = wait_for_handle(path, rank=1, world_size=2, deadline=1.0, used=used)
    assert got.nonce == entry.nonce and used == {entry.nonce}
    with pytest.raises(TimeoutError, match="previous initialize"):  # the same file again
        wait_for_handle(path, rank=1, world_size=2, deadline=0.05, used=used)
    doc = json.loads((tmp_path / "g_vllm_handle.json").read_text())
    doc.update(nonce="f" * 32, start_time=doc["start_time"] + 1)  # another process' start
    (tmp_path / "g_vllm_handle.json").write_text(json.dumps(doc))
    with pytest.raises(TimeoutError, match=r"rank 1: .*within the connect deadline .*stale"):
        wait_for_handle(path, rank=1, world_size=2, deadline=0.05, used=set())


def test_wait_refuses_another_world_size(tmp_path):
    path = str(tmp_path / "g_vllm_handle.json")
    write_handle(path, 4, HANDLE)
    with pytest.raises(HandleFileError, match="world_size 4, this rank has world_size 2"):
        wait_for_handle(path, rank=1, world_size=2, deadline=1.0, used=set())
