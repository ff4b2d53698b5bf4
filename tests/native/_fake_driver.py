"""A scripted ``exec:`` driver in Python, for the cases a real one cannot be made to show.

Run as ``python _fake_driver.py MODE``; speaks the protocol on fd 0 (the socket) with no
broadcaster behind it. Modes:

* ``ok``: every call succeeds (a one-rank group that echoes broadcasts).
* ``timeout``: initialize answers a ``timeout`` error with every detail filled.
* ``crash``: broadcast dies of SIGSEGV mid-call (after reading the request).
* ``garbage``: broadcast answers a status byte that does not exist.
* ``caps=<names>``: hello declares these capabilities (comma-separated).
* ``reset_fails``: reset answers a ``broken`` error (a driver whose reset can fail).

In every mode ``G`` (generation) answers how many I, B, D and R requests arrived so far:
a test proves with it that a refused call never reached the driver.
"""

from __future__ import annotations

import os
import signal
import struct
import sys


def _read(n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = os.read(0, n - len(out))
        if not chunk:
            sys.exit(0)  # the rank closed the channel
        out += chunk
    return out


def _string(value: str) -> bytes:
    data = value.encode()
    return struct.pack("<I", len(data)) + data


def _reply(body: bytes) -> None:
    os.write(1, struct.pack("<I", len(body)) + body)


def _error(cls: str, message: str) -> bytes:
    details = struct.pack("<iiiqqq", 1, 0, 110, 10, 100, 250_000)
    return b"\x01" + _string(cls) + _string(message) + details + _string("initialize")
    # (phase, then path and errno_name follow; added by the caller)


def main(mode: str) -> None:
    caps = mode.partition("=")[2].replace(",", " ") if mode.startswith("caps=") else ""
    asked = 0
    while True:
        body = _read(struct.unpack("<I", _read(4))[0])
        op = body[:1]
        asked += op in (b"I", b"B", b"D", b"R")
        if op == b"H":
            _reply(b"\x00" + struct.pack("<i", 1) + _string("fake") + _string("9") + _string(caps))
        elif op == b"I" and mode == "timeout":
            _reply(
                _error("timeout", "rank 1 initialize: fake deadline passed")
                + _string("/x/g")
                + _string("")
            )
        elif op == b"B":
            nbytes = struct.unpack("<Q", body[5:13])[0]
            if mode == "crash":
                os.kill(os.getpid(), signal.SIGSEGV)
            if mode == "garbage":
                _reply(b"\x07")
                continue
            _reply(b"\x00" + struct.pack("<Q", nbytes) + body[13:])
        elif op == b"Q":
            _reply(b"\x00\x00")
        elif op == b"G":
            _reply(b"\x00" + struct.pack("<Q", asked))
        elif op == b"R" and mode == "reset_fails":
            _reply(
                b"\x01"
                + _string("broken")
                + _string("reset: close(7) failed")
                + struct.pack("<iiiqqq", 3, -1, 5, -1, -1, -1)
                + _string("reset")
                + _string("")
                + _string("")
            )
        else:
            _reply(b"\x00")


if __name__ == "__main__":
    main(sys.argv[1])
