"""GPU tier: flash attention with K and V staged by TMA (``async_copy="tma"``, what "auto" takes for wgmma on
sm_90a) equals the ``async_copy="cp.async"`` kernel bit for bit (same tiles, same arithmetic order) and
matches SDPA at real shapes."""

from __future__ import annotations

import pytest
import torch
from test_attention_gpu import TOL, _inputs, _reference

from wavec.kernels.attention import attention

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype,layout", [("f16", "bhsd"), ("bf16", "bshd")])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("config", [None, (128, 64, 2), (128, 128, 2, 3)])
@pytest.mark.parametrize("b,h,kvh,sq,skv", [(1, 32, 8, 2048, 2048), (3, 8, 2, 777, 1333), (2, 4, 4, 64, 100)])
def test_attention_tma_equals_cp_async(dtype, layout, causal, d, config, b, h, kvh, sq, skv) -> None:
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("TMA + wgmma needs an sm_90 GPU (H100/H200)")
    q, k, v = _inputs(b, h, kvh, sq, skv, d, dtype, layout)
    causal = "top_left" if causal and sq != skv else causal  # SDPA's is_causal; True needs sq == skv
    tma = attention(q, k, v, causal=causal, layout=layout, mma="wgmma", config=config, async_copy="tma")
    base = attention(q, k, v, causal=causal, layout=layout, mma="wgmma", config=config, async_copy="cp.async")
    torch.cuda.synchronize()
    assert torch.equal(tma, base)
    torch.testing.assert_close(tma.float(), _reference(q, k, v, causal, layout), rtol=TOL[dtype], atol=TOL[dtype])
