"""GPU tier: wc.topk (f32, i32, f16, bf16; one wave, two and four waves per row; k up to 128; ties and NaN;
rows walked in loop tiles with a carried top-k)
and wavec.kernels.topk_softmax (every supported E, k, renormalize, the torch operator) on the device
against torch on fresh random inputs, outputs pre-filled with values no result can take."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import reduce_kernels as rk
from wavec.kernels import moe_routing as mr

pytestmark = pytest.mark.gpu


def _topk(dtype: str, k: int, x: torch.Tensor, **shape) -> tuple[torch.Tensor, torch.Tensor]:
    kern = wc.compile(rk.make_topk(getattr(wc, dtype), **shape), {rk.N: x.shape[1], rk.K: k}, backend="cuda")
    values = torch.full((x.shape[0], k), 99 if dtype == "i32" else 1e4, dtype=rk.TORCH[dtype], device="cuda")
    indices = torch.full((x.shape[0], k), -1, dtype=torch.int32, device="cuda")
    kern(x.cuda(), values, indices)
    torch.cuda.synchronize()
    return values, indices


@pytest.mark.parametrize("dtype", ["f32", "i32", "f16", "bf16"])
@pytest.mark.parametrize("waves,tiles", [(1, 1), (1, 2), (2, 2), (4, 1)])
@pytest.mark.parametrize("ties", [False, True])
def test_topk(dtype: str, waves: int, tiles: int, ties: bool) -> None:
    x = rk.random_values((37, 512), dtype, torch.Generator().manual_seed(waves * 10 + tiles), ties=ties)
    if x.is_floating_point():
        x[1, 100] = x[1, 300] = float("nan")
        x[2, 5], x[3, 400] = float("-inf"), float("inf")
    values, indices = _topk(dtype, 16, x, waves_n=waves, tiles=tiles)
    rk.check_topk(x, 16, values, indices)


@pytest.mark.parametrize("k", [1, 4, 64, 128])
def test_topk_k_range(k: int) -> None:
    x = torch.randn(37, 512, generator=torch.Generator().manual_seed(k))
    values, indices = _topk("f32", k, x, waves_n=4, tiles=2)
    rk.check_topk(x, k, values, indices)


@pytest.mark.parametrize("dtype", ["f32", "i32", "f16", "bf16"])
@pytest.mark.parametrize("k", [1, 8, 20, 64, 128])
@pytest.mark.parametrize("n,tiles", [(1000, 1), (4096, 2)])
def test_topk_across_loop_tiles(dtype: str, k: int, n: int, tiles: int) -> None:
    """The running top-k (``carry=``) over loop tiles of 128; 1000 ends in a masked partial tile."""
    x = rk.random_values((37, n), dtype, torch.Generator().manual_seed(k * 7 + tiles), ties=k % 2 == 0)
    if x.is_floating_point():
        x[1, 900] = x[1, 3] = float("nan")
        x[2] = -x[2].abs() - 1
        x[3, 500:] = float("-inf")
    kern = wc.compile(rk.make_topk_loop(getattr(wc, dtype), block=128, tiles=tiles), {rk.N: n, rk.K: k}, backend="cuda")
    values = torch.full((37, k), 99 if dtype == "i32" else 1e4, dtype=rk.TORCH[dtype], device="cuda")
    indices = torch.full((37, k), -7, dtype=torch.int32, device="cuda")
    kern(x.cuda(), values, indices)
    torch.cuda.synchronize()
    rk.check_topk(x, k, values, indices)


@pytest.mark.parametrize("experts", [8, 16, 32, 64, 128, 256, 512])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("k,renormalize", [(1, False), (2, True), (6, False), (8, True)])
def test_topk_softmax(experts: int, dtype: torch.dtype, k: int, renormalize: bool) -> None:
    if (k + 3) // 4 * 4 > experts:
        pytest.skip("k rounded up to a multiple of 4 exceeds E")
    x = (torch.randn(1001, experts, generator=torch.Generator().manual_seed(experts + k)) * 3).to(dtype).cuda()
    w, i = mr.topk_softmax(x, k, renormalize)
    assert w.is_cuda and i.is_cuda
    mr.check_routing(x, k, renormalize, w, i)


def test_topk_softmax_torch_operator() -> None:
    from wavec.kernels import torch_ops  # noqa: F401 - registers torch.ops.wavec.*

    x = torch.randn(333, 128, device="cuda", dtype=torch.bfloat16)
    w, i = torch.ops.wavec.topk_softmax(x, 8, True)
    mr.check_routing(x, 8, True, w, i)
    compiled = torch.compile(lambda t: torch.ops.wavec.topk_softmax(t, 8, True), fullgraph=True)
    w2, i2 = compiled(x)
    assert torch.equal(w2, w) and torch.equal(i2, i)
