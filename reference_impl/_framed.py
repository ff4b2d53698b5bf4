"""The framed wire's layout: the one place that knows its bytes, tokens and decision words.

The framed wire (RTP-LLM PR #1119, ``shared/reference/rtp_llm_framed_wire.md``) keeps wire
v1's bootstrap and adds, per group, an 8-byte state file ``<base>.state`` that every rank
maps, and per broadcast a 16-byte header, a 1-byte acknowledgement from every peer and one
commit-or-abort decision that rank 0 publishes in the shared words.  Everything here is
data and tiny operations on it; the exchange that uses them is ``_exchange``, the
bootstrap steps are ``_bootstrap``.

Why the decision is published with a lock and not an atomic CAS: Python has no atomic
compare-and-swap on shared memory.  A ``lockf`` on the state file's descriptor (the inode
stays alive after the unlink, so every rank locks the same one) makes load-compare-store
one step for every rank of OUR implementation.  A C++ rank of the upstream class does not
take that lock, so a mixed group relies on its CAS alone (documented in DESIGN.md).
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import stat
import struct
import time
from collections.abc import Mapping
from typing import Final

from ._errors import BroadcastError, ConfigurationError, SecurityError, errno_name

__all__ = [
    "ABORT_BIT",
    "ACK",
    "HEADER",
    "HEADER_SIZE",
    "MAGIC",
    "STATE_READY",
    "STATE_SIZE",
    "TIMEOUT_ENV",
    "TIMEOUT_MAX_MS",
    "DecisionBoard",
    "broadcast_timeout_from_env",
    "next_generation",
    "pack_header",
    "state_path",
    "unpack_header",
]

MAGIC: Final = 0x5254504C4C4D5450
"""The header's first 8 bytes as a native u64 (big-endian, the value reads "RTPLLMTP")."""
HEADER: Final = struct.Struct("=QQ")
"""Magic, then the payload's byte count; native order, 16 bytes, no padding."""
HEADER_SIZE: Final = HEADER.size
STATE_READY: Final = 0x6A
"""A peer's byte to rank 0 once it has mapped the state file (bootstrap)."""
ACK: Final = 0x6B
"""A peer's byte to rank 0 once it holds the whole payload of a frame."""
ABORT_BIT: Final = 0x80000000
_GENERATION_MASK: Final = 0x7FFFFFFF
STATE_SIZE: Final = 8
"""Two native u32 decision words; generation g uses word ``g & 1``."""
_WORD: Final = struct.Struct("=I")
TIMEOUT_ENV: Final = "RTP_LLM_CPU_TP_BROADCASTER_BROADCAST_TIMEOUT_MS"
TIMEOUT_MAX_MS: Final = 86_400_000
# How long a publisher keeps trying to take the decision lock: the critical section is a
# load and a store, so only a stopped rank holding it could make this wait.
_LOCK_PATIENCE: Final = 5.0
_LOCK_RETRY: Final = 0.001


def state_path(base_path: str) -> str:
    """The group's decision file: ``<base_path>.state`` (exists only during bootstrap)."""
    return f"{base_path}.state"


def pack_header(nbytes: int) -> bytes:
    return HEADER.pack(MAGIC, nbytes)


def unpack_header(raw: bytes | bytearray | memoryview) -> tuple[int, int]:
    """(magic, nbytes) of a 16-byte header."""
    magic, nbytes = HEADER.unpack(raw)
    return int(magic), int(nbytes)


def next_generation(previous: int) -> int:
    """31-bit generations wrapping from 0x7FFFFFFF to 0 (0 is a valid wrapped commit)."""
    return (previous + 1) & _GENERATION_MASK


def broadcast_timeout_from_env(environ: Mapping[str, str]) -> tuple[bool, float | None]:
    """The broadcast deadline the environment asks for: (given, seconds).

    ``(False, None)`` when the variable is unset (the configuration decides); else
    ``(True, None)`` for 0 (wait forever) or ``(True, seconds)``.  The whole value must be
    a base-10 integer in [0, TIMEOUT_MAX_MS]; anything else is refused naming the
    variable, before any socket or file is touched.
    """
    raw = environ.get(TIMEOUT_ENV)
    if raw is None:
        return False, None
    text = raw.strip()
    digits = text[1:] if text[:1] == "+" else text
    if not digits.isdigit() or not digits.isascii() or len(digits) > 9:
        raise ConfigurationError(
            f"invalid {TIMEOUT_ENV}={raw!r}: expected an integer in [0, {TIMEOUT_MAX_MS}] "
            "(milliseconds; 0 waits forever)"
        )
    value = int(digits)
    if value > TIMEOUT_MAX_MS:
        raise ConfigurationError(
            f"invalid {TIMEOUT_ENV}={raw!r}: {value} ms is over the limit of "
            f"{TIMEOUT_MAX_MS} ms (24 h); 0 waits forever"
        )
    return True, (None if value == 0 else value / 1000.0)


class DecisionBoard:
    """The two shared decision words of one group, as this rank maps them.

    Made by :meth:`create` (rank 0: a new file, exclusively, 0600) or :meth:`open` (a peer:
    the file rank 0 made, refused unless it is a regular 8-byte 0600 file of our euid).
    The descriptor is kept (close-on-exec) for the decision lock; ``close`` drops both.
    """

    def __init__(self, fd: int, path: str) -> None:
        self._fd = fd
        self.path = path
        self._map: mmap.mmap | None = mmap.mmap(fd, STATE_SIZE, mmap.MAP_SHARED)

    @classmethod
    def create(cls, path: str, *, rank: int) -> DecisionBoard:
        flags = os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as exc:
            raise _file_error(exc, "create", path, rank) from exc
        try:
            os.fchmod(fd, 0o600)  # whatever the umask
            os.ftruncate(fd, STATE_SIZE)
            _check_file(fd, path, rank)
            return cls(fd, path)
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def open(cls, path: str, *, rank: int) -> DecisionBoard:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError as exc:
            raise _file_error(exc, "open", path, rank) from exc
        try:
            _check_file(fd, path, rank)
            return cls(fd, path)
        except BaseException:
            os.close(fd)
            raise

    def load(self, generation: int) -> int:
        """The word generation ``generation`` uses."""
        assert self._map is not None
        return int(_WORD.unpack_from(self._map, 4 * (generation & 1))[0])

    def publish(self, generation: int, expected: int, value: int) -> int:
        """Compare-and-swap ``expected -> value`` in ``generation``'s word.

        Returns the word's value after the attempt: ``value`` if this call published it,
        else what another rank published first.
        """
        assert self._map is not None
        offset = 4 * (generation & 1)
        self._lock()
        try:
            current = int(_WORD.unpack_from(self._map, offset)[0])
            if current != expected:
                return current
            _WORD.pack_into(self._map, offset, value)
            return value
        finally:
            fcntl.lockf(self._fd, fcntl.LOCK_UN)

    def _lock(self) -> None:
        end = time.monotonic() + _LOCK_PATIENCE
        while True:
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EINTR):
                    raise
            if time.monotonic() >= end:
                raise BroadcastError(
                    f"the decision lock of {self.path} was held for over {_LOCK_PATIENCE:g} s "
                    "(a rank stopped while publishing?)",
                    phase="decision",
                    path=self.path,
                    errno_name="ETIMEDOUT",
                )
            time.sleep(_LOCK_RETRY)  # a poll interval for a lock without a wait queue

    @property
    def fd(self) -> int:
        return self._fd

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _file_error(exc: OSError, verb: str, path: str, rank: int) -> BroadcastError:
    cls = (
        SecurityError if exc.errno in (errno.ELOOP, errno.EEXIST, errno.EACCES) else BroadcastError
    )
    return cls(
        f"{verb} of the shared state file failed: {exc.strerror}",
        rank=rank,
        phase="state",
        path=path,
        errno_name=errno_name(exc.errno),
    )


def _check_file(fd: int, path: str, rank: int) -> None:
    """A regular 8-byte file of our euid with mode 0600, or a SecurityError naming why."""
    st = os.fstat(fd)
    problems = []
    if not stat.S_ISREG(st.st_mode):
        problems.append("not a regular file")
    if st.st_uid != os.geteuid():
        problems.append(f"owned by uid {st.st_uid}, not our euid {os.geteuid()}")
    if stat.S_IMODE(st.st_mode) != 0o600:
        problems.append(f"mode {stat.S_IMODE(st.st_mode):04o}, not 0600")
    if st.st_size != STATE_SIZE:
        problems.append(f"{st.st_size} bytes, not {STATE_SIZE}")
    if problems:
        raise SecurityError(
            "refusing the shared state file: " + "; ".join(problems),
            rank=rank,
            phase="state",
            path=path,
        )
