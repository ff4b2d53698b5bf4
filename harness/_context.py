"""What a rank's target receives: who it is, where to put sockets, and how to coordinate.

Ordering between ranks is expressed with named points, never with sleeps:

- ``ctx.sync("connected")``: a barrier; returns once every rank has reached it.
- ``ctx.notify("peer1_handshook")`` in one rank, ``ctx.wait("peer1_handshook")`` in
  another: one-way ordering ("peer 2 connects only after peer 1 handshook").

Every wait has a deadline (by default just before the group deadline), and a wait that
can no longer succeed because the ranks it needs have ended fails at once, naming them.
Names are single-use: reusing one is a bug in the test and raises ``ValueError``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from ._channel import RecordWriter
from ._faults import PlannedFault
from ._mesh import Mesh, MeshEnd
from ._outcome import FaultRecord

__all__ = ["RankContext", "SyncError", "SyncTimeoutError"]


class SyncError(RuntimeError):
    """A sync point can never be reached: the ranks it needs have ended."""


class SyncTimeoutError(SyncError, TimeoutError):
    """A sync point was not reached before its deadline."""


class RankContext:
    """Handed to ``target(ctx, *args)`` in every rank. Attributes are read-only by intent.

    ``base_path`` is ``<workdir>/g``: rank 0's socket is ``<base_path>_0.sock``, short
    enough for ``sun_path`` (107 bytes) by construction.
    """

    def __init__(
        self,
        *,
        rank: int,
        world_size: int,
        workdir: str,
        seed: int,
        deadline: float,
        start: float,
        timeout: float,
        mesh: Mesh,
        writer: RecordWriter,
        faults: Mapping[str, tuple[PlannedFault, ...]],
    ) -> None:
        self.rank = rank
        self.world_size = world_size
        self.workdir = workdir
        self.base_path = f"{workdir}/g"
        self.seed = seed
        self.deadline = deadline
        self._start = start
        self._timeout = timeout
        self._mesh_source = mesh
        self._mesh_end: MeshEnd | None = None
        self._writer = writer
        self._faults = faults
        self._hits: dict[str, int] = {}
        self._used: set[tuple[str, str]] = set()

    @property
    def _mesh(self) -> MeshEnd:
        if self._mesh_end is None:
            self._mesh_end = self._mesh_source.end_for(self.rank)
        return self._mesh_end

    def __repr__(self) -> str:
        return (
            f"RankContext(rank={self.rank}, world_size={self.world_size}, workdir={self.workdir!r})"
        )

    # -- records and faults -------------------------------------------------------------

    def elapsed(self) -> float:
        """Seconds since the group started (the clock of fault records)."""
        return time.monotonic() - self._start

    def record(self, kind: str, **details: object) -> None:
        """Add a :class:`FaultRecord` for a fault the target performs itself (e.g. a rogue
        peer sending garbage). ``point=`` may be given; other details are printed."""
        point = str(details.pop("point", ""))
        detail = ", ".join(f"{k}={v!r}" for k, v in details.items())
        self._writer.write("fault", FaultRecord(self.rank, point, kind, detail, self.elapsed()))

    def point(self, name: str) -> None:
        """A named fault point: fire the faults planned for this rank here (this hit)."""
        hit = self._hits.get(name, 0) + 1
        self._hits[name] = hit
        for fault in self._faults.get(name, ()):
            if fault.hit != hit:
                continue
            detail = "" if hit == 1 else f"hit {hit}"
            self._writer.write(
                "fault",
                FaultRecord(self.rank, name, fault.action.describe(), detail, self.elapsed()),
            )
            fault.action.fire(self, name)

    # -- ordering -------------------------------------------------------------------------

    def _claim(self, kind: str, name: str) -> None:
        MeshEnd.check_name(name)
        if (kind, name) in self._used:
            what = {"S": "sync", "N": "notify", "W": "wait"}[kind]
            raise ValueError(
                f"rank {self.rank}: {what}({name!r}) was already used in this group; "
                f"sync point names are single-use (pick a new name per step)"
            )
        self._used.add((kind, name))

    def _deadline_for(self, timeout: float | None) -> float:
        if timeout is not None:
            return time.monotonic() + timeout
        margin = min(0.5, 0.1 * self._timeout)
        return self.deadline - margin

    def _seen(self, kind: str, name: str) -> set[int]:
        return {s for k, s, n in self._mesh.messages if k == kind and n == name}

    def sync(self, name: str, timeout: float | None = None) -> None:
        """Barrier: return once every rank has called ``sync(name)``."""
        self._claim("S", name)
        deadline = self._deadline_for(timeout)
        self._mesh.send("S", name, deadline)
        peers = set(range(self.world_size)) - {self.rank}
        while True:
            missing = peers - self._seen("S", name)
            if not missing:
                return
            dead = missing & self._mesh.ended
            if dead:
                raise SyncError(
                    f"rank {self.rank}: sync({name!r}) can never finish: rank(s) "
                    f"{_ranks(dead)} ended without reaching it "
                    f"(still missing: {_ranks(missing)})"
                )
            left = deadline - time.monotonic()
            if left <= 0:
                raise SyncTimeoutError(
                    f"rank {self.rank}: sync({name!r}) timed out after "
                    f"{self._waited(deadline, timeout):.3f}s waiting for rank(s) "
                    f"{_ranks(missing)}"
                )
            self._mesh.pump(left)

    def notify(self, name: str) -> None:
        """Mark the one-way point ``name`` as reached; ranks in ``wait(name)`` proceed."""
        self._claim("N", name)
        self._mesh.messages.append(("N", self.rank, name))
        self._mesh.send("N", name, self._deadline_for(None))

    def wait(self, name: str, timeout: float | None = None) -> None:
        """Block until some rank called ``notify(name)`` (deadline: ``timeout`` seconds,
        default just before the group deadline)."""
        self._claim("W", name)
        deadline = self._deadline_for(timeout)
        peers = set(range(self.world_size)) - {self.rank}
        while True:
            if self._seen("N", name):
                return
            if not peers:
                raise SyncError(
                    f"rank {self.rank}: wait({name!r}) can never finish: world_size is 1 and "
                    f"this rank did not notify({name!r}) itself first"
                )
            if peers <= self._mesh.ended:
                self._mesh.pump(0)
                if self._seen("N", name):
                    return
                raise SyncError(
                    f"rank {self.rank}: wait({name!r}) can never finish: every other rank "
                    f"({_ranks(peers)}) ended without notify({name!r})"
                )
            left = deadline - time.monotonic()
            if left <= 0:
                alive = peers - self._mesh.ended
                raise SyncTimeoutError(
                    f"rank {self.rank}: wait({name!r}) timed out after "
                    f"{self._waited(deadline, timeout):.3f}s: no rank called "
                    f"notify({name!r}); still running: {_ranks(alive) or 'none'}; "
                    f"ended: {_ranks(self._mesh.ended & peers) or 'none'}"
                )
            self._mesh.pump(left)

    def _waited(self, deadline: float, timeout: float | None) -> float:
        return timeout if timeout is not None else max(0.0, deadline - self._start)


def _ranks(ranks: set[int]) -> str:
    return ", ".join(str(r) for r in sorted(ranks))
