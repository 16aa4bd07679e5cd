"""GPU tier: ALiBi slopes in ``attention`` at real, odd sizes on mma.sync and (sm_90) wgmma, against the
f64 reference of the emulator tier (bias ``-slope * |i + Skv - Sq - j|``), every element written."""

from __future__ import annotations

import pytest
import torch

from tests.emulator.test_attention_alibi import reference
from wavec.kernels import attention as at

pytestmark = pytest.mark.gpu
TOL = {torch.float16: 3e-3, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("mma", ["mma_sync", "wgmma"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("causal,per_batch", [(False, False), ("bottom_right", True), ("top_left", False)])
def test_alibi_on_gpu(mma: str, dtype, causal, per_batch: bool) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if mma == "wgmma" and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma needs an sm_90 GPU")
    g = torch.Generator(device="cuda").manual_seed(7)
    b, h, kvh, sq, skv, d = 2, 8, 2, 333 if causal != "top_left" else 517, 517, 128
    q = torch.randn(b, h, sq, d, device="cuda", dtype=dtype, generator=g)
    k, v = (torch.randn(b, kvh, skv, d, device="cuda", dtype=dtype, generator=g) for _ in range(2))
    slopes = torch.rand((b, h) if per_batch else (h,), device="cuda", generator=g) * 0.1
    out = at.attention(q, k, v, causal=causal, alibi_slopes=slopes, mma=mma)
    torch.cuda.synchronize()
    assert not out.isnan().any()
    want = reference(q.cpu(), k.cpu(), v.cpu(), slopes.cpu(), causal, d**-0.5)
    torch.testing.assert_close(out.double().cpu(), want, atol=TOL[dtype], rtol=TOL[dtype])
