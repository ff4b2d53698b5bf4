"""The adapter contract: how the suite loads and talks to any broadcaster.

An implementation is a factory named ``"module:callable"``; calling it with no
arguments returns a fresh broadcaster with four required members.  Optional
behaviour is declared as capabilities, each promising extra members; a clause
that needs an undeclared capability is UNSUPPORTED, not FAIL
(:class:`CapabilityMissing`).  The default implementation is a string, never an
import, so the harness stays independent of ``tpbcast.reference_impl``.
"""

from __future__ import annotations

import difflib
import enum
import importlib
import importlib.metadata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, final, runtime_checkable

__all__ = [
    "CAPABILITY_MEMBERS",
    "DEFAULT_IMPLEMENTATION",
    "REQUIRED_MEMBERS",
    "AdapterError",
    "Broadcaster",
    "Capability",
    "CapabilityMissing",
    "Implementation",
    "ImplementationLoadError",
    "UnknownCapabilityError",
    "load_implementation",
    "parse_capabilities",
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


REQUIRED_MEMBERS: Final = ("initialize", "broadcast", "reset", "is_initialized")
"""Members every broadcaster must have (DESIGN.md, adapter contract)."""

CAPABILITY_MEMBERS: Final[Mapping[Capability, tuple[str, ...]]] = {
    Capability.DEADLINES: ("set_deadlines",),
    Capability.GENERATION: ("generation",),
    Capability.ABSTRACT_NAMESPACE: ("set_abstract_namespace",),
    Capability.DISPATCH: ("make_dispatcher",),
    Capability.BASE_PATH: ("make_base_path",),
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


def _split_spec(spec: str) -> tuple[str, str]:
    module, sep, attr = spec.partition(":")
    if not sep or not module.strip() or not attr.strip() or ":" in attr:
        raise ImplementationLoadError(
            f"implementation spec {spec!r} is not 'module:callable' "
            f"(example: {DEFAULT_IMPLEMENTATION!r}) or 'exec:<command ...>'"
        )
    return module.strip(), attr.strip()


def _import(spec: str, module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (
            module_name == exc.name or module_name.startswith(exc.name + ".")
        ):
            raise ImplementationLoadError(
                f"implementation {spec!r}: module {module_name!r} not found "
                f"(is it installed, or is its folder on sys.path / PYTHONPATH?)"
            ) from exc
        raise ImplementationLoadError(
            f"implementation {spec!r}: module {module_name!r} was found but imports "
            f"{exc.name!r}, which is missing"
        ) from exc
    except Exception as exc:
        raise ImplementationLoadError(
            f"implementation {spec!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from exc


def _resolve(spec: str, module: Any, attr_path: str) -> Callable[[], object]:
    target: Any = module
    for part in attr_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            public = sorted(n for n in dir(module) if not n.startswith("_"))
            close = difflib.get_close_matches(part, public, n=1)
            hint = f" - did you mean {close[0]!r}?" if close else ""
            raise ImplementationLoadError(
                f"implementation {spec!r}: module {module.__name__!r} has no attribute "
                f"{attr_path!r}{hint}"
            ) from None
    if not callable(target):
        raise ImplementationLoadError(
            f"implementation {spec!r}: {attr_path!r} is a {type(target).__name__}, not a "
            "factory; name a callable that returns a fresh broadcaster"
        )
    factory: Callable[[], object] = target
    return factory


def _check_members(spec: str, obj: object, capabilities: frozenset[str]) -> None:
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


def _version_of(module_name: str) -> str:
    top = module_name.partition(".")[0]
    dists = importlib.metadata.packages_distributions().get(top, [])
    for dist in dists:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


@final
@dataclass(frozen=True)
class Implementation:
    """A loaded implementation: its factory plus what it declared about itself."""

    spec: str
    name: str
    version: str
    capabilities: frozenset[str]
    factory: Callable[[], object] = field(repr=False, compare=False)

    def create(self) -> Broadcaster:
        """A fresh broadcaster from the factory, checked against the contract.

        :raises ImplementationLoadError: the object lacks a required member.
        """
        obj = self.factory()
        _check_members(self.spec, obj, self.capabilities)
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


def load_implementation(spec: str) -> Implementation:
    """Load ``"module:callable"`` (or ``"exec:<command ...>"``) and check it against the
    adapter contract.

    ``exec:`` runs the implementation as its own executable, driven over the protocol in
    SPEC.md's adapter section (see ``_exec_adapter``).

    Calls the factory once to read ``capabilities``, ``name`` and ``version`` from
    a fresh object (which is then discarded without being initialised).

    :raises ImplementationLoadError: bad spec, module or attribute not found, not
        callable, factory failed, or the object lacks required/promised members
        (all listed).
    :raises UnknownCapabilityError: the object declares an unknown capability.
    """
    if spec.startswith("exec:"):
        from ._exec_adapter import load_exec_implementation  # it builds on this module

        return load_exec_implementation(spec)
    module_name, attr_path = _split_spec(spec)
    module = _import(spec, module_name)
    factory = _resolve(spec, module, attr_path)
    try:
        sample = factory()
    except Exception as exc:
        raise ImplementationLoadError(
            f"implementation {spec!r}: calling the factory with no arguments raised "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    declared = getattr(sample, "capabilities", None)
    if declared is None:
        declared = ()
    capabilities = parse_capabilities(declared, source=f"{spec} capabilities")
    _check_members(spec, sample, capabilities)
    name = getattr(sample, "name", None)
    version = getattr(sample, "version", None)
    return Implementation(
        spec=spec,
        name=str(name) if name else module_name,
        version=str(version) if version else _version_of(module_name),
        capabilities=capabilities,
        factory=factory,
    )
