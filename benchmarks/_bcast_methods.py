"""The broadcast methods ``bench_broadcast.py`` compares, each behind one small interface.

Every method moves ``n`` bytes of rank 0's payload into each peer's own preallocated,
pre-touched buffer.  A round is the same for all of them (see ``bench_broadcast.py``):
``root()`` on rank 0 and ``peer()`` on every other rank, then a 1-byte ack from every peer
to rank 0 over a pipe shared by all methods.  ``memcpy`` is the exception: an in-process
copy on rank 0, no IPC and no ack (the bandwidth ceiling of one core).

The fds a method needs across ranks (socket pairs, pipes, the shared mapping) are made by
the parent before it forks the ranks (:class:`Channels`), so no method has a bootstrap of
its own except the ones under test (the reference's wire-v1 bootstrap, gloo's store).
"""

from __future__ import annotations

import mmap
import os
import socket
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ClassVar

import numpy as np

IO_DEADLINE = 120.0  # seconds; only a broken run ever waits that long


@dataclass
class Channels:
    """Made in the parent before fork; every rank inherits all of it."""

    tp: int
    max_size: int
    payload: Any  # numpy uint8 array, rank 0's bytes (peers know them too: verification)
    ack: list[tuple[int, int]] = field(default_factory=list)  # per peer k-1: (read, write)
    star: list[tuple[socket.socket, socket.socket]] = field(default_factory=list)
    notify: list[tuple[int, int]] = field(default_factory=list)  # shm's 1-byte notify
    shared: mmap.mmap | None = None

    @classmethod
    def create(cls, tp: int, max_size: int, seed: int) -> Channels:
        rng = np.random.default_rng(seed)
        payload = rng.integers(0, 256, max_size, dtype=np.uint8)
        chans = cls(tp=tp, max_size=max_size, payload=payload)
        for _ in range(1, tp):
            chans.ack.append(os.pipe())
            chans.star.append(socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM))
            chans.notify.append(os.pipe())
        # Anonymous MAP_SHARED: shared with the forked ranks, no file, no resource tracker.
        chans.shared = mmap.mmap(-1, max_size, flags=mmap.MAP_SHARED)
        return chans

    def close(self) -> None:
        for r, w in (*self.ack, *self.notify):
            os.close(r)
            os.close(w)
        for a, b in self.star:
            a.close()
            b.close()
        self.ack, self.notify, self.star = [], [], []
        if self.shared is not None:
            self.shared.close()
            self.shared = None


class Method:
    """One way to broadcast; ``prepare(n)`` makes every view outside the timed loop."""

    name: ClassVar[str]
    label: ClassVar[str]  # legend text
    acked: ClassVar[bool] = True

    def __init__(self, ctx: Any, chans: Channels, recv: Any) -> None:
        self.rank: int = ctx.rank
        self.tp: int = ctx.world_size
        self.chans = chans
        self.recv = recv  # this rank's receive buffer (numpy uint8, max_size, pre-touched)

    def prepare(self, n: int) -> None:
        raise NotImplementedError

    def root(self) -> None:
        raise NotImplementedError

    def peer(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release what ``__init__`` made (called on every rank)."""


class Reference(Method):
    """The reference broadcaster through the adapter contract (``--impl``)."""

    name = "reference"
    label = "reference (tpbcast)"

    def __init__(self, ctx: Any, chans: Channels, recv: Any, *, impl: str) -> None:
        super().__init__(ctx, chans, recv)
        from tpbcast.harness import load_implementation

        self.impl = load_implementation(impl)
        self.bcast: Any = self.impl.create()
        if self.impl.supports("deadlines"):
            self.bcast.set_deadlines(connect=30.0, init=30.0, io=IO_DEADLINE)
        self.bcast.initialize(ctx.rank, ctx.world_size, ctx.base_path)
        self.view: memoryview = memoryview(b"")

    def prepare(self, n: int) -> None:
        src = self.chans.payload if self.rank == 0 else self.recv
        self.view = memoryview(src)[:n]

    def root(self) -> None:
        self.bcast.broadcast(self.view)

    def peer(self) -> None:
        self.bcast.broadcast(self.view)

    def close(self) -> None:
        self.view.release()
        self.bcast.reset()


class RawStar(Method):
    """The Python floor: blocking ``sendall`` to each peer in turn, ``recv_into`` loop."""

    name = "raw"
    label = "raw UDS star (sendall/recv_into)"

    def __init__(self, ctx: Any, chans: Channels, recv: Any) -> None:
        super().__init__(ctx, chans, recv)
        if self.rank == 0:
            self.socks = [a for a, _ in chans.star]
        else:
            self.sock = chans.star[self.rank - 1][1]
        self.view: memoryview = memoryview(b"")
        self.n = 0

    def prepare(self, n: int) -> None:
        src = self.chans.payload if self.rank == 0 else self.recv
        self.view, self.n = memoryview(src)[:n], n

    def root(self) -> None:
        for sock in self.socks:
            sock.sendall(self.view)

    def peer(self) -> None:
        view, n, got = self.view, self.n, 0
        while got < n:
            k = self.sock.recv_into(view[got:])
            if k == 0:
                raise ConnectionError(f"rank {self.rank}: raw star: rank 0 closed")
            got += k

    def close(self) -> None:
        self.view.release()


class Gloo(Method):
    """``torch.distributed.broadcast`` over gloo (FileStore in the group's workdir)."""

    name = "gloo"
    label = "torch.distributed gloo broadcast"

    def __init__(self, ctx: Any, chans: Channels, recv: Any) -> None:
        super().__init__(ctx, chans, recv)
        import torch
        import torch.distributed as dist

        self.dist = dist
        store = dist.FileStore(os.path.join(ctx.workdir, "gloo.store"), ctx.world_size)
        dist.init_process_group(
            "gloo",
            store=store,
            rank=ctx.rank,
            world_size=ctx.world_size,
            timeout=timedelta(seconds=IO_DEADLINE),
        )
        src = chans.payload if self.rank == 0 else recv
        self.whole = torch.from_numpy(src)
        self.tensor = self.whole[:0]

    def prepare(self, n: int) -> None:
        self.tensor = self.whole[:n]

    def root(self) -> None:
        self.dist.broadcast(self.tensor, src=0)

    def peer(self) -> None:
        self.dist.broadcast(self.tensor, src=0)

    def close(self) -> None:
        self.dist.destroy_process_group()


class Shm(Method):
    """Shared memory + notify: rank 0 copies into a shared mapping, writes 1 byte to each
    peer's pipe; a peer reads its byte and copies out into its own buffer."""

    name = "shm"
    label = "shared memory + pipe notify"

    def __init__(self, ctx: Any, chans: Channels, recv: Any) -> None:
        super().__init__(ctx, chans, recv)
        assert chans.shared is not None
        self.shared = np.frombuffer(chans.shared, dtype=np.uint8)
        self.notify_w = [w for _, w in chans.notify]
        self.notify_r = chans.notify[self.rank - 1][0] if self.rank else -1
        self.src, self.dst = self.shared[:0], self.shared[:0]

    def prepare(self, n: int) -> None:
        if self.rank == 0:
            self.src, self.dst = self.chans.payload[:n], self.shared[:n]
        else:
            self.src, self.dst = self.shared[:n], self.recv[:n]

    def root(self) -> None:
        np.copyto(self.dst, self.src)
        for fd in self.notify_w:
            os.write(fd, b"\x01")

    def peer(self) -> None:
        if os.read(self.notify_r, 1) != b"\x01":
            raise ConnectionError(f"rank {self.rank}: shm notify pipe closed")
        np.copyto(self.dst, self.src)

    def close(self) -> None:
        del self.shared, self.src, self.dst  # drop the exports of the mapping


class Memcpy(Method):
    """The floor: one ``np.copyto`` of n bytes on rank 0; no IPC, no ack."""

    name = "memcpy"
    label = "memcpy floor (np.copyto, no IPC)"
    acked = False

    def __init__(self, ctx: Any, chans: Channels, recv: Any) -> None:
        super().__init__(ctx, chans, recv)
        self.src, self.dst = recv[:0], recv[:0]

    def prepare(self, n: int) -> None:
        self.src, self.dst = self.chans.payload[:n], self.recv[:n]

    def root(self) -> None:
        np.copyto(self.dst, self.src)

    def peer(self) -> None:
        """Nothing: peers take no part."""


ALL = ("reference", "raw", "gloo", "shm", "memcpy")


def make(name: str, ctx: Any, chans: Channels, recv: Any, *, impl: str) -> Method:
    if name == "reference":
        return Reference(ctx, chans, recv, impl=impl)
    classes: dict[str, type[Method]] = {"raw": RawStar, "gloo": Gloo, "shm": Shm, "memcpy": Memcpy}
    return classes[name](ctx, chans, recv)


LABELS = {
    "reference": Reference.label,
    "raw": RawStar.label,
    "gloo": Gloo.label,
    "shm": Shm.label,
    "memcpy": Memcpy.label,
}
