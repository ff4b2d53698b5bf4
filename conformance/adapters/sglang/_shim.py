"""Import SGLang's broadcast code without its front end and without triton.

SGLang 0.5.23 installed ``--no-deps`` holds the code a CPU broadcast runs
(``sglang.srt.utils.common.broadcast_pyobj``,
``sglang.srt.distributed.device_communicators.shm_broadcast``) behind two imports it never
uses: ``import sglang`` runs the ``sglang.lang`` front end (IPython, aiohttp, tiktoken,
...), and ``common.py`` imports ``triton`` at the top (690 MB, a GPU compiler).  This shim
works around both without touching the installed package:

- ``sglang`` is registered as a bare package whose ``__path__`` is the installed one, so
  ``import sglang.srt...`` finds SGLang's own sub-modules and never runs its ``__init__``;
- where triton is not installed, a stub module stands in for it, with only the names
  ``common.py`` and the modules it imports touch at import time (a decorator that returns
  the function, the attributes it sets); a broadcast never runs a triton kernel.  A real
  triton, if installed, is used as it is.

Nothing of SGLang's code is copied: the stub provides names, not behaviour.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import sys
import types
from typing import Any, Final

__all__ = ["SglangMissingError", "import_sglang_module", "sglang_version"]

INSTALL: Final = (
    "pip install -c constraints/torch.txt -e '.[sglang]' && pip install --no-deps "
    "sglang==0.5.23 (or run `nox -s ecosystem`, which does exactly that)"
)


class SglangMissingError(ImportError):
    """SGLang (or one of the packages its broadcast code imports) is not installed."""


def sglang_version() -> str:
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _bare_package() -> None:
    """Register ``sglang`` without running its ``__init__`` (the sglang.lang front end)."""
    if "sglang" in sys.modules:
        return
    spec = importlib.util.find_spec("sglang")  # finds, never executes, a top-level package
    if spec is None or not spec.submodule_search_locations:
        raise SglangMissingError(f"SGLang is not installed: {INSTALL}")
    package = types.ModuleType("sglang", "SGLang, imported without its front end (tpbcast shim)")
    package.__path__ = list(spec.submodule_search_locations)
    package.__spec__ = importlib.machinery.ModuleSpec("sglang", None, is_package=True)
    package.__spec__.submodule_search_locations = package.__path__
    package.__file__ = spec.origin
    sys.modules["sglang"] = package


class _Anything(types.ModuleType):
    """A stub module: any attribute is another stub; calling one returns its argument when
    used as a bare decorator (``@triton.jit``), else a decorator that does."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        child = _Anything(f"{self.__name__}.{name}")
        setattr(self, name, child)
        return child

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return lambda fn: fn

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)


def _triton_stub() -> None:
    """A stand-in for triton where it is not installed (module docstring)."""
    if importlib.util.find_spec("triton") is not None:
        return
    for name in ("triton", "triton.language", "triton.runtime", "triton.runtime.jit"):
        if name not in sys.modules:
            module = _Anything(name)
            module.__path__ = []  # a package: ``import triton.language`` works
            module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
            sys.modules[name] = module
    sys.modules["triton"].__version__ = "0.0.0+tpbcast-stub"  # type: ignore[attr-defined]


def import_sglang_module(name: str) -> Any:
    """Import ``name`` (an ``sglang.srt...`` module) through the shim; a missing SGLang or
    dependency raises :class:`SglangMissingError` naming what to install."""
    try:
        _bare_package()
        _triton_stub()
        return importlib.import_module(name)
    except SglangMissingError:
        raise
    except ImportError as exc:
        raise SglangMissingError(
            f"the SGLang adapter needs SGLang and the packages its broadcast code imports: "
            f"importing {name} failed ({exc}). Install them, torch pinned to the CPU "
            f"build: {INSTALL}"
        ) from exc
