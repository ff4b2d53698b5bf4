"""Mutants of ``_buffers``, ``_broadcaster`` and ``_engines`` once listed as equivalent.

Like test_mutation_kills.py (same purpose, same rules): each test names the mutant it
detects (function + changed line).  Each of these mutants was excluded from the
mutation score by a written reason in tools/mutation_equivalents.toml that turned out
to be wrong: the test shows the input or sequence under which the mutant behaves
differently.
"""

from __future__ import annotations

import signal
import sys
import threading
import types

import pytest

from tpbcast.harness import RankContext, run_ranks
from tpbcast.reference_impl import CpuTpBroadcaster

from ._helpers import RUN, fast_config, needs_torch, when_broadcasting

_WAIT = 10.0  # how long any step of these tests waits for another thread


def _world_of_one(base_path: str) -> CpuTpBroadcaster:
    bcast = CpuTpBroadcaster(fast_config())
    bcast.initialize(0, 1, base_path)
    return bcast


@pytest.mark.parametrize(("module", "attribute"), [("torch", "Tensor"), ("numpy", "ndarray")])
def test_a_module_still_being_imported_does_not_break_a_list_of_buffers(
    base_path: str, module: str, attribute: str
) -> None:
    """While another thread runs ``import torch`` (or ``import numpy``), the module is
    already in ``sys.modules`` but its ``Tensor`` (``ndarray``) is not bound yet.  A
    broadcast of plain bytearrays at that moment must not care: it only asks whether
    an object could be a tensor/array, and a module without the type means "no".  The
    half-imported module is reproduced by a bare module object under that name (the
    state ``sys.modules`` holds while the real import runs), restored before the test
    ends.  Kills ``_buffers._torch_tensor_type``
    ``getattr(torch, "Tensor", None)`` -> ``getattr(torch, "Tensor", )`` and
    ``_buffers._numpy_array_type`` ``getattr(numpy, "ndarray", None)`` ->
    ``getattr(numpy, "ndarray", )`` (AttributeError out of broadcast)."""
    bcast = _world_of_one(base_path)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setitem(sys.modules, module, types.ModuleType(module))
            assert not hasattr(sys.modules[module], attribute)  # the half-imported state
            bcast.broadcast([bytearray(b"ab"), bytearray(b"c")])
        assert bcast.statistics().broadcasts == 1
    finally:
        bcast.reset()


def _create_on_cuda(ctx: RankContext, store_dir: str) -> tuple[str, str]:
    from tpbcast.reference_impl._engines import TorchDistributedEngine

    try:
        TorchDistributedEngine.create(0, 1, store_dir, device="cuda", timeout=5.0)
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return "created", ""


@needs_torch
def test_creating_a_cuda_engine_passes_torch_the_device(short_dir: str) -> None:
    """``TorchDistributedEngine.create(device="cuda")`` hands torch the device as
    ``device_id``, which torch checks before anything else: on this CPU-only torch the
    call is refused by torch itself (ValueError naming ``device_id`` and cuda), not by
    Python for an unknown keyword.  The NCCL branch is not GPU-only: it runs up to
    ``init_process_group`` on any machine.  Runs in a forked rank (torch never in the
    pytest process).  Kills ``_engines.TorchDistributedEngine.create``
    ``kwargs["device_id"] = ...`` -> ``kwargs["XXdevice_idXX"] = ...`` and
    ``kwargs["DEVICE_ID"] = ...`` (TypeError: unexpected keyword argument)."""
    (seen,) = run_ranks(_create_on_cuda, 1, args=(short_dir,), **RUN).values()
    assert isinstance(seen, tuple)
    kind, message = seen
    if kind == "created":  # pragma: no cover - a machine with a GPU and NCCL
        pytest.skip("this torch has CUDA: create(device='cuda') succeeded")
    assert kind == "ValueError", message
    assert "device_id" in message and "cuda" in message, message


class _StopError(Exception):
    """Raised by the SIGUSR1 handler: ends the broadcast it interrupted."""


def _inside(frame: types.FrameType | None, name: str) -> bool:
    while frame is not None:
        if name in frame.f_code.co_name:
            return True
        frame = frame.f_back
    return False


def test_the_one_buffer_path_does_not_pin_the_callers_bytearray(base_path: str) -> None:
    """One bytearray goes to ``recv_into`` as it is (flat_buffer: no view per call), so
    while the peer waits for rank 0's bytes no view of it exists and it can still be
    resized (here from a SIGUSR1 handler that interrupted the wait inside
    ``recv_exact``; the handler then raises, which ends the broadcast).  White-box only
    in where the handler runs (the frame it interrupted); the signal is re-sent until it
    lands inside ``recv_exact`` (the broadcast may still be on its way there).  Kills
    ``_broadcaster.CpuTpBroadcaster.broadcast``
    ``data = flat_buffer(buffers, writable=not is_root)`` -> ``data = None`` and
    -> ``data = flat_buffer(None, writable=not is_root)``: every buffer then goes through
    prepare_buffers, whose memoryview pins the bytearray (BufferError on resize)."""
    config = fast_config(io_timeout=30.0)
    root, peer = CpuTpBroadcaster(config), CpuTpBroadcaster(config)
    starter = threading.Thread(target=lambda: root.initialize(0, 2, base_path), daemon=True)
    starter.start()
    buffer = bytearray(4)
    resized: list[BaseException | None] = []
    landed = threading.Event()
    main = threading.get_ident()

    def handler(signum: int, frame: types.FrameType | None) -> None:
        if not _inside(frame, "recv_exact"):
            return  # not yet waiting: the signaller sends again
        landed.set()
        try:
            buffer.append(0)
            resized.append(None)
        except BaseException as exc:
            resized.append(exc)
        raise _StopError

    def signaller() -> None:
        when_broadcasting(peer, _WAIT)
        for _ in range(int(_WAIT / 0.01)):
            signal.pthread_kill(main, signal.SIGUSR1)
            if landed.wait(0.01):
                return

    try:
        peer.initialize(1, 2, base_path)
        starter.join(_WAIT)
        assert root.is_initialized()
        old = signal.signal(signal.SIGUSR1, handler)
        try:
            thread = threading.Thread(target=signaller, daemon=True)
            thread.start()
            with pytest.raises(_StopError):  # the handler ran inside the broadcast
                peer.broadcast(buffer)
            thread.join(_WAIT)
            assert not thread.is_alive()
        finally:
            signal.signal(signal.SIGUSR1, old)
    finally:
        peer.reset()
        starter.join(_WAIT)
        root.reset()
    assert resized == [None], f"resizing the bytearray during the wait failed: {resized}"
    assert len(buffer) == 5
