"""torch tensors, CPU and CUDA, published and fetched in place (skipped without torch, except in CI)."""

from __future__ import annotations

import pytest

import tensorhub
from _requires import require
from tensorhub import DType, MemKind
from tensorhub._tensors import view_of

torch = require("torch")


def state(seed: int, device: str = "cpu") -> dict[str, "torch.Tensor"]:
    g = torch.Generator().manual_seed(seed)
    out = {
        "w32": torch.randn(64, 32, generator=g),
        "bf16": torch.randn(100, generator=g).to(torch.bfloat16),
        "f16": torch.randn(3, 7, generator=g).to(torch.float16),
        "i64": torch.randint(0, 1000, (9,), generator=g),
        "flag": torch.rand(5, generator=g) > 0.5,
    }
    if hasattr(torch, "float8_e4m3fn"):
        out["fp8"] = torch.randn(16, generator=g).to(torch.float8_e4m3fn)
    return {k: v.to(device) for k, v in out.items()}


def test_torch_dtypes_and_views() -> None:
    expected = {"w32": DType.FLOAT32, "bf16": DType.BFLOAT16, "f16": DType.FLOAT16, "i64": DType.INT64,
                "flag": DType.BOOL, "fp8": DType.FLOAT8_E4M3}
    for name, t in state(0).items():
        v = view_of(name, t, writable=True)
        assert (v.dtype, v.shape, v.data, v.nbytes, v.mem_kind) == (
            expected[name], tuple(t.shape), t.data_ptr(), t.numel() * t.element_size(), MemKind.HOST)
    with pytest.raises(tensorhub.InvalidArgument, match=r"not contiguous .*t\.contiguous\(\)"):
        view_of("t", torch.zeros(4, 4).t(), writable=False)
    with pytest.raises(tensorhub.InvalidArgument, match="cannot carry"):
        view_of("c", torch.zeros(2, dtype=torch.complex64), writable=False)


def _bitwise_equal(a: "torch.Tensor", b: "torch.Tensor") -> bool:
    return a.cpu().view(torch.uint8).equal(b.cpu().view(torch.uint8)) if a.numel() else True


def _round_trip(server: tensorhub.Server, device: str) -> None:
    with tensorhub.Client(server, name="torch-pub") as pub, tensorhub.Client(server, name="torch-reader") as rd:
        src = state(1, device)
        pub.publish("t", 1, src)
        dst = {k: torch.empty_like(v) for k, v in src.items()}
        assert rd.fetch("t", into=dst) == 1
        for k in src:
            assert _bitwise_equal(src[k], dst[k]), k


def test_cpu_round_trip(server: tensorhub.Server) -> None:
    _round_trip(server, "cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_round_trip(server: tensorhub.Server) -> None:
    v = view_of("g", torch.zeros(4, device="cuda:0"), writable=True)
    assert (v.mem_kind, v.device) == (MemKind.CUDA, 0)
    _round_trip(server, "cuda:0")


def test_fetch_iter_like_torch(server: tensorhub.Server) -> None:
    with tensorhub.Client(server) as pub, tensorhub.Client(server) as rd:
        src = state(2)
        pub.publish("t", 1, src)
        got = dict(rd.fetch_iter("t", like="torch"))
        assert list(got) == list(src)
        for k in src:
            assert got[k].dtype == src[k].dtype and _bitwise_equal(src[k], got[k]), k
