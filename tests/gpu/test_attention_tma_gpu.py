"""GPU tier: flash attention with K and V staged by TMA (``async_copy="tma"``, wgmma, sm_90a) equals the
cp.async kernel bit for bit (same tiles, same arithmetic order) and matches SDPA at real shapes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from wavec.kernels.attention import attention

pytestmark = pytest.mark.gpu
TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}
TOL = {"f16": 3e-3, "bf16": 2e-2}


def _reference(q, k, v, causal, layout):
    if layout == "bshd":
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    g = q.shape[1] // k.shape[1]
    out = F.scaled_dot_product_attention(q.float(), k.float().repeat_interleave(g, 1),
                                         v.float().repeat_interleave(g, 1), is_causal=causal)
    return out if layout == "bhsd" else out.transpose(1, 2)


def _inputs(b, h, kvh, sq, skv, d, dtype, layout):
    def make(heads, s):
        shape = (b, heads, s, d) if layout == "bhsd" else (b, s, heads, d)
        return torch.randn(shape, device="cuda", dtype=TORCH[dtype])
    return make(h, sq), make(kvh, skv), make(kvh, skv)


@pytest.mark.parametrize("dtype,layout", [("f16", "bhsd"), ("bf16", "bshd")])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("config", [None, (128, 64, 2), (128, 128, 2, 3)])
@pytest.mark.parametrize("b,h,kvh,sq,skv", [(1, 32, 8, 2048, 2048), (3, 8, 2, 777, 1333), (2, 4, 4, 64, 100)])
def test_attention_tma_equals_cp_async(dtype, layout, causal, d, config, b, h, kvh, sq, skv) -> None:
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("TMA + wgmma needs an sm_90 GPU (H100/H200)")
    q, k, v = _inputs(b, h, kvh, sq, skv, d, dtype, layout)
    tma = attention(q, k, v, causal=causal, layout=layout, mma="wgmma", config=config, async_copy="tma")
    base = attention(q, k, v, causal=causal, layout=layout, mma="wgmma", config=config)
    torch.cuda.synchronize()
    assert torch.equal(tma, base)
    torch.testing.assert_close(tma.float(), _reference(q, k, v, causal, layout), rtol=TOL[dtype], atol=TOL[dtype])
