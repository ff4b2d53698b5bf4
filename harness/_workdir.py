"""The private, short working directory of a group, and what the ranks left in it.

Short by construction (``/tmp/tpb-XXXXXXXX``): ``<workdir>/g_0.sock`` stays far below the
107-byte ``sun_path`` limit even when TMPDIR is long (pytest's tmp_path often is not).
Mode 0700 (mkdtemp), so no other user can plant or connect to sockets in it.

The harness keeps its own capture files in ``<workdir>/.tpb``; everything else that exists
after the group and did not exist (same inode) before it is a leftover.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

__all__ = ["HARNESS_SUBDIR", "WORKDIR_PREFIX", "Workdir"]

WORKDIR_PREFIX = "tpb-"
HARNESS_SUBDIR = ".tpb"
_SUN_PATH_MAX = 107


def _short_tmp_root() -> str:
    for root in ("/tmp", tempfile.gettempdir()):
        if os.access(root, os.W_OK | os.X_OK):
            return root
    return tempfile.gettempdir()  # pragma: no cover


@dataclass
class Workdir:
    path: str
    owned: bool
    harness_dir: str
    before: dict[str, int]

    @classmethod
    def open(cls, path: str | None) -> Workdir:
        if path is None:
            made = tempfile.mkdtemp(prefix=WORKDIR_PREFIX, dir=_short_tmp_root())
            owned, before = True, {}
        else:
            made = os.path.abspath(path)
            os.makedirs(made, mode=0o700, exist_ok=True)
            owned, before = False, _snapshot(made)
        sock = f"{made}/g_0.sock"
        if len(sock.encode()) > _SUN_PATH_MAX:
            if owned:
                shutil.rmtree(made, ignore_errors=True)
            raise ValueError(
                f"workdir {made!r} is too long for Unix sockets: {sock!r} is "
                f"{len(sock.encode())} bytes, sun_path holds {_SUN_PATH_MAX}; "
                "pass a shorter workdir (or none: the harness makes one under /tmp)"
            )
        harness_dir = f"{made}/{HARNESS_SUBDIR}"
        os.mkdir(harness_dir, 0o700)
        return cls(made, owned, harness_dir, before)

    def file(self, rank: int, kind: str) -> str:
        return f"{self.harness_dir}/{rank}.{kind}"

    def leftovers(self) -> tuple[str, ...]:
        """Relative paths created during the group and still present (harness files aside)."""
        now = _snapshot(self.path)
        return tuple(sorted(p for p, ino in now.items() if self.before.get(p) != ino))

    def remove(self) -> None:
        """Remove what we made: the whole dir if we created it, else only our subdir."""
        shutil.rmtree(self.path if self.owned else self.harness_dir, ignore_errors=True)


def _snapshot(root: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == ".":
            if HARNESS_SUBDIR in dirnames:
                dirnames.remove(HARNESS_SUBDIR)
            rel_dir = ""
        for name in filenames + dirnames:
            rel = f"{rel_dir}/{name}" if rel_dir else name
            try:
                found[rel] = os.lstat(os.path.join(dirpath, name)).st_ino
            except OSError:
                continue
    return found
