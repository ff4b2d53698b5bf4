"""The adapter contract (DESIGN.md) for the C example broadcaster, via ctypes.

``make()`` returns a fresh :class:`NativeBroadcaster`.  Because libcbcast keeps
ONE process-global broadcaster (like RTP-LLM's C++ singleton), every object in a
process drives the same native state: use one per process.  That is exactly how
the harness runs ranks (one forked process each).  Build the library in the
parent (calling ``make()`` there does it) so forked ranks do not all compile.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable
from typing import Any

from ._errors import NativeBroadcastError, from_info
from ._lib import NativeLibrary, load

__all__ = ["CAPABILITIES", "NAME", "VERSION", "NativeBroadcaster", "make"]

NAME = "tpbcast-native-example"
VERSION = "0.1.0"
CAPABILITIES = frozenset(
    {"deadlines", "generation", "peer_credentials", "error_details", "multi_buffer"}
)


def _ms(seconds: float | None) -> int:
    """Seconds -> the C library's milliseconds; ``None`` waits forever (-1)."""
    if seconds is None:
        return -1
    if seconds < 0:
        raise ValueError(f"a deadline must be >= 0 seconds or None, got {seconds!r}")
    return max(1, round(seconds * 1000)) if seconds > 0 else 0


class NativeBroadcaster:
    """Wire v1 broadcaster implemented in C (cbcast.c), driven through ctypes."""

    name = NAME
    version = VERSION
    capabilities = CAPABILITIES

    def __init__(self, library: NativeLibrary | None = None) -> None:
        self._lib = library if library is not None else load()
        # DESIGN.md defaults: connect 120 s, init 120 s, io 300 s.
        self._deadlines_ms = (120_000, 120_000, 300_000)

    def _raise(self) -> NativeBroadcastError:
        return from_info(self._lib.last_error())

    def set_deadlines(
        self, *, connect: float | None = None, init: float | None = None, io: float | None = None
    ) -> None:
        """Deadlines in seconds for the next ``initialize`` and later broadcasts.

        An argument left as ``None`` keeps its current value (defaults: connect
        120, init 120, io 300); ``float("inf")`` waits forever.
        """
        connect_ms, init_ms, io_ms = self._deadlines_ms
        if connect is not None:
            connect_ms = -1 if connect == float("inf") else _ms(connect)
        if init is not None:
            init_ms = -1 if init == float("inf") else _ms(init)
        if io is not None:
            io_ms = -1 if io == float("inf") else _ms(io)
        self._deadlines_ms = (connect_ms, init_ms, io_ms)
        self._lib.set_deadlines_ms(connect_ms, init_ms, io_ms)

    def initialize(self, rank: int, world_size: int, base_path: str) -> None:
        if self._lib.init(rank, world_size, base_path.encode()) != 0:
            raise self._raise()

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
            status = self._lib.broadcast(None, 0, root)
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
                status = self._lib.broadcast(ctypes.addressof(chunk), nbytes, root)
            finally:
                del chunk  # release the buffer export at once
        if status != 0:
            raise self._raise()

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
