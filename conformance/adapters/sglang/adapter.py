"""The adapter contract (DESIGN.md) over SGLang's ``broadcast_pyobj`` on its gloo CPU group.

SGLang's scheduler broadcasts every step's requests from TP rank 0 with
``sglang.srt.utils.common.broadcast_pyobj(data, rank, dist_group, src=0,
force_cpu_device=True)``: the pickled list as an int64 size, then the bytes, each with
``dist.broadcast`` on the TP group's ``cpu_group``.  SGLang's ``GroupCoordinator``
(``sglang/srt/distributed/parallel_state.py``) builds that group with
``torch.distributed.new_group(ranks, backend="gloo", timeout=gloo_timeout)`` after
``init_process_group`` (``init_distributed_environment``), ``gloo_timeout`` 7200 s.  This
adapter builds the groups the same way and calls SGLang's real function; it only
marshals (no argument checks, no re-init rules: SGLang and torch decide):

- ``initialize``: ``init_process_group("gloo", rank, world_size, timeout=<connect>)`` on
  the ``TCPStore`` SGLang's ``init_method=tcp://host:port`` makes (``torch_gloo.adapter.
  make_store``: on the endpoint after ``set_endpoint``, else on 127.0.0.1 at a port rank 0
  publishes next to the base path; gloo's interface from the endpoint), then the
  ``cpu_group``;
- ``broadcast`` on rank ``root``: ``broadcast_pyobj([payload, ...], root, cpu_group,
  src=root)`` where a payload is the buffer's bytes (or the tensor itself); on the other
  ranks the same call returns the list, copied into the caller's buffers in place (a
  length mismatch raises naming both sizes: the copy cannot be done otherwise);
- ``reset``: ``GroupCoordinator.destroy``'s order: destroy the cpu group, then the
  default group (``destroy_distributed_environment``).

Deadlines (capability ``deadlines``), as SGLang has them: ``io`` -> ``gloo_timeout`` of
the cpu group (SGLang's constructor parameter, default 7200 s); ``connect`` -> the
``timeout`` of ``init_distributed_environment`` (SGLang's ``--dist-timeout``; None there
means torch's default, 1800 s), which bounds the rendezvous store and the world group;
``init`` -> accepted, not separately enforced (neither SGLang nor torch has a third knob).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, Final

from tpbcast.conformance.adapters.torch_gloo._endpoint import Endpoint
from tpbcast.conformance.adapters.torch_gloo.adapter import (
    bind_interface,
    make_store,
    seconds,
    timedelta,
)
from tpbcast.harness.adapter import EngineNotAsked

from ._shim import SglangMissingError, import_sglang_module, sglang_version

__all__ = [
    "CAPABILITIES",
    "NAME",
    "SGLANG_GLOO_TIMEOUT",
    "TRANSPORT",
    "SglangMissingError",
    "SglangPyobjBroadcaster",
    "make",
]

NAME: Final = "sglang broadcast_pyobj"
TRANSPORT: Final = "tcp"
CAPABILITIES: Final = frozenset({"deadlines", "endpoint", "multi_buffer", "tensors"})
SGLANG_GLOO_TIMEOUT: Final = 7200.0  # GroupCoordinator(gloo_timeout=timedelta(seconds=120 * 60))
TORCH_DEFAULT_TIMEOUT: Final = 1800.0  # init_distributed_environment(timeout=None): torch's
COMMON: Final = "sglang.srt.utils.common"


def _torch_tensor(obj: object) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _payload(buffer: Any) -> Any:
    return buffer.detach().clone() if _torch_tensor(buffer) else memoryview(buffer).tobytes()


def not_asked(check: str, detail: str, surface: str = "receive_buffers") -> EngineNotAsked:
    """What the adapter answers where SGLang has no place for it (``surface``, by default
    its receive buffers: SGLang delivers objects, what the copy into the caller's buffer
    refuses SGLang never decided)."""
    return EngineNotAsked(check, detail, f"SGLang {sglang_version()}", surface)


def _fill(rank: int, index: int, target: Any, got: Any) -> None:
    """Copy what arrived into the caller's buffer ``index`` (the in-place contract)."""
    if _torch_tensor(target):
        if not _torch_tensor(got) or got.numel() * got.element_size() != (
            target.numel() * target.element_size()
        ):
            raise not_asked(
                "size_mismatch",
                f"rank {rank}: buffer {index} is a tensor of {target.numel()} "
                f"{target.dtype}; the root sent {type(got).__name__} {got!r:.80}",
            )
        target.copy_(got.reshape(target.shape))
        return
    view = memoryview(target)
    if view.readonly or not view.c_contiguous:
        raise not_asked(
            "peer_buffer", f"rank {rank}: buffer {index} is read-only or not C-contiguous"
        )
    view = view.cast("B")
    data = memoryview(got).cast("B") if not _torch_tensor(got) else None
    if data is None or data.nbytes != view.nbytes:
        sent = "a tensor" if data is None else f"{data.nbytes} bytes"
        raise not_asked(
            "size_mismatch",
            f"rank {rank}: buffer {index} size mismatch: the root sent {sent}, this rank's "
            f"buffer has {view.nbytes} bytes",
        )
    view[:] = data


class SglangPyobjBroadcaster:
    """One rank's side of SGLang's ``broadcast_pyobj`` over its gloo ``cpu_group``."""

    name = NAME
    transport = TRANSPORT
    capabilities = CAPABILITIES

    def __init__(self) -> None:
        self.version = sglang_version()
        self._deadlines: dict[str, float | None] = {
            "connect": TORCH_DEFAULT_TIMEOUT,
            "init": None,
            "io": SGLANG_GLOO_TIMEOUT,
        }
        self._endpoint: Endpoint | None = None
        self._group: Any = None
        self._rank = 0

    def set_deadlines(
        self, *, connect: float | None = None, init: float | None = None, io: float | None = None
    ) -> None:
        """Seconds; None keeps a value, ``math.inf`` waits forever (module docstring)."""
        for key, value in (("connect", connect), ("init", init), ("io", io)):
            if value is not None:
                self._deadlines[key] = seconds(key, value, f"SGLang {self.version}")

    @staticmethod
    def default_deadlines() -> Mapping[str, float | None]:
        """SGLang's: torch's 1800 s for the rendezvous, gloo_timeout 7200 s for the group."""
        return {"connect": TORCH_DEFAULT_TIMEOUT, "init": None, "io": SGLANG_GLOO_TIMEOUT}

    def set_endpoint(self, host: str, port: int, local_host: str | None = None) -> None:
        """``init_method=tcp://host:port`` and gloo's interface for ``host``."""
        self._endpoint = Endpoint(host, port, local_host or "")

    def initialize(self, rank: int, world_size: int, base_path: str) -> None:
        import torch.distributed as dist

        bind_interface(self._endpoint)
        connect = self._deadlines["connect"]
        store, formed = make_store(rank, world_size, base_path, self._endpoint, connect)
        try:
            dist.init_process_group(
                backend="gloo",
                store=store,
                world_size=world_size,
                rank=rank,
                timeout=timedelta(connect),
            )
        finally:
            formed()
        self._group = dist.new_group(
            list(range(world_size)), backend="gloo", timeout=timedelta(self._deadlines["io"])
        )
        self._rank = rank

    def broadcast(self, buffer: Any, root: int = 0) -> None:
        """``broadcast_pyobj`` of a list: one buffer, or the caller's list of buffers."""
        common = import_sglang_module(COMMON)
        buffers = list(buffer) if isinstance(buffer, list | tuple) else [buffer]
        if self._rank == root:
            common.broadcast_pyobj(
                [_payload(b) for b in buffers],
                self._rank,
                self._group,
                src=root,
                force_cpu_device=True,
            )
            return
        got = common.broadcast_pyobj([], self._rank, self._group, src=root, force_cpu_device=True)
        if len(got) != len(buffers):
            raise not_asked(
                "buffer_count",
                f"rank {self._rank}: the root sent {len(got)} buffers, this rank has "
                f"{len(buffers)}",
            )
        for index, (target, item) in enumerate(zip(buffers, got, strict=True)):
            _fill(self._rank, index, target, item)

    def reset(self) -> None:
        """``GroupCoordinator.destroy`` then ``destroy_distributed_environment``."""
        import torch.distributed as dist

        group, self._group = self._group, None
        if group is not None and dist.is_initialized():
            dist.destroy_process_group(group)
        if dist.is_initialized():
            dist.destroy_process_group()

    def is_initialized(self) -> bool:
        import torch.distributed as dist

        return bool(dist.is_initialized()) and self._group is not None


def make() -> SglangPyobjBroadcaster:
    """Factory for ``--tpbcast-impl tpbcast.conformance.adapters.sglang.adapter:make``
    (SGLang's own 7200 s gloo timeout unless ``set_deadlines(io=...)``).

    Imports SGLang's broadcast code here (through the shim), in the process that loads the
    implementation, so forked ranks inherit it; a missing SGLang fails here, naming what
    to install.
    """
    import_sglang_module(COMMON)
    return SglangPyobjBroadcaster()
