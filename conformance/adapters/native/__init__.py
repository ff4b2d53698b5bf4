"""Example adapter: a wire-v1 broadcaster written in C, loaded with ctypes.

``cbcast.c`` is compiled on first use with the system C compiler (see
``_build``); ``adapter.make`` is the factory the suite loads with
``--tpbcast-impl tpbcast.conformance.adapters.native.adapter:make``.  The C
library keeps one process-global broadcaster: one per process, as the harness
runs ranks.  See README.md for plugging in your own native library.
"""

from __future__ import annotations

from ._build import NativeBuildError, library_path
from ._errors import (
    NativeBroadcastError,
    NativeBrokenError,
    NativeConfigurationError,
    NativeHandshakeError,
    NativeNotInitializedError,
    NativePeerClosedError,
    NativeReinitMismatchError,
    NativeSecurityError,
    NativeTimeoutError,
)
from .adapter import NAME, VERSION, NativeBroadcaster, make

__all__ = [
    "NAME",
    "VERSION",
    "NativeBroadcastError",
    "NativeBroadcaster",
    "NativeBrokenError",
    "NativeBuildError",
    "NativeConfigurationError",
    "NativeHandshakeError",
    "NativeNotInitializedError",
    "NativePeerClosedError",
    "NativeReinitMismatchError",
    "NativeSecurityError",
    "NativeTimeoutError",
    "library_path",
    "make",
]
