"""The adapter contract (DESIGN.md) over torch's own gloo broadcast.

Engines that call torch directly broadcast CPU bytes with ``dist.broadcast`` on a gloo
process group (TensorRT-LLM's torch communicator, our fallback engine, torch's own
``broadcast_object_list``).  This adapter only marshals:

- ``initialize(rank, world_size, base_path)``: ``dist.init_process_group("gloo", ...)``
  on a ``TCPStore`` (``make_store``: on the endpoint after ``set_endpoint``, else on
  127.0.0.1 at a port rank 0 publishes next to the base path) with the group timeout; the
  arguments go to torch as they come (torch decides what it accepts);
- ``broadcast(buffer, root=0)``: ``dist.broadcast(tensor, src=root)`` on a uint8 tensor
  that *is* the caller's buffer (``torch.frombuffer``: in place on the peers, no copy), or
  on the caller's torch tensor itself; a zero-byte buffer is an empty tensor.  A list of
  buffers (capability ``multi_buffer``) is one ``dist.broadcast`` per buffer, in list
  order: torch's API takes one tensor per call, and that loop is how a torch caller
  broadcasts several (TensorRT-LLM's communicator, SGLang's size-then-bytes pair), so the
  adapter adds no decision of its own: no check of the list, no packing, no state; what
  each call does, including a failure part-way through the list, is torch's;
- ``reset()``: ``dist.destroy_process_group()`` if torch has a default group, and the
  store is dropped.  ``is_initialized()`` is torch's ``dist.is_initialized()``.

Deadlines (capability ``deadlines``), exactly as torch has them: ``io`` -> the group's
``timeout`` (gloo applies it to every collective wait, and to its own connect during
``init_process_group``); ``connect`` -> the store's timeout (the rendezvous wait);
``init`` -> accepted and not separately enforced (torch has no third knob: gloo's connect
uses the group timeout).  Defaults are torch's: 1800 s for the group, 300 s for the
store.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import math
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, Final

from tpbcast.conformance.adapters.vllm._handle import (
    remove_if_ours,
    wait_for_handle,
    write_handle,
)
from tpbcast.harness.adapter import EngineNotAsked

from ._endpoint import Endpoint, interface_for

__all__ = [
    "CAPABILITIES",
    "NAME",
    "TRANSPORT",
    "TorchGlooBroadcaster",
    "TorchMissingError",
    "make",
]

NAME: Final = "torch gloo broadcast"
TRANSPORT: Final = "tcp"
CAPABILITIES: Final = frozenset({"deadlines", "tensors", "endpoint", "multi_buffer"})
TORCH_GROUP_TIMEOUT: Final = 1800.0  # torch.distributed's default_pg_timeout for gloo
TORCH_STORE_TIMEOUT: Final = 300.0  # torch's TCPStore / FileStore default
PORT_SUFFIX: Final = "_tcpstore.json"
LOOPBACK: Final = "127.0.0.1"
_USED_NONCES: set[str] = set()  # store files this process already joined


class TorchMissingError(ImportError):
    """torch (with its distributed package) is not installed."""


def _dist() -> Any:
    try:
        import torch.distributed as dist
    except ImportError as exc:
        raise TorchMissingError(
            f"the torch gloo adapter needs torch: {exc}. Install it pinned to the CPU "
            "build: pip install -c constraints/torch.txt torch"
        ) from exc
    return dist


def _torch_version() -> str:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def seconds(name: str, value: float, engine: str = "torch") -> float | None:
    """A deadline as torch takes it: None = forever (``math.inf``).  A value torch could
    not take as a timedelta is refused here, so the engine was never asked."""
    if value == math.inf:
        return None
    if not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise EngineNotAsked(
            "deadline_range",
            f"{name} deadline must be >= 0 seconds or math.inf, got {value!r}",
            engine,
        )
    return float(value)


def timedelta(value: float | None) -> datetime.timedelta:
    """torch's timeouts are timedeltas; "forever" is the largest one torch accepts."""
    return datetime.timedelta(days=365) if value is None else datetime.timedelta(seconds=value)


def as_tensor(buffer: Any) -> Any:
    """The caller's buffer as a uint8 tensor sharing its memory (a tensor as itself)."""
    torch = sys.modules["torch"]
    if isinstance(buffer, torch.Tensor):
        return buffer
    view = memoryview(buffer)
    if view.nbytes == 0:
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer(view.cast("B") if view.c_contiguous else view, dtype=torch.uint8)


def make_store(
    rank: int, world_size: int, base_path: str, endpoint: Endpoint | None, connect: float | None
) -> tuple[Any, Callable[[], None]]:
    """The rendezvous store (``_endpoint``) and what to call once the group has formed.

    With an endpoint: a ``TCPStore`` on it.  Without one, a ``TCPStore`` on 127.0.0.1 on a
    port the kernel picks, which rank 0 publishes in a file next to the base path (the
    vLLM adapter's handle file: JSON, 0600, the writer's pid and a nonce, so a peer never
    joins an earlier group's store) and removes once the group has formed.  Not a
    ``FileStore``: torch's FileStore keeps its keys in the file across groups, so a second
    group on the same base path would read the first one's.
    """
    dist = _dist()
    if endpoint is not None:
        store = dist.TCPStore(
            endpoint.host,
            endpoint.port,
            world_size,
            rank == 0,
            timeout=timedelta(connect),
            wait_for_workers=False,
        )
        return store, lambda: None
    path = base_path + PORT_SUFFIX
    if rank == 0:
        store = dist.TCPStore(
            LOOPBACK, 0, world_size, True, timeout=timedelta(connect), wait_for_workers=False
        )
        entry = write_handle(path, world_size, {"host": LOOPBACK, "port": store.port})

        return store, lambda: remove_if_ours(path, entry)
    entry = wait_for_handle(
        path,
        rank=rank,
        world_size=world_size,
        deadline=math.inf if connect is None else connect,
        used=_USED_NONCES,
    )
    store = dist.TCPStore(
        str(entry.handle["host"]),
        int(entry.handle["port"]),
        world_size,
        False,
        timeout=timedelta(connect),
    )
    return store, lambda: None


def bind_interface(endpoint: Endpoint | None) -> None:
    """Name gloo's interface for the endpoint's address (``_endpoint``)."""
    if endpoint is not None:
        os.environ["GLOO_SOCKET_IFNAME"] = interface_for(endpoint.local_host)


class TorchGlooBroadcaster:
    """One rank's side of a torch gloo default process group."""

    name = NAME
    transport = TRANSPORT
    capabilities = CAPABILITIES

    def __init__(self) -> None:
        self.version = _torch_version()
        self._deadlines: dict[str, float | None] = {
            "connect": TORCH_STORE_TIMEOUT,
            "init": None,
            "io": TORCH_GROUP_TIMEOUT,
        }
        self._endpoint: Endpoint | None = None
        self._store: Any = None

    def set_deadlines(
        self, *, connect: float | None = None, init: float | None = None, io: float | None = None
    ) -> None:
        """Seconds; None keeps a value, ``math.inf`` waits forever (module docstring)."""
        for key, value in (("connect", connect), ("init", init), ("io", io)):
            if value is not None:
                self._deadlines[key] = seconds(key, value)

    @staticmethod
    def default_deadlines() -> Mapping[str, float | None]:
        """torch's own: the store's 300 s, no init deadline of its own, the group's 1800 s."""
        return {"connect": TORCH_STORE_TIMEOUT, "init": None, "io": TORCH_GROUP_TIMEOUT}

    def set_endpoint(self, host: str, port: int, local_host: str | None = None) -> None:
        """Listen on ``host`` (gloo's interface) and rendezvous on ``host:port``."""
        self._endpoint = Endpoint(host, port, local_host or "")

    def initialize(self, rank: int, world_size: int, base_path: str) -> None:
        dist = _dist()
        bind_interface(self._endpoint)
        store, formed = make_store(
            rank, world_size, base_path, self._endpoint, self._deadlines["connect"]
        )
        try:
            dist.init_process_group(
                "gloo",
                store=store,
                rank=rank,
                world_size=world_size,
                timeout=timedelta(self._deadlines["io"]),
            )
        finally:
            formed()  # formed or failed: the published port has done its job
        self._store = store

    def broadcast(self, buffer: Any, root: int = 0) -> None:
        """One ``dist.broadcast`` per buffer, in order (module docstring)."""
        if isinstance(buffer, list | tuple):
            for one in buffer:
                _dist().broadcast(as_tensor(one), src=root)
            return
        _dist().broadcast(as_tensor(buffer), src=root)

    def reset(self) -> None:
        dist = _dist()
        if dist.is_initialized():
            dist.destroy_process_group()
        self._store = None

    def is_initialized(self) -> bool:
        return bool(_dist().is_initialized())


def make() -> TorchGlooBroadcaster:
    """Factory for ``--tpbcast-impl tpbcast.conformance.adapters.torch_gloo.adapter:make``.

    Imports torch here, in the process that loads the implementation (import only, no
    torch op: DESIGN.md, fork safety), so forked ranks inherit the import.
    """
    _dist()
    return TorchGlooBroadcaster()
