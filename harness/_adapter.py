"""Loading an implementation under test from its spec: ``"module:callable"`` in this
process, or ``"exec:<command ...>"`` as its own executable (``_exec_adapter``).

What a loaded implementation must offer is the contract in ``_contract``.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
from collections.abc import Callable
from typing import Any

from ._contract import (
    DEFAULT_IMPLEMENTATION,
    Implementation,
    ImplementationLoadError,
    check_members,
    parse_capabilities,
    parse_transport,
)
from ._exec_adapter import load_exec_implementation
from ._tempenv import add_temp_dir_variables

__all__ = ["load_implementation"]


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


def _version_of(module_name: str) -> str:
    top = module_name.partition(".")[0]
    dists = importlib.metadata.packages_distributions().get(top, [])
    for dist in dists:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


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
        return load_exec_implementation(spec)
    module_name, attr_path = _split_spec(spec)
    module = _import(spec, module_name)
    factory = _resolve(spec, module, attr_path)
    # The engine's own base-path variables, pointed at each rank's workdir with TMPDIR.
    try:
        add_temp_dir_variables(tuple(getattr(module, "TEMP_DIR_VARIABLES", ())))
    except (TypeError, ValueError) as exc:
        raise ImplementationLoadError(f"implementation {spec!r}: {exc}") from None
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
    check_members(spec, sample, capabilities)
    transport = parse_transport(getattr(sample, "transport", None), source=f"{spec} transport")
    name = getattr(sample, "name", None)
    version = getattr(sample, "version", None)
    return Implementation(
        spec=spec,
        name=str(name) if name else module_name,
        version=str(version) if version else _version_of(module_name),
        capabilities=capabilities,
        factory=factory,
        transport=transport,
    )
