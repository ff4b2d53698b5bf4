"""The adapter contract (DESIGN.md) for the C example broadcaster, via ctypes.

``make()`` returns a fresh :class:`NativeBroadcaster`.  Because libcbcast keeps
ONE process-global broadcaster (like RTP-LLM's C++ singleton), every object in a
process drives the same native state: use one per process.  That is exactly how
the harness runs ranks (one forked process each).  Build the library in the
parent (calling ``make()`` there does it) so forked ranks do not all compile.
"""

from __future__ import annotations

import ctypes
import math
import os
from collections.abc import Iterable
from typing import Any

from ._errors import NativeBroadcastError, from_info
from ._lib import NativeLibrary, load

__all__ = ["CAPABILITIES", "NAME", "VERSION", "NativeBroadcaster", "make"]

NAME = "tpbcast-native-example"
VERSION = "0.1.0"
_LONG_MAX = 2**31 - 1  # C long is at least 32 bits
CAPABILITIES = frozenset(
    {"deadlines", "generation", "peer_credentials", "error_details", "multi_buffer"}
)


def _ms(name: str, seconds: float) -> int:
    """Seconds -> the C library's milliseconds; ``math.inf`` waits forever (-1)."""
    if seconds == math.inf:
        return -1
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{name} must be >= 0 seconds or math.inf, got {seconds!r}")
    return min(_LONG_MAX, max(1, math.ceil(seconds * 1000))) if seconds > 0 else 0


def _c_int(name: str, value: int) -> int:
    """ctypes would raise its own ArgumentError (or wrap) for ints outside C int."""
    if not -(2**31) <= value < 2**31:
        raise ValueError(f"{name} must fit a C int, got {value!r}")
    return value


class NativeBroadcaster:
    """Wire v1 broadcaster implemented in C (cbcast.c), driven through ctypes."""

    name = NAME
    version = VERSION
    capabilities = CAPABILITIES

    def __init__(self, library: NativeLibrary | None = None) -> None:
        self._lib = library if library is not None else load()
        # DESIGN.md defaults: connect 120 s, init 120 s, io 300 s.
        self._deadlines_ms = (120_000, 120_000, 300_000)

    def _error(self) -> NativeBroadcastError:
        return from_info(self._lib.last_error())

    def set_deadlines(
        self, *, connect: float | None = None, init: float | None = None, io: float | None = None
    ) -> None:
        """Deadlines in seconds for the next ``initialize`` and later broadcasts.

        An argument left as ``None`` keeps its current value (defaults: connect
        120, init 120, io 300); ``math.inf`` waits forever.
        """
        connect_ms, init_ms, io_ms = self._deadlines_ms
        if connect is not None:
            connect_ms = _ms("connect", connect)
        if init is not None:
            init_ms = _ms("init", init)
        if io is not None:
            io_ms = _ms("io", io)
        self._deadlines_ms = (connect_ms, init_ms, io_ms)
        self._lib.set_deadlines_ms(*self._deadlines_ms)

    def initialize(self, rank: int, world_size: int, base_path: str) -> None:
        path = os.fsencode(base_path)
        if b"\0" in path:  # a C string would silently end at the NUL
            raise ValueError(f"base_path must not contain NUL bytes, got {base_path!r}")
        # The C state is per process: make it carry THIS object's deadlines.
        self._lib.set_deadlines_ms(*self._deadlines_ms)
        if self._lib.init(_c_int("rank", rank), _c_int("world_size", world_size), path) != 0:
            raise self._error()

    def broadcast(self, buffer: Any, root: int = 0) -> None:
        """Send ``buffer`` from rank 0, or receive it in place on the others.

        ``buffer`` is a writable C-contiguous bytes-like object (bytearray,
        memoryview, numpy array) or a list/tuple of them, sent back to back.
        Read-only ``bytes`` are accepted on the root only (copied first).
        """
        buffers: Iterable[Any] = buffer if isinstance(buffer, list | tuple) else (buffer,)
        for one in buffers:
            self._broadcast_one(one, root)

    def _broadcast_one(self, buffer: Any, root: int) -> None:
        view = memoryview(buffer)
        if not view.c_contiguous:
            raise ValueError(
                f"broadcast needs a C-contiguous buffer, got a {type(buffer).__name__} "
                f"of shape {view.shape} strides {view.strides}"
            )
        flat = view.cast("B") if view.ndim != 1 or view.format != "B" else view
        nbytes = flat.nbytes
        if nbytes == 0:
            status = self._lib.broadcast(None, 0, _c_int("root", root))
        else:
            if flat.readonly:
                if self._lib.is_initialized() and self._lib.rank() != 0:
                    raise TypeError(
                        "a peer receives in place: pass a writable buffer (bytearray, "
                        f"memoryview, numpy array), not a read-only {type(buffer).__name__}"
                    )
                flat = memoryview(bytearray(flat))  # the root only reads: a copy is enough
            chunk = (ctypes.c_char * nbytes).from_buffer(flat)
            try:
                status = self._lib.broadcast(ctypes.addressof(chunk), nbytes, _c_int("root", root))
            finally:
                del chunk  # release the buffer export at once
        if status != 0:
            raise self._error()

    def reset(self) -> None:
        self._lib.reset()

    def is_initialized(self) -> bool:
        return self._lib.is_initialized()

    @property
    def generation(self) -> int:
        """+1 on every ``reset()``, even when uninitialized (as the reference)."""
        return self._lib.generation()


def make() -> NativeBroadcaster:
    """Factory for ``--tpbcast-impl tpbcast.conformance.adapters.native.adapter:make``."""
    return NativeBroadcaster()
