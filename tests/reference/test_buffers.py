"""Buffer flattening (white-box, in-process: no numpy or torch in the parent)."""

from __future__ import annotations

import array
import ctypes

import pytest

from tpbcast.reference_impl import ConfigurationError
from tpbcast.reference_impl._buffers import prepare_buffers


class Pair(ctypes.Structure):
    _fields_ = (("a", ctypes.c_int32), ("b", ctypes.c_double))


def test_bytes_like_objects_flatten_in_order() -> None:
    items = [b"ab", bytearray(b"cd"), memoryview(b"ef"), array.array("h", [1, 2])]
    prepared = prepare_buffers(items, writable=False)
    shorts = array.array("h", [1, 2]).tobytes()
    assert [bytes(v) for v in prepared.views] == [b"ab", b"cd", b"ef", shorts]
    assert prepared.total == 2 + 2 + 2 + 4
    assert all(v.format == "B" and v.ndim == 1 for v in prepared.views)
    prepared.release()


def test_writes_land_in_the_callers_buffers() -> None:
    pairs = (Pair * 2)()
    grid = memoryview(bytearray(6)).cast("B", (2, 3))  # 2-D, contiguous
    doubles = array.array("d", [0.0, 0.0])
    prepared = prepare_buffers([pairs, grid, doubles], writable=True)
    assert [len(v) for v in prepared.views] == [ctypes.sizeof(pairs), 6, 16]
    prepared.views[0][:4] = (7).to_bytes(4, "little")
    prepared.views[1][:] = b"\x01" * 6
    prepared.views[2][:8] = array.array("d", [2.5]).tobytes()
    prepared.finish()
    assert pairs[0].a == 7 and grid.tolist() == [[1, 1, 1], [1, 1, 1]] and doubles[0] == 2.5
    prepared.release()


def test_strided_1d_memoryview_is_copied_back() -> None:
    backing = bytearray(b"abcdefgh")
    strided = memoryview(backing)[::2]
    assert not strided.c_contiguous
    prepared = prepare_buffers(strided, writable=True)
    assert bytes(prepared.views[0]) == b"aceg"
    prepared.views[0][:] = b"WXYZ"
    prepared.finish()
    assert backing == b"WbXdYfZh"
    prepared.release()


@pytest.mark.parametrize(
    ("obj", "match"),
    [
        (b"bytes", "read-only"),
        (memoryview(b"ro"), "read-only"),
        ("text", "not a buffer"),
        (3, "not a buffer"),
        ([bytearray(1), None], "buffer 1 of type NoneType"),
    ],
)
def test_unusable_buffers_on_a_peer(obj: object, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        prepare_buffers(obj, writable=True)


def test_bytes_are_fine_on_the_root() -> None:
    prepared = prepare_buffers([b"x", memoryview(b"yz")], writable=False)
    assert prepared.total == 3
    prepared.release()
