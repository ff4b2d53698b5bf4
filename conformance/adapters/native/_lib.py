"""Typed ctypes binding of ``cbcast.c``: one place that knows the C signatures.

ctypes calls return ``Any``; every wrapper here converts to a precise Python type
so the adapter above it is checked by ``mypy --strict``.  ctypes releases the GIL
during each call, so a blocking broadcast does not stall other Python threads.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

from ._build import library_path

__all__ = ["ErrorInfo", "Kind", "NativeLibrary", "load"]


class Kind:
    """Error kinds reported by ``cb_last_error_info`` (the enum in cbcast.c)."""

    OK = 0
    CONFIG = 1
    NOT_INIT = 2
    BROKEN = 3
    HANDSHAKE = 4
    CLOSED = 5
    TIMEOUT = 6
    SECURITY = 7
    OS = 8
    MISMATCH = 9


class _CErrorInfo(ctypes.Structure):
    _fields_ = (
        ("kind", ctypes.c_int),
        ("rank", ctypes.c_int),
        ("peer", ctypes.c_int),
        ("err", ctypes.c_int),
        ("bytes_done", ctypes.c_longlong),
        ("bytes_total", ctypes.c_longlong),
        ("elapsed_ms", ctypes.c_longlong),
        ("phase", ctypes.c_char_p),
        ("path", ctypes.c_char_p),
    )


@dataclass(frozen=True)
class ErrorInfo:
    """The last error of the library, copied out of C memory.

    ``err`` is an errno value, ``-1`` for "peer closed" (EOF) or ``0`` when the
    message alone explains it; ``peer`` is ``-1`` when no peer is involved.
    """

    message: str
    kind: int
    rank: int
    peer: int
    err: int
    bytes_done: int
    bytes_total: int
    elapsed: float
    phase: str
    path: str


class NativeLibrary:
    """The loaded ``libcbcast``; its state is process-global (one broadcaster per process)."""

    def __init__(self, cdll: ctypes.CDLL) -> None:
        self._lib = cdll
        cdll.cb_init.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_char_p)
        cdll.cb_init.restype = ctypes.c_int
        cdll.cb_broadcast.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        cdll.cb_broadcast.restype = ctypes.c_int
        cdll.cb_reset.argtypes = ()
        cdll.cb_reset.restype = None
        cdll.cb_is_initialized.argtypes = ()
        cdll.cb_is_initialized.restype = ctypes.c_int
        cdll.cb_set_deadlines_ms.argtypes = (ctypes.c_long, ctypes.c_long, ctypes.c_long)
        cdll.cb_set_deadlines_ms.restype = None
        cdll.cb_rank.argtypes = ()
        cdll.cb_rank.restype = ctypes.c_int
        cdll.cb_generation.argtypes = ()
        cdll.cb_generation.restype = ctypes.c_ulonglong
        cdll.cb_last_error.argtypes = ()
        cdll.cb_last_error.restype = ctypes.c_char_p
        cdll.cb_last_error_info.argtypes = (ctypes.POINTER(_CErrorInfo),)
        cdll.cb_last_error_info.restype = ctypes.c_int

    def init(self, rank: int, world_size: int, base_path: bytes) -> int:
        return int(self._lib.cb_init(rank, world_size, base_path))

    def broadcast(self, address: int | None, nbytes: int, root: int) -> int:
        return int(self._lib.cb_broadcast(address, nbytes, root))

    def reset(self) -> None:
        self._lib.cb_reset()

    def is_initialized(self) -> bool:
        return bool(self._lib.cb_is_initialized())

    def set_deadlines_ms(self, connect: int, init: int, io: int) -> None:
        self._lib.cb_set_deadlines_ms(connect, init, io)

    def rank(self) -> int:
        return int(self._lib.cb_rank())

    def generation(self) -> int:
        return int(self._lib.cb_generation())

    def last_error(self) -> ErrorInfo:
        raw = self._lib.cb_last_error()
        message = raw.decode(errors="replace") if isinstance(raw, bytes) else ""
        c = _CErrorInfo()
        self._lib.cb_last_error_info(ctypes.byref(c))
        return ErrorInfo(
            message=message,
            kind=int(c.kind),
            rank=int(c.rank),
            peer=int(c.peer),
            err=int(c.err),
            bytes_done=int(c.bytes_done),
            bytes_total=int(c.bytes_total),
            elapsed=int(c.elapsed_ms) / 1000.0,
            phase=(c.phase or b"").decode(errors="replace"),
            path=(c.path or b"").decode(errors="replace"),
        )


@functools.cache
def load() -> NativeLibrary:
    """Build (if needed) and load the library once per process.

    dlopen of the same file returns the same handle anyway; caching keeps the
    argtypes set up once and makes the process-global state explicit.
    """
    return NativeLibrary(ctypes.CDLL(str(library_path())))
