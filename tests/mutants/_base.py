"""The reference behind the adapter contract, as a base class mutants override one member of."""

from __future__ import annotations

from typing import Any

from tpbcast.reference_impl._config import BroadcasterConfig
from tpbcast.reference_impl.conformance_adapter import (
    CAPABILITIES,
    FRAMED_CAPABILITIES,
    ReferenceAdapter,
)


class Delegating:
    """Forwards every adapter member to a fresh :class:`ReferenceAdapter`.

    A mutant subclasses this and overrides the one member it breaks; members it does not
    touch behave exactly like the reference's.
    """

    capabilities: frozenset[str] = CAPABILITIES
    name = "mutant"
    version = "0"

    def __init__(self) -> None:
        self.inner = ReferenceAdapter()

    def __getattr__(self, attr: str) -> Any:
        # Only called for members this class does not define: the reference's.
        return getattr(self.inner, attr)

    @property
    def generation(self) -> int:
        return int(self.inner.generation)

    def initialize(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.initialize(*args, **kwargs)

    def broadcast(self, buffers: Any, root: int = 0) -> Any:
        return self.inner.broadcast(buffers, root)

    def reset(self) -> Any:
        return self.inner.reset()

    def is_initialized(self) -> bool:
        return bool(self.inner.is_initialized())


class FramedDelegating(Delegating):
    """:class:`Delegating` around the reference's framed mode (transport ``uds-framed``):
    the base of the ``m_framed_*`` mutants."""

    capabilities: frozenset[str] = FRAMED_CAPABILITIES
    transport = "uds-framed"

    def __init__(self) -> None:
        self.inner = ReferenceAdapter(BroadcasterConfig(wire="framed"))
