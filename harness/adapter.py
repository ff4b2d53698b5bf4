"""The adapter contract: how the harness reaches an implementation under test.

``load_implementation("module:callable")`` (or ``"exec:<command …>"`` for one that runs as
its own executable) returns an :class:`Implementation`: a factory plus the name, version
capabilities and transport it declared (one of the transport profiles,
:data:`TRANSPORT_PROFILES`).  This tier holds the rest of the contract for people who
write an adapter or a loader: the members every broadcaster needs, the capability names,
and the errors a load or an ``exec:`` driver can raise (DESIGN.md, "Adapter contract").
"""

from __future__ import annotations

from ._adapter import load_implementation
from ._contract import (
    DEFAULT_IMPLEMENTATION,
    ENGINE_SURFACES,
    REQUIRED_MEMBERS,
    AdapterError,
    Broadcaster,
    Capability,
    CapabilityMissing,
    EngineNotAsked,
    Implementation,
    ImplementationLoadError,
    UnknownCapabilityError,
    parse_capabilities,
    parse_transport,
)
from ._exec_errors import ExecBroadcastError, ExecDriverError, ExecNotAsked
from ._transports import (
    DEFAULT_TRANSPORT,
    TRANSPORT_PROFILES,
    TransportProfile,
    UnknownTransportError,
    transport_names,
    transport_profile,
    transport_profiles,
)

__all__ = [
    "DEFAULT_IMPLEMENTATION",
    "DEFAULT_TRANSPORT",
    "ENGINE_SURFACES",
    "REQUIRED_MEMBERS",
    "TRANSPORT_PROFILES",
    "AdapterError",
    "Broadcaster",
    "Capability",
    "CapabilityMissing",
    "EngineNotAsked",
    "ExecBroadcastError",
    "ExecDriverError",
    "ExecNotAsked",
    "Implementation",
    "ImplementationLoadError",
    "TransportProfile",
    "UnknownCapabilityError",
    "UnknownTransportError",
    "load_implementation",
    "parse_capabilities",
    "parse_transport",
    "transport_names",
    "transport_profile",
    "transport_profiles",
]
