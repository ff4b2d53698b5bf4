"""Turn what a caller passes to ``broadcast`` into flat byte memoryviews.

Accepted: one buffer or a list/tuple of them; each a bytes-like object
(``bytes`` only on the root, since peers receive in place), ``bytearray``,
``memoryview``, ``array.array``, a numpy array or a torch CPU tensor,
contiguous or not.  A non-contiguous array/tensor is copied into a contiguous
temporary, broadcast, and on peers copied back (what upstream's
``execBroadcastCpu`` does with ``contiguous()``).

numpy and torch are never imported here: an object can only be a numpy array
or a torch tensor if its module is already in ``sys.modules``.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._errors import ConfigurationError

__all__ = ["PreparedBuffers", "flat_buffer", "prepare_buffers"]

_READ_ONLY_HINT = (
    "a non-root rank receives in place, so pass a bytearray, a writable memoryview, "
    "a numpy array or a torch CPU tensor"
)


@dataclass(slots=True)
class PreparedBuffers:
    """Flat byte views in wire order, plus the copy-backs for temporaries."""

    views: list[memoryview] = field(default_factory=list)
    copy_backs: list[Callable[[], None]] = field(default_factory=list)
    # Keeps tensors/temporaries (whose memory the views point into) alive.
    keep_alive: list[object] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(len(v) for v in self.views)

    def finish(self) -> None:
        """Copy received bytes back into non-contiguous originals (peers only)."""
        for copy_back in self.copy_backs:
            copy_back()

    def release(self) -> None:
        """Drop the views so exported buffers (bytearray) can resize again."""
        for view in self.views:
            view.release()
        self.views.clear()
        self.keep_alive.clear()


def _torch_tensor_type() -> type | None:
    torch = sys.modules.get("torch")
    return getattr(torch, "Tensor", None) if torch is not None else None


def _numpy_array_type() -> type | None:
    numpy = sys.modules.get("numpy")
    return getattr(numpy, "ndarray", None) if numpy is not None else None


def _tensor_view(tensor: Any, prepared: PreparedBuffers) -> memoryview:
    nbytes = int(tensor.numel()) * int(tensor.element_size())
    if nbytes == 0:
        return memoryview(bytearray())
    raw = (ctypes.c_ubyte * nbytes).from_address(int(tensor.data_ptr()))
    prepared.keep_alive.extend((tensor, raw))
    return memoryview(raw).cast("B")


def _add_tensor(index: int, tensor: Any, prepared: PreparedBuffers, *, writable: bool) -> None:
    torch = sys.modules["torch"]
    if tensor.device.type != "cpu":
        raise ConfigurationError(
            f"buffer {index} is a torch tensor on device '{tensor.device}'; only CPU tensors "
            "can be broadcast over the socket (copy it with .cpu() first)"
        )
    if tensor.layout != torch.strided:
        raise ConfigurationError(
            f"buffer {index} is a torch tensor with layout {tensor.layout}; only strided "
            "(dense) tensors can be broadcast"
        )
    needs_copy = not tensor.is_contiguous() or tensor.is_conj() or tensor.is_neg()
    if not needs_copy:
        prepared.views.append(_tensor_view(tensor, prepared))
        return
    with torch.no_grad():
        temp = tensor.resolve_conj().resolve_neg().contiguous()
        if temp.data_ptr() == tensor.data_ptr():  # resolve_* may alias; force a copy
            temp = temp.clone()
    prepared.views.append(_tensor_view(temp, prepared))
    if writable:

        def copy_back(dst: Any = tensor, src: Any = temp) -> None:
            with torch.no_grad():
                dst.copy_(src)

        prepared.copy_backs.append(copy_back)


def _add_ndarray(index: int, array: Any, prepared: PreparedBuffers, *, writable: bool) -> None:
    numpy = sys.modules["numpy"]
    if array.dtype.hasobject:
        raise ConfigurationError(
            f"buffer {index} is a numpy array of dtype {array.dtype}; it holds Python object "
            "pointers, which mean nothing in another process"
        )
    if writable and not array.flags.writeable:
        raise ConfigurationError(f"buffer {index} is a read-only numpy array; {_READ_ONLY_HINT}")
    if array.flags.c_contiguous:
        prepared.keep_alive.append(array)
        prepared.views.append(memoryview(array.reshape(-1).view(numpy.uint8)))
        return
    temp = numpy.ascontiguousarray(array)
    prepared.keep_alive.append(temp)
    prepared.views.append(memoryview(temp.reshape(-1).view(numpy.uint8)))
    if writable:
        prepared.copy_backs.append(lambda: numpy.copyto(array, temp))


def _flat_bytes(view: memoryview, prepared: PreparedBuffers) -> memoryview:
    """A 1-D unsigned-byte view of a C-contiguous buffer of any format."""
    if (view.format, view.ndim) == ("B", 1):
        return view
    try:
        return view.cast("B")
    except TypeError:  # a format memoryview.cast does not know
        if view.readonly:
            return memoryview(view.tobytes())  # only the root sends read-only data
        raw = (ctypes.c_ubyte * view.nbytes).from_buffer(view)
        prepared.keep_alive.append(raw)
        return memoryview(raw).cast("B")


def _add_buffer(index: int, obj: Any, prepared: PreparedBuffers, *, writable: bool) -> None:
    try:
        view = memoryview(obj)
    except TypeError:
        raise ConfigurationError(
            f"buffer {index} of type {type(obj).__name__} is not a buffer; pass bytes-like "
            "objects, numpy arrays or torch CPU tensors"
        ) from None
    if writable and view.readonly:
        raise ConfigurationError(
            f"buffer {index} ({type(obj).__name__}) is read-only; {_READ_ONLY_HINT}"
        )
    if view.c_contiguous:
        prepared.views.append(_flat_bytes(view, prepared))
        return
    if view.ndim == 1 and len(view.format.lstrip("@")) == 1:
        # A strided 1-D view (e.g. ``memoryview(buf)[::2]``): no numpy needed.
        temp = bytearray(view.tobytes())
        prepared.views.append(memoryview(temp))
        if writable:
            fmt: Any = view.format  # any native single-character format

            def copy_back() -> None:
                view[:] = memoryview(temp).cast(fmt)

            prepared.copy_backs.append(copy_back)
        return
    ndarray = _numpy_array_type()
    if ndarray is None:
        try:
            import numpy  # noqa: F401  (only for a strided memoryview)
        except ImportError:
            raise ConfigurationError(
                f"buffer {index} is a non-contiguous memoryview; install numpy or pass a "
                "contiguous buffer"
            ) from None
    numpy_mod = sys.modules["numpy"]
    _add_ndarray(index, numpy_mod.asarray(view), prepared, writable=writable)


_BYTE_FORMATS = frozenset({"B", "b", "c"})


def flat_buffer(obj: object, *, writable: bool) -> bytes | bytearray | memoryview | None:
    """``obj`` itself when it can go to the socket as it is, else None.

    The broadcast hot path: a ``bytearray``, ``bytes`` (root only), or a C-contiguous
    1-D byte-format memoryview (writable on peers) is handed to ``send``/``recv_into``
    unchanged -- no view, no list, no temporary per call.  Everything else (numpy
    arrays, tensors, other formats, lists, anything to refuse with a reason) goes
    through :func:`prepare_buffers`.
    """
    if isinstance(obj, bytearray):
        return obj
    if isinstance(obj, memoryview):
        try:
            if (
                obj.c_contiguous
                and obj.ndim == 1
                and obj.format in _BYTE_FORMATS
                and not (writable and obj.readonly)
            ):
                return obj
        except ValueError:  # released: prepare_buffers says so
            return None
        return None
    if isinstance(obj, bytes) and not writable:
        return obj
    return None


def prepare_buffers(buffers: object, *, writable: bool) -> PreparedBuffers:
    """Flatten ``buffers`` into byte views in wire order.

    :param writable: True on peers (bytes are received in place).
    :raises ConfigurationError: a non-buffer, a read-only buffer on a peer, a
        non-CPU or sparse tensor, or an object-dtype array.
    """
    items = list(buffers) if isinstance(buffers, list | tuple) else [buffers]
    prepared = PreparedBuffers()
    tensor_type = _torch_tensor_type()
    ndarray = _numpy_array_type()
    try:
        for index, obj in enumerate(items):
            if tensor_type is not None and isinstance(obj, tensor_type):
                _add_tensor(index, obj, prepared, writable=writable)
            elif ndarray is not None and isinstance(obj, ndarray):
                _add_ndarray(index, obj, prepared, writable=writable)
            else:
                _add_buffer(index, obj, prepared, writable=writable)
    except BaseException:
        prepared.release()
        raise
    return prepared
