"""The reference broadcaster behind the harness's adapter contract (DESIGN.md).

The harness reaches us only through the string
``"tpbcast.reference_impl.conformance_adapter:make"``; this module therefore
imports nothing of the other layers (the contract is duck-typed).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from importlib import metadata
from typing import Any, Final, cast, final

from ._broadcaster import BroadcasterStatistics, CpuTpBroadcaster
from ._config import BroadcasterConfig
from ._paths import make_base_path

__all__ = ["CAPABILITIES", "FRAMED_CAPABILITIES", "ReferenceAdapter", "make", "make_framed"]

CAPABILITIES: Final = frozenset(
    {
        "deadlines",
        "generation",
        "abstract_namespace",
        "tensors",
        "multi_buffer",
        "peer_credentials",
        "secure_dir",
        "error_details",
        "dispatch",
        "base_path",
    }
)
#: The framed wire adds ``abort(reason)`` (the group's next broadcast fails on every rank).
FRAMED_CAPABILITIES: Final = CAPABILITIES | {"abort"}
#: Which transport profile each wire of ours is judged on.
_TRANSPORT_OF_WIRE: Final = {"v1": "uds-v1", "framed": "uds-framed"}


def _version() -> str:
    try:
        return metadata.version("tpbcast")
    except metadata.PackageNotFoundError:
        return "0.1.0"


@final
class ReferenceAdapter:
    """One fresh :class:`CpuTpBroadcaster` with the adapter contract's members.

    Settings changed with ``set_deadlines``/``set_abstract_namespace`` apply
    to the next ``initialize``.
    """

    def __init__(self, config: BroadcasterConfig | None = None) -> None:
        self.version = _version()
        self._config = config if config is not None else BroadcasterConfig()
        framed = self._config.wire == "framed"
        self.name = "tpbcast-reference-framed" if framed else "tpbcast-reference"
        self.transport = _TRANSPORT_OF_WIRE[self._config.wire]
        self.capabilities = FRAMED_CAPABILITIES if framed else CAPABILITIES
        self._defaults = self._config
        self.broadcaster = CpuTpBroadcaster(self._config)

    @property
    def config(self) -> BroadcasterConfig:
        return self._config

    def set_deadlines(
        self,
        *,
        connect: float | None = None,
        init: float | None = None,
        io: float | None = None,
    ) -> None:
        """Change deadlines (seconds); None keeps a value, ``math.inf`` means forever.

        Only ``io`` may be infinite (the broadcast deadline); connect and init
        are always bounded.
        """
        changes: dict[str, object] = {}
        if connect is not None:
            changes["connect_timeout"] = connect
        if init is not None:
            changes["init_timeout"] = init
        if io is not None:
            changes["io_timeout"] = None if io == math.inf else io
        self._config = self._config.replace(**changes)

    def default_deadlines(self) -> Mapping[str, float | None]:
        """The ``deadlines`` capability's defaults (TIME-7), in seconds; None = forever.

        What ``initialize`` uses when ``set_deadlines`` was never called: the
        configuration this adapter was made with (DESIGN.md: connect 120, init
        120, io 300 for a plain ``make()``), not the values set since.
        """
        return {
            "connect": self._defaults.connect_timeout,
            "init": self._defaults.init_timeout,
            "io": self._defaults.io_timeout,
        }

    def set_abstract_namespace(self, enabled: bool) -> None:
        self._config = self._config.replace(abstract_namespace=bool(enabled))

    def initialize(self, rank: int, world_size: int, base_path: str) -> None:
        self.broadcaster.initialize(rank, world_size, base_path, config=self._config)

    def broadcast(self, buffer: object, root: int = 0) -> None:
        self.broadcaster.broadcast(buffer, root)

    def reset(self) -> None:
        self.broadcaster.reset()

    def abort(self, reason: str) -> None:
        """The ``abort`` capability: fail the group's next broadcast on every rank."""
        self.broadcaster.abort(reason)

    def is_initialized(self) -> bool:
        return self.broadcaster.is_initialized()

    @property
    def generation(self) -> int:
        return self.broadcaster.generation

    def statistics(self) -> BroadcasterStatistics:
        return self.broadcaster.statistics()

    def make_base_path(
        self,
        dp_rank: int = 0,
        *,
        session_id: str | None = None,
        base_dir: str | None = None,
        environ: Mapping[str, str] | None = None,
        key: str | None = None,
    ) -> str:
        """The ``base_path`` capability: :func:`tpbcast.reference_impl.make_base_path`.

        Pure (creates nothing); every rank of one group computes the same path.
        """
        return make_base_path(
            dp_rank, session_id=session_id, key=key, base_dir=base_dir, environ=environ
        )

    def make_dispatcher(
        self,
        *,
        engine: Any,
        rank: int,
        world_size: int,
        workdir: str,
        group_timeout: float = 10.0,
        connect: float | None = None,
        init: float | None = None,
        io: float | None = None,
    ) -> object:
        """The ``dispatch`` capability: a per-rank fallback dispatcher (DESIGN.md,
        "Reference decisions", fallback dispatch).

        ``engine`` is the suite's recording collective engine over the group it
        created (DESIGN.md, adapter table): the fallback path runs on it and the
        dispatcher never closes it.  Imported lazily: the dispatch layer brings
        torch.distributed with it.
        """
        from ._dispatch_adapter import make_dispatch_adapter

        # UdsBroadcaster declares initialize(..., **kwargs); ours is keyword-only
        # `config=`, which is what the dispatcher passes.
        return make_dispatch_adapter(
            cast(Any, self.broadcaster),
            engine=engine,
            rank=rank,
            world_size=world_size,
            workdir=workdir,
            group_timeout=group_timeout,
            connect=connect,
            init=init,
            io=io,
        )


def make() -> ReferenceAdapter:
    """Factory for ``load_implementation``: a fresh, uninitialized adapter (wire v1)."""
    return ReferenceAdapter()


def make_framed() -> ReferenceAdapter:
    """The same broadcaster speaking the framed wire (transport ``uds-framed``)."""
    return ReferenceAdapter(BroadcasterConfig(wire="framed"))
