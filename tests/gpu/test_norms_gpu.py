"""GPU tier: RMSNorm and LayerNorm against torch on the device."""

import pytest
import torch
import torch.nn.functional as F

import wavec as wc
from wavec.kernels.norms import BLOCK_M, N, make_layernorm, make_rmsnorm

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype,tdt,tol", [(wc.f16, torch.float16, 2e-3), (wc.bf16, torch.bfloat16, 1e-2)])
@pytest.mark.parametrize("rows,n,waves_per_row", [(1, 1024, 1), (4097, 4096, 1), (4097, 4096, 4), (3, 2048, 2)])
def test_norms(dtype, tdt, tol, rows, n, waves_per_row) -> None:
    x = torch.randn(rows, n, device="cuda").to(tdt)
    w, b = torch.randn(n, device="cuda").to(tdt), torch.randn(n, device="cuda").to(tdt)
    rms = wc.compile(make_rmsnorm(n, dtype, waves_per_row=waves_per_row), {BLOCK_M: 4, N: n}, backend="cuda")
    ln = wc.compile(make_layernorm(n, dtype, waves_per_row=waves_per_row), {BLOCK_M: 4, N: n}, backend="cuda")
    out = torch.full_like(x, float("nan"))
    rms(x, w, out)
    xd = x.double()
    ref = xd * torch.rsqrt((xd * xd).mean(-1, keepdim=True) + 1e-6) * w.double()
    assert not out.isnan().any() and ((out.double() - ref).norm() / ref.norm()).item() < tol
    out = torch.full_like(x, float("nan"))
    ln(x, w, b, out)
    ref = F.layer_norm(xd, (n,), w.double(), b.double(), 1e-5)
    assert not out.isnan().any() and ((out.double() - ref).norm() / ref.norm()).item() < tol
