"""The adapter contract: what a broadcaster under test must offer, and how that is checked.

An implementation is a factory named ``"module:callable"``; calling it with no
arguments returns a fresh broadcaster with four required members.  Optional
behaviour is declared as capabilities, each promising extra members; a clause
that needs an undeclared capability is UNSUPPORTED, not FAIL
(:class:`CapabilityMissing`).  The default implementation is a string, never an
import, so the harness stays independent of ``tpbcast.reference_impl``.  Loading a
spec is ``_adapter.py``'s job; both loaders (in-process and ``exec:``) build on this.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, final, runtime_checkable

from ._transports import DEFAULT_TRANSPORT, check_transport

__all__ = [
    "CAPABILITY_MEMBERS",
    "DEFAULT_IMPLEMENTATION",
    "ENGINE_SURFACES",
    "REQUIRED_MEMBERS",
    "AdapterError",
    "Broadcaster",
    "Capability",
    "CapabilityMissing",
    "EngineNotAsked",
    "Implementation",
    "ImplementationLoadError",
    "UnknownCapabilityError",
    "check_members",
    "parse_capabilities",
    "parse_transport",
]

DEFAULT_IMPLEMENTATION: Final = "tpbcast.reference_impl.conformance_adapter:make"
"""The reference implementation's factory, named by string on purpose."""


class Capability(enum.StrEnum):
    """Optional behaviour an adapter may declare in its ``capabilities``."""

    DEADLINES = "deadlines"
    GENERATION = "generation"
    ABSTRACT_NAMESPACE = "abstract_namespace"
    TENSORS = "tensors"
    MULTI_BUFFER = "multi_buffer"
    PEER_CREDENTIALS = "peer_credentials"
    SECURE_DIR = "secure_dir"
    DISPATCH = "dispatch"
    ERROR_DETAILS = "error_details"
    BASE_PATH = "base_path"
    ENDPOINT = "endpoint"
    ABORT = "abort"


REQUIRED_MEMBERS: Final = ("initialize", "broadcast", "reset", "is_initialized")
"""Members every broadcaster must have (DESIGN.md, adapter contract)."""

CAPABILITY_MEMBERS: Final[Mapping[Capability, tuple[str, ...]]] = {
    Capability.DEADLINES: ("set_deadlines",),
    Capability.GENERATION: ("generation",),
    Capability.ABSTRACT_NAMESPACE: ("set_abstract_namespace",),
    Capability.DISPATCH: ("make_dispatcher",),
    Capability.BASE_PATH: ("make_base_path",),
    Capability.ENDPOINT: ("set_endpoint",),
    Capability.ABORT: ("abort",),
}
"""Members a capability promises; declaring it without them is a load error."""


@runtime_checkable
class Broadcaster(Protocol):
    """The required members of an adapter's broadcaster object."""

    def initialize(self, rank: int, world_size: int, base_path: str) -> object:
        """Bootstrap the group; raise on failure."""

    def broadcast(self, buffer: Any, root: int = 0) -> object:
        """Send ``buffer`` from ``root``; peers receive in place."""

    def reset(self) -> object:
        """Idempotent teardown."""

    def is_initialized(self) -> bool:
        """True between a successful ``initialize`` and ``reset``."""


class AdapterError(Exception):
    """Base of the adapter contract's errors."""


class ImplementationLoadError(AdapterError, ImportError):
    """The ``"module:callable"`` spec could not be turned into a working factory."""


class UnknownCapabilityError(AdapterError, ValueError):
    """A capability name that the contract does not define."""


class CapabilityMissing(AdapterError):  # noqa: N818 - a verdict (UNSUPPORTED), not an error
    """A check needs ``capability`` and ``implementation`` did not declare it.

    The suite reports this as UNSUPPORTED, distinct from PASS and FAIL.
    """

    def __init__(self, capability: str, implementation: str) -> None:
        super().__init__(
            f"implementation {implementation!r} does not declare capability {capability!r}; "
            "the check is UNSUPPORTED (declare it in the adapter's `capabilities` "
            "if the implementation has it)"
        )
        self.capability = capability
        self.implementation = implementation

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.capability, self.implementation))


ENGINE_SURFACES: Final = {
    "lifecycle": "not-initialized state (no engine object exists before initialize or after reset)",
    "receive_buffers": "caller buffers (it delivers objects, which the adapter copies into the "
    "caller's buffer)",
    "process_group": "rendezvous of its own (ranks and its handle come from a process group, "
    "which the adapter's rendezvous stands in for)",
    "deadline_settings": "deadline setting (a timeout per call, or none, but nothing to set)",
}
"""What an engine can lack where the contract has a member: the fixed vocabulary of
:class:`EngineNotAsked`'s ``surface``, so a report says "the engine has no <surface>"
instead of naming an adapter's ad-hoc check."""


class EngineNotAsked(CapabilityMissing):
    """The adapter answered a call itself: the engine under it was never asked.

    An adapter stands between the suite and an engine (vLLM's queue, a C library behind
    ``exec:``); anything it decides on its own — an argument check, a re-init rule, a
    pre-check the engine's API cannot express, state it keeps for the engine — says nothing
    about the engine.  Raising this instead of the refusal a clause expects makes the check
    UNSUPPORTED ("the engine was never asked"), never PASS: the suite's ``attempt`` does not
    catch it as the implementation's answer.  The one exception is a clause *about* the
    ``surface`` named (the clause registry's ``about``): the engine lacks what that clause
    requires, and the clause FAILs.  So an adapter raises it only where the engine's API has
    no place for the thing at all (``is_initialized`` included, where the engine has no such
    state); where it has one, the adapter passes the call on and the engine's own answer is
    judged.

    ``check`` names what the adapter decided (``rank_range``, ``reinit``, ``read_only_buffer``,
    ...), ``detail`` what it saw, ``engine`` what it stands in front of, ``surface`` (one of
    :data:`ENGINE_SURFACES`, optional) what the engine lacks that made asking it impossible.
    """

    def __init__(self, check: str, detail: str, engine: str, surface: str | None = None) -> None:
        if surface is not None and surface not in ENGINE_SURFACES:
            raise ValueError(
                f"EngineNotAsked: unknown engine surface {surface!r} (known: "
                f"{', '.join(sorted(ENGINE_SURFACES))})"
            )
        # ``engine:<surface>`` leads, so a report can name what the engine lacks.
        what = check if surface is None else f"engine:{surface}; {check}"
        lacks = "" if surface is None else f"; the engine has no {ENGINE_SURFACES[surface]}"
        # CapabilityMissing's own message speaks of an undeclared capability: not this.
        AdapterError.__init__(
            self,
            f"UNSUPPORTED ({what}): {detail}{lacks}. The adapter decided this itself; "
            f"{engine} was never asked, so nothing about it was judged",
        )
        self.capability = f"adapter:{check}"
        self.implementation = engine
        self.check = check
        self.detail = detail
        self.engine = engine
        self.surface = surface

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.check, self.detail, self.engine, self.surface))


_KNOWN: Final = frozenset(c.value for c in Capability)


def _unknown_capability(name: str, source: str) -> UnknownCapabilityError:
    where = f" in {source}" if source else ""
    close = difflib.get_close_matches(name, sorted(_KNOWN), n=1)
    hint = f" - did you mean {close[0]!r}?" if close else ""
    return UnknownCapabilityError(
        f"unknown capability {name!r}{where}{hint} (known: {', '.join(sorted(_KNOWN))})"
    )


def parse_capabilities(value: Iterable[str] | str, *, source: str = "") -> frozenset[str]:
    """Validate capability names; a string is split on commas and whitespace.

    :raises UnknownCapabilityError: a name the contract does not define, with a
        "did you mean" hint.
    """
    if isinstance(value, str):
        names = [part for part in value.replace(",", " ").split() if part]
    else:
        try:
            names = [str(item) for item in value]
        except TypeError as exc:
            raise UnknownCapabilityError(
                f"capabilities{' in ' + source if source else ''} must be an iterable of "
                f"names, got {type(value).__name__}"
            ) from exc
    for name in names:
        if name not in _KNOWN:
            raise _unknown_capability(name, source)
    return frozenset(names)


def parse_transport(value: object, *, source: str = "") -> str:
    """Validate a declared transport (``None``, the attribute absent, is ``uds-v1``: the wire
    every adapter spoke before transports were declared).

    :raises UnknownTransportError: a name that is not a row of the transport-profile table;
        a typo must not turn every clause of the implementation's real transport
        NOT_APPLICABLE.
    """
    return check_transport(value, where=source)


def check_members(spec: str, obj: object, capabilities: frozenset[str]) -> None:
    missing = [name for name in REQUIRED_MEMBERS if not callable(getattr(obj, name, None))]
    promised = [
        f"{member} (promised by {cap.value!r})"
        for cap, members in CAPABILITY_MEMBERS.items()
        if cap.value in capabilities
        for member in members
        if not hasattr(obj, member)
    ]
    if missing or promised:
        lines = [f"implementation {spec!r}: the factory returned a {type(obj).__name__} missing:"]
        lines += [f"  - {name}()  (required)" for name in missing]
        lines += [f"  - {text}" for text in promised]
        lines.append(
            "required: initialize(rank, world_size, base_path), broadcast(buffer, root=0), "
            "reset(), is_initialized()"
        )
        raise ImplementationLoadError("\n".join(lines))


@final
@dataclass(frozen=True)
class Implementation:
    """A loaded implementation: its factory plus what it declared about itself."""

    spec: str
    name: str
    version: str
    capabilities: frozenset[str]
    factory: Callable[[], object] = field(repr=False, compare=False)
    transport: str = DEFAULT_TRANSPORT
    """The transport the adapter declared (``transport`` attribute; absent: ``uds-v1``).
    The conformance suite judges a clause of another transport's scope NOT_APPLICABLE."""

    def create(self) -> Broadcaster:
        """A fresh broadcaster from the factory, checked against the contract.

        :raises ImplementationLoadError: the object lacks a required member.
        """
        obj = self.factory()
        check_members(self.spec, obj, self.capabilities)
        broadcaster: Broadcaster = obj  # type: ignore[assignment]  # checked just above
        return broadcaster

    def supports(self, capability: str) -> bool:
        """True if the adapter declared ``capability``.

        :raises UnknownCapabilityError: ``capability`` is not a contract name (a
            typo in a test must not turn into a silent UNSUPPORTED).
        """
        if capability not in _KNOWN:
            raise _unknown_capability(capability, "a supports() call")
        return capability in self.capabilities

    def require(self, capability: str) -> None:
        """Raise :class:`CapabilityMissing` unless ``capability`` was declared."""
        if not self.supports(capability):
            raise CapabilityMissing(capability, f"{self.name} {self.version}")
