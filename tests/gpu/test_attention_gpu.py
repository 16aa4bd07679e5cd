"""GPU tier: flash attention at real sizes against ``scaled_dot_product_attention`` in f32 on the device."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import wavec as wc
from wavec.kernels.attention import WGMMA_CONFIGS, attention, register_attention_op

pytestmark = pytest.mark.gpu
TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}
TOL = {"f16": 3e-3, "bf16": 2e-2}


def _reference(q, k, v, causal, layout, scale=None):
    if layout == "bshd":
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
    g = q.shape[1] // k.shape[1]
    out = F.scaled_dot_product_attention(
        q.float(),
        k.float().repeat_interleave(g, 1),
        v.float().repeat_interleave(g, 1),
        is_causal=bool(causal),  # True or "top_left": torch's alignment
        scale=scale,
    )
    return out if layout == "bhsd" else out.transpose(1, 2)


def _inputs(b, h, kvh, sq, skv, d, dtype, layout):
    def make(heads, s):
        shape = (b, heads, s, d) if layout == "bhsd" else (b, s, heads, d)
        return torch.randn(shape, device="cuda", dtype=TORCH[dtype])

    return make(h, sq), make(kvh, skv), make(kvh, skv)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("b,h,kvh,sq,skv", [(2, 16, 16, 1024, 1024), (1, 32, 8, 2048, 2048), (3, 8, 2, 777, 1333)])
def test_attention(dtype, layout, causal, d, b, h, kvh, sq, skv) -> None:
    q, k, v = _inputs(b, h, kvh, sq, skv, d, dtype, layout)
    causal = "top_left" if causal and sq != skv else causal  # SDPA's is_causal; True needs sq == skv
    out = attention(q, k, v, causal=causal, layout=layout, mma="mma_sync")  # wgmma: test_attention_wgmma
    torch.cuda.synchronize()
    ref = _reference(q, k, v, causal, layout)
    assert not out.isnan().any()
    torch.testing.assert_close(out.float(), ref, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("sq,skv", [(1, 4096), (64, 8192), (4096, 1)])
def test_attention_odd_lengths(sq, skv) -> None:
    q, k, v = _inputs(1, 8, 8, sq, skv, 128, "f16", "bhsd")
    out = attention(q, k, v, scale=0.07, mma="mma_sync")
    torch.cuda.synchronize()
    torch.testing.assert_close(out.float(), _reference(q, k, v, False, "bhsd", 0.07), rtol=3e-3, atol=3e-3)


def test_attention_torch_op_and_cuda_graph() -> None:
    op = register_attention_op(wc.f16, "bhsd", causal="top_left", head_dim=128, name="wavec_gpu::attn_causal")
    q, k, v = _inputs(2, 8, 8, 512, 512, 128, "f16", "bhsd")
    scale = 1.0 / math.sqrt(128)
    out = op(q, k, v, scale)
    ref = _reference(q, k, v, True, "bhsd")
    torch.testing.assert_close(out.float(), ref, rtol=3e-3, atol=3e-3)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out2 = op(q, k, v, scale)
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out2, out)


def test_default_mma_is_wgmma_on_sm90() -> None:
    from wavec.kernels.attention import default_mma

    q = torch.empty(1, device="cuda")
    assert default_mma(q) == ("wgmma" if torch.cuda.get_device_capability() == (9, 0) else "mma_sync")
    assert default_mma(q.cpu()) == "mma_sync" and default_mma(q, backend="emulator") == "mma_sync"


def test_noncontiguous_inputs_run_as_views() -> None:
    """Transposed views run the kernel's strided variant (no copy): the result equals the dense layout's."""
    q, k, v = _inputs(1, 4, 4, 256, 256, 64, "f16", "bhsd")
    out = attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), layout="bshd")
    torch.testing.assert_close(out.transpose(1, 2).float(), _reference(q, k, v, False, "bhsd"), rtol=3e-3, atol=3e-3)


# ----- Hopper wgmma (mma="wgmma", sm_90a) ------------------------------------------------------------------


def _needs_sm90() -> None:
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma needs an sm_90 GPU (H100/H200)")


@pytest.mark.parametrize("dtype,layout", [("f16", "bhsd"), ("bf16", "bshd")])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("b,h,kvh,sq,skv", [(1, 32, 8, 2048, 2048), (3, 8, 2, 777, 1333)])
def test_attention_wgmma(dtype, layout, causal, d, b, h, kvh, sq, skv) -> None:
    _needs_sm90()
    q, k, v = _inputs(b, h, kvh, sq, skv, d, dtype, layout)
    causal = "top_left" if causal and sq != skv else causal  # SDPA's is_causal; True needs sq == skv
    out = attention(q, k, v, causal=causal, layout=layout, mma="wgmma")
    torch.cuda.synchronize()
    assert not out.isnan().any()
    torch.testing.assert_close(out.float(), _reference(q, k, v, causal, layout), rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("config", WGMMA_CONFIGS[128][1:], ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("b,h,kvh,sq,skv", [(2, 16, 16, 1024, 1024), (1, 4, 2, 333, 1000)])
def test_attention_wgmma_other_tiles(config, b, h, kvh, sq, skv) -> None:
    _needs_sm90()
    q, k, v = _inputs(b, h, kvh, sq, skv, 128, "f16", "bhsd")
    out = attention(q, k, v, mma="wgmma", config=config)
    torch.cuda.synchronize()
    torch.testing.assert_close(out.float(), _reference(q, k, v, False, "bhsd"), rtol=3e-3, atol=3e-3)


@pytest.mark.parametrize("sq,skv", [(1, 4096), (64, 8192), (4096, 1), (100, 150)])
def test_attention_wgmma_odd_lengths(sq, skv) -> None:
    """Decode (one query: the one-warpgroup tile), a single key, and a small case (compute-sanitizer's)."""
    _needs_sm90()
    q, k, v = _inputs(1, 8, 8, sq, skv, 128, "f16", "bhsd")
    out = attention(q, k, v, scale=0.07, mma="wgmma")
    torch.cuda.synchronize()
    torch.testing.assert_close(out.float(), _reference(q, k, v, False, "bhsd", 0.07), rtol=3e-3, atol=3e-3)
