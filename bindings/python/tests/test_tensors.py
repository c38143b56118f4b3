"""Array and tensor adaptation, without a server: what is accepted, what is
refused (and why), and that nothing is copied."""

from __future__ import annotations

import array
import ctypes

import numpy as np
import pytest

import tensorhub
from tensorhub import DType, MemKind
from tensorhub._tensors import numpy_dtype, to_c, view_of, views_of


@pytest.mark.parametrize("np_dtype, th_dtype", [
    (np.uint8, DType.UINT8), (np.int8, DType.INT8), (np.int16, DType.INT16), (np.int32, DType.INT32),
    (np.int64, DType.INT64), (np.float16, DType.FLOAT16), (np.float32, DType.FLOAT32),
    (np.float64, DType.FLOAT64), (np.bool_, DType.BOOL), (np.uint16, DType.UINT16),
    (np.uint32, DType.UINT32), (np.uint64, DType.UINT64),
])
def test_numpy_dtypes_map_to_th_dtypes(np_dtype: type, th_dtype: DType) -> None:
    a = np.zeros((2, 3), dtype=np_dtype)
    v = view_of("x", a, writable=True)
    assert v.dtype is th_dtype
    assert v.dtype.itemsize == a.itemsize
    assert (v.shape, v.nbytes, v.data, v.mem_kind) == ((2, 3), a.nbytes, a.ctypes.data, MemKind.HOST)
    assert numpy_dtype(th_dtype) == (np.dtype(np_dtype), True)


def test_dtype_names() -> None:
    assert DType.parse("bfloat16") is DType.BFLOAT16
    assert DType.parse("torch.float8_e4m3fn") is DType.FLOAT8_E4M3
    assert DType.parse("float8_e5m2") is DType.FLOAT8_E5M2
    assert DType.parse(7) is DType.FLOAT32
    with pytest.raises(tensorhub.InvalidArgument, match="unknown dtype 'complex64'"):
        DType.parse("complex64")


def test_with_dtype_reinterprets_same_size_elements() -> None:
    raw = np.zeros(8, np.uint16)
    v = view_of("w", tensorhub.with_dtype(raw, "bfloat16"), writable=True)
    assert (v.dtype, v.shape, v.data, v.nbytes) == (DType.BFLOAT16, (8,), raw.ctypes.data, 16)
    with pytest.raises(tensorhub.InvalidArgument, match="2-byte elements, not float32"):
        view_of("w", tensorhub.with_dtype(raw, "float32"), writable=False)


def test_non_contiguous_arrays_are_refused_not_copied() -> None:
    a = np.zeros((4, 4), np.float32)
    with pytest.raises(tensorhub.InvalidArgument, match=r"tensor 'w' is not C-contiguous .*ascontiguousarray"):
        view_of("w", a.T, writable=False)
    with pytest.raises(tensorhub.InvalidArgument, match="not C-contiguous"):
        view_of("w", a[:, ::2], writable=False)
    assert view_of("w", a[1:3], writable=False).data == a.ctypes.data + 16  # a contiguous slice is fine


def test_other_refusals() -> None:
    ro = np.zeros(3)
    ro.flags.writeable = False
    view_of("r", ro, writable=False)  # publishing read-only memory is fine
    with pytest.raises(tensorhub.InvalidArgument, match="read-only"):
        view_of("r", ro, writable=True)
    with pytest.raises(tensorhub.InvalidArgument, match="byte order"):
        view_of("b", np.zeros(3, ">f4"), writable=False)
    with pytest.raises(tensorhub.InvalidArgument, match="complex64 which tensorhub cannot carry"):
        view_of("c", np.zeros(3, np.complex64), writable=False)
    with pytest.raises(tensorhub.InvalidArgument, match="not an array or tensor"):
        view_of("l", [1.0, 2.0], writable=False)
    with pytest.raises(tensorhub.InvalidArgument, match="at most 8"):
        to_c(views_of({"deep": np.zeros((1,) * 9)}, writable=False))
    with pytest.raises(tensorhub.InvalidArgument, match="NUL"):
        to_c(views_of({"a\0b": np.zeros(1)}, writable=False))
    # InvalidArgument is also a ValueError.
    with pytest.raises(ValueError):
        view_of("l", "text", writable=False)


def test_state_dicts_and_pairs() -> None:
    a, b = np.zeros(2), np.ones(3, np.int32)
    assert [v.name for v in views_of({"b": b, "a": a}, writable=False)] == ["b", "a"]  # dict order kept
    assert [v.name for v in views_of(iter([("a", a), ("b", b)]), writable=False)] == ["a", "b"]
    with pytest.raises(tensorhub.InvalidArgument, match="no tensors"):
        views_of({}, writable=False)
    with pytest.raises(tensorhub.InvalidArgument, match="item 0 is a ndarray, not a"):
        views_of([b], writable=False)
    with pytest.raises(tensorhub.InvalidArgument, match="names must be str"):
        views_of([(1, a)], writable=False)
    with pytest.raises(tensorhub.InvalidArgument, match="expected a dict"):
        views_of("ab", writable=False)


def test_buffer_protocol_and_array_interface_objects_are_viewed_in_place() -> None:
    buf = bytearray(16)
    v = view_of("buf", buf, writable=True)
    assert (v.dtype, v.nbytes) == (DType.UINT8, 16)
    assert v.data == ctypes.addressof(ctypes.c_char.from_buffer(buf))
    floats = array.array("f", [1.0, 2.0])
    assert view_of("arr", floats, writable=True).dtype is DType.FLOAT32
    with pytest.raises(tensorhub.InvalidArgument, match="read-only"):
        view_of("bytes", b"abcd", writable=True)


def test_cpu_dlpack_objects() -> None:
    class OnlyDLPack:
        def __init__(self, a: np.ndarray) -> None:
            self.a = a

        def __dlpack__(self, **kwargs: object) -> object:
            return self.a.__dlpack__(**kwargs)

        def __dlpack_device__(self) -> tuple[int, int]:
            return self.a.__dlpack_device__()

    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    v = view_of("d", OnlyDLPack(a), writable=True)
    assert (v.dtype, v.shape, v.data) == (DType.INT32, (2, 3), a.ctypes.data)

    class OnGpu(OnlyDLPack):
        def __dlpack_device__(self) -> tuple[int, int]:
            return (2, 0)

    with pytest.raises(tensorhub.InvalidArgument, match="__cuda_array_interface__"):
        view_of("g", OnGpu(a), writable=True)


class FakeCuda:
    """__cuda_array_interface__ over host memory, with CuPy's .device.id."""

    class device:  # noqa: N801 (mimics cupy.cuda.Device)
        id = 3

    def __init__(self, a: np.ndarray, readonly: bool = False, strides: tuple[int, ...] | None = None) -> None:
        self.a = a
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str, "strides": strides,
                                         "data": (a.ctypes.data, readonly), "version": 3}


def test_cuda_array_interface() -> None:
    a = np.zeros((2, 4), np.float16)
    v = view_of("g", FakeCuda(a), writable=True)
    assert (v.mem_kind, v.device, v.dtype, v.shape, v.nbytes) == (MemKind.CUDA, 3, DType.FLOAT16, (2, 4), 16)
    assert view_of("g", FakeCuda(a, strides=(8, 2)), writable=True).data == a.ctypes.data
    assert view_of("g", FakeCuda(a[:1], strides=(12345, 2)), writable=True).shape == (1, 4)  # extent 1: any stride
    with pytest.raises(tensorhub.InvalidArgument, match="not C-contiguous"):
        view_of("g", FakeCuda(a, strides=(2, 4)), writable=True)
    with pytest.raises(tensorhub.InvalidArgument, match="read-only"):
        view_of("g", FakeCuda(a, readonly=True), writable=True)


def test_to_c_fills_th_tensor() -> None:
    a = np.zeros((3, 5), np.float32)
    (t,) = to_c(views_of({"layer": a}, writable=False))
    assert (t.name, t.dtype, t.ndim, list(t.shape[:2]), t.data, t.nbytes, t.mem_kind, t.device) == (
        b"layer", int(DType.FLOAT32), 2, [3, 5], a.ctypes.data, 60, 0, 0)
