"""GPU tier: warp-specialized flash attention (``attention(..., warp_specialize=True)``: a TMA producer
warpgroup, two consumer warpgroups, K/V stages released through empty mbarriers) matches SDPA at real and
odd sizes and equals the barrier-released TMA kernel of the same tile bit for bit (same arithmetic order);
``async_copy="tma-mbarrier"`` (the empty-mbarrier release without a producer) too; ``attention()`` runs the
same kernel.  Outputs start as NaN (every element must be written).  Skipped without an sm_90 GPU."""

from __future__ import annotations

import pytest
import torch
from test_attention_gpu import TOL, _inputs, _reference

import wavec as wc
from wavec.kernels import attention as at
from wavec.kernels.attention import attention, attention_config

pytestmark = pytest.mark.gpu

SHAPES = [(1, 32, 8, 2048, 2048), (3, 8, 2, 777, 1333), (2, 4, 4, 64, 100), (1, 16, 16, 4096, 4096)]


def _hopper() -> None:
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("warp-specialized wgmma attention needs an sm_90 GPU (H100/H200)")


def _run(q, k, v, causal, layout, config=None, async_copy="auto", warp_specialize: bool | str = False):
    """The kernel ``attention()`` would pick, launched on a NaN-filled output (every element must be written)."""
    s_ax = 2 if layout == "bhsd" else 1
    ws = bool(warp_specialize)
    subs, groups = attention_config(q.shape[-1], q.shape[s_ax], config, "wgmma", causal, None, False, ws)
    dtype = wc.f16 if q.dtype == torch.float16 else wc.bf16
    kernel = at._kernel(dtype, layout, causal, subs, groups, None, "wgmma", async_copy, warp_specialize=warp_specialize)
    out = torch.full_like(q, float("nan"))
    kernel(q, k, v, out, q.shape[-1] ** -0.5)
    return out


@pytest.mark.parametrize("dtype,layout", [("f16", "bhsd"), ("bf16", "bshd"), ("f16", "bshd")])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("b,h,kvh,sq,skv", SHAPES, ids=lambda x: str(x))
def test_ws_attention_matches_sdpa_and_the_barrier_kernel(dtype, layout, causal, d, b, h, kvh, sq, skv) -> None:
    _hopper()
    q, k, v = _inputs(b, h, kvh, sq, skv, d, dtype, layout)
    causal = "top_left" if causal and sq != skv else causal
    ws = _run(q, k, v, causal, layout, warp_specialize=True)
    base = _run(q, k, v, causal, layout, config=(128, 128, 2), async_copy="tma-barrier")
    torch.cuda.synchronize()
    assert not ws.isnan().any(), "unwritten output elements"
    assert torch.equal(ws, base)
    torch.testing.assert_close(ws.float(), _reference(q, k, v, causal, layout), rtol=TOL[dtype], atol=TOL[dtype])
    api = attention(q, k, v, causal=causal, layout=layout, mma="wgmma", warp_specialize=True)
    assert torch.equal(api, ws)


@pytest.mark.parametrize("config", [(128, 176, 2), (128, 112, 2)])
@pytest.mark.parametrize("causal", [False, True])
def test_ws_attention_wide_tiles(config, causal) -> None:
    _hopper()
    q, k, v = _inputs(2, 8, 2, 1500, 1500, 128, "bf16", "bhsd")
    ws = _run(q, k, v, causal, "bhsd", config=config, warp_specialize=True)
    base = _run(q, k, v, causal, "bhsd", config=config, async_copy="tma-barrier")
    torch.cuda.synchronize()
    assert torch.equal(ws, base)
    torch.testing.assert_close(ws.float(), _reference(q, k, v, causal, "bhsd"), rtol=TOL["bf16"], atol=TOL["bf16"])


@pytest.mark.parametrize("causal", [False, True])
def test_mbarrier_release_equals_the_barrier(causal) -> None:
    _hopper()
    q, k, v = _inputs(3, 8, 2, 777, 1333, 128, "f16", "bhsd")
    causal = "top_left" if causal else False
    mb = _run(q, k, v, causal, "bhsd", async_copy="tma-mbarrier")
    base = _run(q, k, v, causal, "bhsd", async_copy="tma-barrier")
    torch.cuda.synchronize()
    assert torch.equal(mb, base)


def test_ws_small_case_for_racecheck() -> None:
    """The case ``scripts/gpu-session``'s racecheck step runs (one launch of each loop shape).  Its reference
    runs on the CPU: under the sanitizer a GPU reference launches PyTorch's own attention kernels, whose
    hazards would fill the report (session 17's run)."""
    _hopper()
    q, k, v = _inputs(2, 4, 2, 300, 700, 128, "f16", "bhsd")
    ws = _run(q, k, v, "top_left", "bhsd", warp_specialize=True)
    full = _run(q, k, v, False, "bhsd", warp_specialize=True)
    pp = _run(q, k, v, "top_left", "bhsd", warp_specialize="pingpong")
    torch.cuda.synchronize()
    assert torch.equal(pp, ws)
    cpu = [x.cpu() for x in (q, k, v)]
    want_causal, want_full = _reference(*cpu, "top_left", "bhsd"), _reference(*cpu, False, "bhsd")
    torch.testing.assert_close(ws.cpu().float(), want_causal, rtol=TOL["f16"], atol=TOL["f16"])
    torch.testing.assert_close(full.cpu().float(), want_full, rtol=TOL["f16"], atol=TOL["f16"])


@pytest.mark.parametrize("dtype,layout", [("f16", "bhsd"), ("bf16", "bshd")])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("b,h,kvh,sq,skv", SHAPES[:3], ids=lambda x: str(x))
def test_pingpong_equals_the_ws_kernel(dtype, layout, causal, d, b, h, kvh, sq, skv) -> None:
    """The named barriers order issue only: the same bits as without them."""
    _hopper()
    q, k, v = _inputs(b, h, kvh, sq, skv, d, dtype, layout)
    causal = "top_left" if causal and sq != skv else causal
    pp = _run(q, k, v, causal, layout, warp_specialize="pingpong")
    ws = _run(q, k, v, causal, layout, warp_specialize=True)
    torch.cuda.synchronize()
    assert not pp.isnan().any() and torch.equal(pp, ws)
    torch.testing.assert_close(pp.float(), _reference(q, k, v, causal, layout), rtol=TOL[dtype], atol=TOL[dtype])
    assert torch.equal(attention(q, k, v, causal=causal, layout=layout, mma="wgmma", warp_specialize="pingpong"), pp)


@pytest.mark.parametrize(
    "sq, causal, ws", [(2048, False, True), (2048, True, False), (4096, True, True), (1024, False, False)]
)
def test_default_warp_specializes_where_measured(sq, causal, ws) -> None:
    """``attention(warp_specialize=None)`` runs the warp-specialized kernel exactly where
    ``attention_tiles.ws_default`` says (d128 from 2048 queries, causal from 4096), bit for bit."""
    _hopper()
    q, k, v = _inputs(1, 4, 2, sq, sq, 128, "bf16", "bhsd")
    out = attention(q, k, v, causal=causal)
    chosen = attention(q, k, v, causal=causal, mma="wgmma", warp_specialize=ws)
    other = attention(q, k, v, causal=causal, mma="wgmma", warp_specialize=not ws)
    torch.cuda.synchronize()
    assert torch.equal(out, chosen)
    assert not torch.equal(out, other), "the two kernels should differ in rounding somewhere"
    torch.testing.assert_close(out.float(), _reference(q, k, v, causal, "bhsd"), rtol=TOL["bf16"], atol=TOL["bf16"])
