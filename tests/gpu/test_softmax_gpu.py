"""GPU tier: softmax (wc.max / wc.sum across lanes) against torch on the device."""

import pytest
import torch

import wavec as wc
from wavec.kernels.row_softmax import BLOCK_M, N, make_softmax

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    "dtype,tdt,tol", [(wc.f16, torch.float16, 2e-3), (wc.bf16, torch.bfloat16, 1e-2), (wc.f32, torch.float32, 1e-6)]
)
@pytest.mark.parametrize("rows,n", [(1, 256), (4097, 1024), (1000, 4096)])
def test_softmax(dtype, tdt, tol, rows, n) -> None:
    k = wc.compile(make_softmax(dtype), {BLOCK_M: 4, N: n}, backend="cuda")
    x = (torch.randn(rows, n, device="cuda") * 3).to(tdt)
    out = torch.full_like(x, float("nan"))
    k(x, out)
    torch.cuda.synchronize()
    ref = torch.softmax(x.double(), dim=-1)
    assert not out.isnan().any()
    assert ((out.double() - ref).norm() / ref.norm()).item() < tol


@pytest.mark.parametrize("rows,n,waves_per_row", [(4097, 4096, 4), (3, 2048, 2)])
def test_softmax_several_waves_per_row(rows, n, waves_per_row) -> None:
    k = wc.compile(make_softmax(wc.f16, waves_per_row=waves_per_row), {BLOCK_M: 2, N: n}, backend="cuda")
    x = (torch.randn(rows, n, device="cuda") * 3).half()
    out = torch.full_like(x, float("nan"))
    k(x, out)
    ref = torch.softmax(x.double(), dim=-1)
    assert not out.isnan().any()
    assert ((out.double() - ref).norm() / ref.norm()).item() < 2e-3
