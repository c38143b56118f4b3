"""Adapting arrays and tensors to th_tensor without copying them.

tensorhub reads (publish) and writes (fetch) caller memory in place, so every
input must be one contiguous buffer whose address can be handed to C. Accepted:
numpy arrays, torch tensors (CPU and CUDA), objects exposing
__cuda_array_interface__ (CuPy, Numba), CPU DLPack objects, and other objects
exposing __array_interface__ or the buffer protocol. Nothing is ever copied: an
input that would need a copy (non-contiguous, wrong byte order) is refused.
"""

from __future__ import annotations

import ctypes
import enum
import math
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Union

import numpy as np

from ._errors import InvalidArgument
from ._lib import TH_MAX_DIMS, Tensor, lib

__all__ = ["DType", "MemKind", "View", "Typed", "with_dtype", "views_of", "to_c", "numpy_dtype", "torch_dtype",
           "TensorLike", "Tensors"]

TensorLike = Any
"""Anything view_of accepts: an ndarray, a torch tensor, a CuPy array, ..."""

Tensors = Union[Mapping[str, TensorLike], Iterable[tuple[str, TensorLike]]]
"""A state_dict (name -> tensor, in dict order) or an iterable of (name, tensor) pairs."""


class DType(enum.IntEnum):
    """th_dtype: element types, with the library's numbering."""

    UINT8 = 0
    INT8 = 1
    INT16 = 2
    INT32 = 3
    INT64 = 4
    FLOAT16 = 5
    BFLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BOOL = 9
    FLOAT8_E4M3 = 10
    FLOAT8_E5M2 = 11
    UINT16 = 12
    UINT32 = 13
    UINT64 = 14

    @property
    def itemsize(self) -> int:
        """Bytes per element, as the library counts them."""
        return int(lib.th_dtype_size(int(self)))

    @classmethod
    def parse(cls, value: DType | int | str) -> DType:
        """A DType from itself, its number, or a name ("bfloat16", "float8_e4m3fn", "torch.float16", ...)."""
        if isinstance(value, DType):
            return value
        if isinstance(value, int):
            return cls(value)
        name = str(value).removeprefix("torch.")
        found = _BY_NAME.get(name)
        if found is None:
            raise InvalidArgument(-1, f"unknown dtype {value!r}; tensorhub knows {', '.join(sorted(_BY_NAME))}")
        return found


# numpy's dtype.name, torch's str(dtype) without "torch." and the header's
# names, all mapped to the same numbers. The float8 variants tensorhub carries
# are the "fn" (finite) E4M3 and plain E5M2 used by LLM checkpoints.
_BY_NAME: dict[str, DType] = {
    "uint8": DType.UINT8, "int8": DType.INT8, "int16": DType.INT16, "int32": DType.INT32, "int64": DType.INT64,
    "float16": DType.FLOAT16, "half": DType.FLOAT16, "bfloat16": DType.BFLOAT16, "float32": DType.FLOAT32,
    "float": DType.FLOAT32, "float64": DType.FLOAT64, "double": DType.FLOAT64, "bool": DType.BOOL,
    "float8_e4m3": DType.FLOAT8_E4M3, "float8_e4m3fn": DType.FLOAT8_E4M3, "float8_e5m2": DType.FLOAT8_E5M2,
    "uint16": DType.UINT16, "uint32": DType.UINT32, "uint64": DType.UINT64,
}
_NUMPY_NAME = {d: d.name.lower() for d in DType}
_NUMPY_NAME[DType.FLOAT8_E4M3] = "float8_e4m3fn"


class MemKind(enum.IntEnum):
    """th_mem_kind: where a buffer lives."""

    HOST = 0
    CUDA = 1


@dataclass(frozen=True)
class View:
    """One buffer as the library will see it; `owner` keeps the memory alive."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    data: int
    nbytes: int
    mem_kind: MemKind
    device: int
    owner: object

    def span(self) -> tuple[int, int, int]:
        """(memory kind and device, first byte, one past the last byte), to detect overlapping buffers."""
        return (int(self.mem_kind) << 32 | self.device & 0xFFFFFFFF, self.data, self.data + self.nbytes)


@dataclass(frozen=True)
class Typed:
    """A buffer whose elements are to be read as another dtype of the same size.

    For memory numpy has no dtype for: bfloat16 or float8 weights held in
    uint16/uint8 arrays when ml_dtypes is not installed. Made by with_dtype().
    """

    tensor: TensorLike
    dtype: DType


def with_dtype(tensor: TensorLike, dtype: DType | int | str) -> Typed:
    """Marks `tensor` as holding elements of `dtype` (same item size), e.g.
    ``with_dtype(np.empty(n, np.uint16), "bfloat16")``. No copy is made."""
    return Typed(tensor, DType.parse(dtype))


def _invalid(name: str, problem: str) -> InvalidArgument:
    return InvalidArgument(-1, f"tensor '{name}' {problem}")


def _dtype_from_numpy(name: str, dt: np.dtype) -> DType:
    if not dt.isnative and dt.itemsize > 1:
        raise _invalid(name, f"has non-native byte order ({dt.str}); convert it with .astype(dtype.newbyteorder('='))")
    found = _BY_NAME.get(dt.name)
    if found is None:
        raise _invalid(name, f"has numpy dtype {dt} which tensorhub cannot carry (if its bytes are one of "
                       f"{', '.join(_NUMPY_NAME.values())}, wrap it: tensorhub.with_dtype(x, dtype))")
    return found


def _from_numpy(name: str, arr: np.ndarray, writable: bool, owner: object) -> View:
    if not arr.flags.c_contiguous:
        raise _invalid(name, f"is not C-contiguous (shape {arr.shape}, strides {arr.strides}): tensorhub uses the "
                       "memory in place and never copies; pass np.ascontiguousarray(x) to publish, or a "
                       "contiguous array to fetch into")
    if writable and not arr.flags.writeable:
        raise _invalid(name, "is read-only and cannot be fetched into")
    return View(name, _dtype_from_numpy(name, arr.dtype), tuple(arr.shape), arr.ctypes.data, arr.nbytes,
                MemKind.HOST, 0, owner)


def _from_torch(name: str, t: Any) -> View:
    if t.layout is not sys.modules["torch"].strided:
        raise _invalid(name, f"has layout {t.layout}; only dense tensors can be carried")
    if not t.is_contiguous():
        raise _invalid(name, f"is not contiguous (shape {tuple(t.shape)}, stride {t.stride()}): tensorhub uses "
                       "the memory in place and never copies; pass t.contiguous() to publish, or a contiguous "
                       "tensor to fetch into")
    if t.device.type == "cpu":
        kind, device = MemKind.HOST, 0
    elif t.device.type == "cuda":
        kind, device = MemKind.CUDA, t.device.index if t.device.index is not None else 0
    else:
        raise _invalid(name, f"is on device {t.device}; tensorhub carries CPU and CUDA memory")
    dtype = _BY_NAME.get(str(t.dtype).removeprefix("torch."))
    if dtype is None:
        raise _invalid(name, f"has dtype {t.dtype} which tensorhub cannot carry")
    return View(name, dtype, tuple(t.shape), int(t.data_ptr()), t.numel() * t.element_size(), kind, device, t)


def _from_cuda_array_interface(name: str, obj: Any, writable: bool) -> View:
    cai = obj.__cuda_array_interface__
    shape = tuple(int(s) for s in cai["shape"])
    dt = np.dtype(cai["typestr"])
    strides = cai.get("strides")
    if strides is not None and not _is_c_contiguous(shape, tuple(strides), dt.itemsize):
        raise _invalid(name, f"is not C-contiguous (strides {tuple(strides)}): tensorhub never copies")
    ptr, readonly = cai["data"]
    if writable and readonly:
        raise _invalid(name, "is read-only and cannot be fetched into")
    if cai.get("mask") is not None:
        raise _invalid(name, "is a masked array")
    # The interface does not say which GPU; CuPy and Numba arrays carry it as .device.id.
    device = int(getattr(getattr(obj, "device", None), "id", 0) or 0)
    return View(name, _dtype_from_numpy(name, dt), shape, int(ptr or 0), math.prod(shape) * dt.itemsize,
                MemKind.CUDA, device, obj)


def _is_c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> bool:
    # As numpy decides it: the strides of dimensions of extent 1 do not matter.
    if math.prod(shape) == 0:
        return True
    step = itemsize
    for n, stride in zip(reversed(shape), reversed(strides)):
        if n != 1 and stride != step:
            return False
        step *= n
    return True


def _from_dlpack(name: str, obj: Any, writable: bool) -> View:
    device_type, _ = obj.__dlpack_device__()
    if int(device_type) not in (1, 3):  # kDLCPU, kDLCUDAHost
        raise _invalid(name, f"is a DLPack tensor on device type {device_type}; pass a torch tensor or an object "
                       "with __cuda_array_interface__ for GPU memory")
    try:
        arr = np.from_dlpack(obj)
    except (TypeError, BufferError, RuntimeError) as e:
        raise _invalid(name, f"cannot be viewed through DLPack: {e}") from e
    return _from_numpy(name, arr, writable, obj)


def view_of(name: str, obj: TensorLike, *, writable: bool) -> View:
    """The View of one tensor. `writable`: it is a fetch destination."""
    if isinstance(obj, Typed):
        inner = view_of(name, obj.tensor, writable=writable)
        count = math.prod(inner.shape)
        if count and inner.nbytes != count * obj.dtype.itemsize:
            raise _invalid(name, f"holds {inner.nbytes // count}-byte elements, not {obj.dtype.name.lower()} "
                           f"({obj.dtype.itemsize} bytes)")
        return View(name, obj.dtype, inner.shape, inner.data, inner.nbytes, inner.mem_kind, inner.device, inner.owner)
    torch = sys.modules.get("torch")  # never imported here: a tensor implies torch is loaded
    if torch is not None and isinstance(obj, torch.Tensor):
        return _from_torch(name, obj)
    if isinstance(obj, np.ndarray):
        return _from_numpy(name, obj, writable, obj)
    if hasattr(obj, "__cuda_array_interface__"):
        return _from_cuda_array_interface(name, obj, writable)
    if hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__"):
        return _from_dlpack(name, obj, writable)
    if hasattr(obj, "__array_interface__"):
        # The interface describes existing memory, so np.asarray views it.
        return _from_numpy(name, np.asarray(obj), writable, obj)
    if _has_buffer(obj):
        return _from_numpy(name, np.asarray(memoryview(obj)), writable, obj)
    raise _invalid(name, f"is a {type(obj).__module__}.{type(obj).__qualname__}, not an array or tensor "
                   "(numpy, torch, CuPy, DLPack or buffer-protocol objects are accepted)")


def _has_buffer(obj: object) -> bool:
    if isinstance(obj, (str, list, tuple)):
        return False
    try:
        memoryview(obj)  # type: ignore[arg-type]
    except TypeError:
        return False
    return True


def views_of(tensors: Tensors, *, writable: bool) -> list[View]:
    """Views of a state_dict (dict order) or of (name, tensor) pairs."""
    items: Iterable[Any] = tensors.items() if isinstance(tensors, Mapping) else tensors
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise InvalidArgument(-1, f"expected a dict of name -> tensor or (name, tensor) pairs, got "
                              f"{type(tensors).__name__}")
    out = []
    for i, item in enumerate(items):
        try:
            name, tensor = item
        except (TypeError, ValueError):
            raise InvalidArgument(-1, f"item {i} is a {type(item).__name__}, not a (name, tensor) pair") from None
        if not isinstance(name, str):
            raise InvalidArgument(-1, f"item {i} has name {name!r}; names must be str")
        out.append(view_of(name, tensor, writable=writable))
    if not out:
        raise InvalidArgument(-1, "no tensors given")
    return out


def to_c(views: list[View]) -> ctypes.Array[Tensor]:
    """A th_tensor array for the views. The array keeps the encoded names alive;
    the caller keeps the views (and so the memory) alive."""
    arr = (Tensor * len(views))()
    for t, v in zip(arr, views):
        name = v.name.encode("utf-8")
        if b"\0" in name:
            raise _invalid(v.name, "has a NUL character in its name")
        if len(v.shape) > TH_MAX_DIMS:
            raise _invalid(v.name, f"has {len(v.shape)} dimensions; tensorhub carries at most {TH_MAX_DIMS}")
        t.name = name
        t.dtype = int(v.dtype)
        t.ndim = len(v.shape)
        for d, n in enumerate(v.shape):
            t.shape[d] = n
        t.data = v.data or None
        t.nbytes = v.nbytes
        t.mem_kind = int(v.mem_kind)
        t.device = v.device
    return arr


def numpy_dtype(dtype: DType) -> tuple[np.dtype, bool]:
    """The numpy dtype to allocate `dtype` in, and whether it is exact.

    bfloat16 and float8 need ml_dtypes; without it, they are allocated as raw
    uint16/uint8 (not exact: wrap such arrays with with_dtype())."""
    try:
        return np.dtype(_NUMPY_NAME[dtype]), True
    except TypeError:
        pass
    try:
        import ml_dtypes  # noqa: F401  (registers bfloat16/float8 with numpy)

        return np.dtype(getattr(ml_dtypes, _NUMPY_NAME[dtype])), True
    except (ImportError, AttributeError):
        return np.dtype(f"u{dtype.itemsize}"), False


def torch_dtype(dtype: DType) -> Any:
    """The torch dtype for `dtype` (imports torch)."""
    import torch

    return getattr(torch, _NUMPY_NAME[dtype])
