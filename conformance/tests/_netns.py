"""Two hosts on one machine: network namespaces the suite creates, joined by a veth pair.

TCP-4 needs a peer whose *host* vanishes: its connections neither close nor reset, they
just stop carrying anything.  A killed process cannot stage that (its kernel sends FIN or
RST), so the test gives ranks their own network namespace ("host"), joined to the other
host by a veth pair, and takes the link down.  Everything stays inside the two namespaces:
the addresses (:data:`ADDRESSES`) exist only there, the veth ends are created directly in
them (never in the machine's namespace, so their names never collide), and nothing is
routed out.  Namespace names carry the creating process's pid, its start time and a counter
(tests run in parallel under ``-n auto``); :func:`two_hosts` always deletes them, also when
the test fails, and first deletes the namespaces of creators that are gone (a worker killed
with SIGKILL never ran its ``finally``): the start time tells a reused pid from the owner.

Needs root (``CAP_SYS_ADMIN``) and ``ip`` (iproute2); where either is missing,
:class:`NetnsUnavailableError` says why and the test reports UNSUPPORTED with that reason.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

__all__ = ["ADDRESSES", "Hosts", "NetnsUnavailableError", "enter", "sweep_orphans", "two_hosts"]

ADDRESSES: Final = ("10.233.0.1", "10.233.0.2")
"""Host A's and host B's address, on the veth pair only (a /30: no other host exists)."""
PREFIX: Final = 30
IP_TIMEOUT: Final = 10.0
_CLONE_NEWNET: Final = 0x40000000
NETNS_DIR: Final = "/run/netns"
_OURS: Final = re.compile(r"^tpb-(?P<pid>\d+)\.(?P<start>\d+)-\d+-[ab]$")
_counter = itertools.count()


class NetnsUnavailableError(RuntimeError):
    """Network namespaces cannot be made here (not root, no ``ip``, no kernel support)."""


@dataclass(frozen=True)
class Hosts:
    """Two namespaces (``names[i]`` holds ``ADDRESSES[i]`` on interface ``links[i]``)."""

    names: tuple[str, str]
    links: tuple[str, str] = ("tpbveth0", "tpbveth1")

    def vanish(self, host: int) -> None:
        """Take ``host``'s link down: from now on it sends and receives nothing (no FIN,
        no RST reaches the other host; its processes live on)."""
        _ip("-n", self.names[host], "link", "set", self.links[host], "down")

    def link_up(self, host: int) -> bool:
        """Whether ``host``'s link is up (the proof that :meth:`vanish` happened)."""
        out = _ip("-n", self.names[host], "-o", "link", "show", self.links[host])
        return "state UP" in out or ",UP" in out.split(">")[0]


def _ip(*args: str) -> str:
    ip = shutil.which("ip")
    if ip is None:
        raise NetnsUnavailableError("iproute2's `ip` is not on PATH")
    try:
        done = subprocess.run(
            [ip, *args], capture_output=True, text=True, timeout=IP_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        raise NetnsUnavailableError(
            f"`ip {' '.join(args)}` did not finish within {IP_TIMEOUT:g} s"
        ) from None
    if done.returncode != 0:
        raise NetnsUnavailableError(
            f"`ip {' '.join(args)}` failed with status {done.returncode}: "
            f"{done.stderr.strip() or done.stdout.strip()}"
        )
    return done.stdout


@contextlib.contextmanager
def two_hosts() -> Iterator[Hosts]:
    """Create hosts A and B (module docstring); delete both namespaces on the way out."""
    if os.geteuid() != 0:
        raise NetnsUnavailableError(f"creating network namespaces needs root (euid {os.geteuid()})")
    sweep_orphans()
    serial = next(_counter)
    owner = f"{os.getpid()}.{_start_stamp(os.getpid())}"
    names = (f"tpb-{owner}-{serial}-a", f"tpb-{owner}-{serial}-b")
    hosts = Hosts(names)
    made: list[str] = []
    try:
        for name in names:
            made.append(name)  # first: a timed-out `ip netns add` may still have made it
            _ip("netns", "add", name)
        a, b = hosts.links
        _ip(
            "link",
            "add",
            a,
            "netns",
            names[0],
            "type",
            "veth",
            "peer",
            "name",
            b,
            "netns",
            names[1],
        )
        for name, link, address in zip(names, hosts.links, ADDRESSES, strict=True):
            _ip("-n", name, "addr", "add", f"{address}/{PREFIX}", "dev", link)
            _ip("-n", name, "link", "set", "lo", "up")
            _ip("-n", name, "link", "set", link, "up")
        yield hosts
    finally:
        for name in made:  # deleting a namespace deletes the veth end inside it
            _delete(name)


def _start_stamp(pid: int) -> int | None:
    """The process's start time in milliseconds; None if it is gone (or a zombie)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return int(proc.create_time() * 1000)
    except psutil.NoSuchProcess:
        return None


def _delete(name: str) -> None:
    if os.path.exists(os.path.join(NETNS_DIR, name)):
        with contextlib.suppress(NetnsUnavailableError):
            _ip("netns", "del", name)


def sweep_orphans() -> list[str]:
    """Delete the namespaces of ours whose creator is gone (same pid, other start time, or
    no such process); never one of a live creator.  Returns the names deleted."""
    try:
        entries = os.listdir(NETNS_DIR)
    except OSError:
        return []
    swept = []
    for name in sorted(entries):
        match = _OURS.match(name)
        if match is None:
            continue
        if str(_start_stamp(int(match["pid"]))) != match["start"]:
            _delete(name)
            swept.append(name)
    return swept


def enter(name: str) -> None:
    """Move the calling process (a forked rank, before it opens any socket) into namespace
    ``name``: ``setns(2)`` on ``/run/netns/<name>`` (Python 3.11 has no ``os.setns``)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into network namespace {name}: {os.strerror(err)}")
    finally:
        os.close(fd)
