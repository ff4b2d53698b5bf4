"""tpbcast.harness: a pytest-free, fork-based multi-rank runner with fault injection.

``run_ranks(target, world_size)`` forks the ranks from this warm process, supervises them
with one deadline, and returns a :class:`GroupResult` with one :class:`RankOutcome` per
rank (status, value or exception, signal name, fd-level output, stack dump of hung ranks,
faults fired).  This module is the test author's API; see DESIGN.md, "Harness public API".

The machinery lives in public tiers, each a module of its own:

* :mod:`tpbcast.harness.wire`: wire v1 byte by byte (connect, accept, send, receive,
  observe how a link closed), every wait with a deadline;
* :mod:`tpbcast.harness.rogue`: rogue peers and roots (rank targets) and their reports;
* :mod:`tpbcast.harness.env`: environment faults (stale socket, symlink, foreign uid, ...);
* :mod:`tpbcast.harness.adapter`: the adapter contract beyond loading an implementation;
* :mod:`tpbcast.harness.runtime`: workdirs, session dirs, fork safety, for plugin authors;
* :mod:`tpbcast.harness.observe`: processes seen from outside (deaths, children, held
  names, ``/dev/shm``), for suites that judge an implementation without asking it.

Names that used to live here still resolve, with a ``DeprecationWarning`` naming their
tier; they are not part of ``__all__``.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Final

from . import adapter as adapter
from . import env as env
from . import observe as observe
from . import rogue as rogue
from . import runtime as runtime
from . import wire as wire
from ._adapter import load_implementation
from ._context import RankContext, SyncError, SyncTimeoutError
from ._contract import CapabilityMissing, EngineNotAsked, Implementation
from ._faults import Delay, Exit, FaultAction, FaultPlan, Kill, Pause, Raise, Segfault, SignalStorm
from ._forksafety import ForkSafetyError
from ._outcome import FaultRecord, GroupResult, RankGroupFailure, RankOutcome, Status
from ._runner import run_ranks

__all__ = [
    "CapabilityMissing",
    "Delay",
    "EngineNotAsked",
    "Exit",
    "FaultAction",
    "FaultPlan",
    "FaultRecord",
    "ForkSafetyError",
    "GroupResult",
    "Implementation",
    "Kill",
    "Pause",
    "Raise",
    "RankContext",
    "RankGroupFailure",
    "RankOutcome",
    "Segfault",
    "SignalStorm",
    "Status",
    "SyncError",
    "SyncTimeoutError",
    "load_implementation",
    "run_ranks",
]

TIERS: Final = ("adapter", "env", "observe", "rogue", "runtime", "wire")
"""The public sub-modules, in the order the module docstring presents them."""

_ROGUE_FUNCTIONS: Final = {
    **{f"peer_{name}": ("peer", name) for name in rogue.PEER_BEHAVIOURS},
    **{f"root_{name}": ("root", name) for name in rogue.ROOT_BEHAVIOURS},
}


def _moved_to(name: str) -> str | None:
    for tier in TIERS:
        if name in importlib.import_module(f"{__name__}.{tier}").__all__:
            return tier
    return None


def __getattr__(name: str) -> object:
    """Serve a name that moved to a tier, once, with a warning that says where it went."""
    tier = _moved_to(name)
    if tier is not None:
        warnings.warn(
            f"tpbcast.harness.{name} moved: import it from tpbcast.harness.{tier}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(f"{__name__}.{tier}"), name)
    if name in _ROGUE_FUNCTIONS:
        role, behaviour = _ROGUE_FUNCTIONS[name]
        warnings.warn(
            f"tpbcast.harness.{name} is no longer public: use "
            f'tpbcast.harness.rogue.rogue_{role}("{behaviour}", ...) as a rank target, or '
            f'tpbcast.harness.rogue.{role.upper()}_BEHAVIOURS["{behaviour}"] to call it',
            DeprecationWarning,
            stacklevel=2,
        )
        table = rogue.PEER_BEHAVIOURS if role == "peer" else rogue.ROOT_BEHAVIOURS
        return table[behaviour]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*__all__, *TIERS})


def _publish_names() -> None:
    """Show each exported class and function under the public module a user imports it from.

    Tracebacks, reprs and a rank's ``exc_type`` print ``cls.__module__``: without this a
    failure read ``tpbcast.harness._outcome.RankGroupFailure``, a private path nobody can
    import from (trio's ``fixup_module_metadata`` does the same).  Only objects defined
    under their exported name are rewritten, so pickling by reference, which looks
    ``__module__.__qualname__`` up, finds each one where it is exported.
    """
    tiers = {f"{__name__}.{tier}": importlib.import_module(f"{__name__}.{tier}") for tier in TIERS}
    for module_name, names in (
        (__name__, __all__),
        *((m, mod.__all__) for m, mod in tiers.items()),
    ):
        namespace = globals() if module_name == __name__ else vars(tiers[module_name])
        for name in names:
            obj = namespace[name]
            if not (isinstance(obj, type) or callable(obj)):
                continue
            if getattr(obj, "__qualname__", None) != name:
                continue
            if str(getattr(obj, "__module__", "")).startswith(__name__ + "._"):
                obj.__module__ = module_name


_publish_names()
