"""Flash attention on the emulator (race checker on) against ``scaled_dot_product_attention`` in f32.

Small shapes whose sequence lengths are not multiples of the tiles, both memory layouts, causal and not,
grouped-query heads, f16 and bf16, head dims 64 and 128.  Outputs start as NaN: every element must be
written.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import wavec as wc
from wavec.kernels.attention import BLOCK_M, BLOCK_N, NUM_STAGES, D, attention, make_attention

TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}
TOL = {"f16": 2e-3, "bf16": 1.6e-2}
_COMPILED: dict = {}


def _inputs(b, h, kvh, sq, skv, d, dtype):
    q = torch.randn(b, h, sq, d).to(TORCH[dtype.name])
    k = torch.randn(b, kvh, skv, d).to(TORCH[dtype.name])
    v = torch.randn(b, kvh, skv, d).to(TORCH[dtype.name])
    return q, k, v


def _reference(q, k, v, causal, scale=None):
    g = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(
        q.float(), k.float().repeat_interleave(g, 1), v.float().repeat_interleave(g, 1), is_causal=causal, scale=scale
    )


def _to_layout(x, layout):
    return x if layout == "bhsd" else x.transpose(1, 2).contiguous()


def check_attention(kernel, layout, dtype, q, k, v, ref) -> None:
    """Run ``kernel`` on q, k, v (given as BHSD) in ``layout`` with a NaN-prefilled output followed by a
    NaN guard band, check nothing was written past the output, every element was written and the result
    matches ``ref`` within the dtype's tolerance."""
    qo, ko, vo = (_to_layout(x, layout) for x in (q, k, v))
    buf = torch.full((qo.numel() + 256,), float("nan"), dtype=qo.dtype)
    out = buf[: qo.numel()].view(qo.shape)
    kernel(qo, ko, vo, out, 1.0 / math.sqrt(q.shape[-1]))
    assert buf[qo.numel() :].isnan().all(), "wrote past the end of the output"
    out = out if layout == "bhsd" else out.transpose(1, 2)
    assert not out.isnan().any(), "some output elements were not written"
    torch.testing.assert_close(out.float(), ref, rtol=TOL[dtype.name], atol=TOL[dtype.name])


def _kernel(dtype, layout, causal, d, bm=32, bn=32, waves=2):
    key = (dtype.name, layout, causal, d, bm, bn, waves)
    if key not in _COMPILED:
        subs = {BLOCK_M: bm, BLOCK_N: bn, NUM_STAGES: 2, D: d}
        _COMPILED[key] = wc.compile(make_attention(dtype, layout, causal, waves), subs, backend="emulator", cache=False)
    return _COMPILED[key]


CASES = [  # layout, dtype, causal, (B, H, KVH, Sq, Skv, D)
    ("bhsd", wc.f16, False, (1, 2, 2, 40, 72, 64)),
    ("bhsd", wc.f16, True, (1, 2, 2, 70, 70, 64)),
    ("bshd", wc.bf16, False, (2, 4, 2, 33, 130, 64)),
    ("bshd", wc.f16, True, (1, 4, 1, 50, 50, 64)),
    ("bhsd", wc.bf16, True, (1, 2, 1, 40, 72, 64)),  # Sq != Skv: the causal mask is aligned top-left
    ("bshd", wc.f16, False, (1, 2, 2, 17, 45, 128)),
]


@pytest.mark.parametrize(
    "layout,dtype,causal,shape",
    CASES,
    ids=[f"{c[0]}-{c[1].name}-{'causal' if c[2] else 'full'}-{'x'.join(map(str, c[3]))}" for c in CASES],
)
def test_attention_matches_sdpa(layout, dtype, causal, shape) -> None:
    b, h, kvh, sq, skv, d = shape
    q, k, v = _inputs(b, h, kvh, sq, skv, d, dtype)
    ref = _reference(q, k, v, causal)
    check_attention(_kernel(dtype, layout, causal, d), layout, dtype, q, k, v, ref)


def test_kv_length_a_multiple_of_the_tile() -> None:
    """The masked loop over the ragged last tile then runs no iteration."""
    q, k, v = _inputs(1, 2, 2, 40, 64, 64, wc.f16)
    out = torch.full_like(q, float("nan"))
    _kernel(wc.f16, "bhsd", False, 64)(q, k, v, out, 0.3)
    torch.testing.assert_close(out.float(), _reference(q, k, v, False, 0.3), rtol=2e-3, atol=2e-3)


def test_scale_is_a_launch_argument() -> None:
    """One compiled kernel, two scales: the scale is a scalar argument, not a compile-time constant."""
    kernel = _kernel(wc.f16, "bhsd", False, 64)
    q, k, v = _inputs(1, 1, 1, 20, 40, 64, wc.f16)
    for scale in (0.05, 0.25):
        out = torch.full_like(q, float("nan"))
        kernel(q, k, v, out, scale)
        torch.testing.assert_close(out.float(), _reference(q, k, v, False, scale), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("layout,causal", [("bhsd", False), ("bshd", True)])
def test_attention_api_with_default_config(layout, causal) -> None:
    """``attention()`` with its heuristic (BLOCK_M 64 for short queries, BLOCK_N 128 at head dim 64)."""
    q, k, v = _inputs(1, 2, 1, 24, 136, 64, wc.f16)
    ref = _reference(q, k, v, causal)
    align = "top_left" if causal else False  # 24 queries, 136 keys: True would be ambiguous
    out = attention(*(_to_layout(x, layout) for x in (q, k, v)), causal=align, layout=layout, backend="emulator")
    out = out if layout == "bhsd" else out.transpose(1, 2)
    torch.testing.assert_close(out.float(), ref, rtol=2e-3, atol=2e-3)


def test_attention_api_rejects_bad_inputs() -> None:
    q, k, v = _inputs(1, 3, 2, 8, 8, 64, wc.f16)
    with pytest.raises(wc.WavecError, match="not a multiple of 2 key/value heads"):
        attention(q, k, v, backend="emulator")
    with pytest.raises(wc.WavecError, match=r"q: head dim must be one of \(64, 80, 96, 128, 192, 256\), got 32"):
        attention(q[..., :32], k[..., :32], v[..., :32], backend="emulator")
    with pytest.raises(wc.WavecError, match="float16 or bfloat16"):
        attention(q.float(), k.float(), v.float(), backend="emulator")


def test_torch_op_on_cpu() -> None:
    """The registered operator runs the emulator for CPU tensors; the scale is a float argument."""
    from wavec.kernels.attention import register_attention_op

    op = register_attention_op(
        wc.f16, "bhsd", causal="top_left", head_dim=64, name="wavec_emu::attn_causal", backend="emulator"
    )
    q, k, v = _inputs(1, 2, 2, 30, 30, 64, wc.f16)
    out = op(q, k, v, 0.125)
    torch.testing.assert_close(out.float(), _reference(q, k, v, True, 0.125), rtol=2e-3, atol=2e-3)


def test_default_d64_tile_32_rows_per_wave() -> None:
    """The d64 default (BLOCK_M 128 over 4 waves: two m16 tiles per wave), causal, GQA, BSHD."""
    q, k, v = _inputs(1, 2, 1, 150, 150, 64, wc.bf16)
    ref = _reference(q, k, v, True)
    out = attention(
        *(_to_layout(x, "bshd") for x in (q, k, v)), causal=True, layout="bshd", backend="emulator", config=(128, 64, 4)
    )
    torch.testing.assert_close(out.transpose(1, 2).float(), ref, rtol=1.6e-2, atol=1.6e-2)


@pytest.mark.parametrize("causal", [False, True])
def test_default_d128_tile(causal) -> None:
    """The d128 default (BLOCK_M 128 over 8 waves, BLOCK_N 64), GQA, lengths not multiples of the tiles."""
    q, k, v = _inputs(1, 2, 1, 130, 200, 128, wc.f16)
    out = attention(q, k, v, causal="top_left" if causal else False, backend="emulator")
    torch.testing.assert_close(out.float(), _reference(q, k, v, causal), rtol=2e-3, atol=2e-3)


# ----- Hopper wgmma (mma="wgmma", sm_90a): the same body, warpgroups of 64 query rows -------------------------

WGMMA_CASES = [  # layout, dtype, causal, (B, H, KVH, Sq, Skv, D), (BLOCK_M, BLOCK_N, warpgroups)
    ("bhsd", wc.f16, False, (1, 2, 2, 70, 72, 64), (64, 32, 1)),
    ("bhsd", wc.bf16, True, (1, 2, 1, 100, 100, 64), (128, 64, 2)),  # GQA, two warpgroups
    ("bshd", wc.f16, True, (1, 2, 2, 40, 72, 64), (64, 64, 1)),  # Sq != Skv: top-left causal mask
    ("bshd", wc.bf16, False, (2, 2, 1, 33, 130, 128), (64, 64, 1)),
    ("bhsd", wc.f16, True, (1, 2, 1, 130, 130, 128), (128, 128, 2)),  # the d128 default tile
]


def compile_wgmma(dtype, layout, causal, d, cfg, async_copy="auto"):
    """The wgmma attention kernel on the emulator for ``cfg = (BLOCK_M, BLOCK_N, warpgroups)``, 2 stages."""
    bm, bn, groups = cfg
    return wc.compile(
        make_attention(dtype, layout, causal, groups, mma="wgmma", async_copy=async_copy),
        {BLOCK_M: bm, BLOCK_N: bn, NUM_STAGES: 2, D: d},
        backend="emulator",
        target="sm_90a",
        cache=False,
    )


@pytest.mark.parametrize(
    "layout,dtype,causal,shape,cfg",
    WGMMA_CASES,
    ids=[
        f"{c[0]}-{c[1].name}-{'causal' if c[2] else 'full'}-{'x'.join(map(str, c[3]))}-{'x'.join(map(str, c[4]))}"
        for c in WGMMA_CASES
    ],
)
@pytest.mark.parametrize("copy", ["auto", "cp.async"])
def test_wgmma_attention_matches_sdpa(layout, dtype, causal, shape, cfg, copy) -> None:
    """Both ways of staging K and V: "auto" (TMA on sm_90a) and the per-thread ``cp.async`` copies."""
    b, h, kvh, sq, skv, d = shape
    q, k, v = _inputs(b, h, kvh, sq, skv, d, dtype)
    ref = _reference(q, k, v, causal)
    kernel = compile_wgmma(dtype, layout, causal, d, cfg, copy)
    mlir = kernel.artifact.mlir
    assert ("cp.async.bulk.tensor" in mlir) == (copy == "auto")
    assert "nvgpu.mma.sync" not in mlir and "nvgpu.ldmatrix" not in mlir
    # QKᵀ with Q and P·V with P in registers: the register-A form (inline PTX) of wgmma, both
    assert "wgmma.mma_async.sync.aligned" in mlir and "nvvm.wgmma.mma_async" not in mlir
    check_attention(kernel, layout, dtype, q, k, v, ref)


def test_wgmma_attention_api() -> None:
    """``attention(mma="wgmma")`` with its heuristic (queries <= 64: one warpgroup) and the body unchanged."""
    from wavec.kernels.attention import attention_constraints

    q, k, v = _inputs(1, 2, 2, 24, 136, 64, wc.f16)
    out = attention(q, k, v, causal="top_left", backend="emulator", mma="wgmma")
    torch.testing.assert_close(out.float(), _reference(q, k, v, True), rtol=2e-3, atol=2e-3)
    sync, warpgroup = attention_constraints(wc.f16, 8), attention_constraints(wc.f16, 2, mma="wgmma")
    assert [type(c) for c in sync] == [type(c) for c in warpgroup]  # retargeted by the hardware constraint
    assert make_attention(mma="wgmma").fn.__code__.co_code == make_attention().fn.__code__.co_code


def test_wgmma_default_tiles_and_copies() -> None:
    """wgmma, d128: one-warpgroup 64x64 tiles (three workgroups per SM) except causal with >= 16384 queries
    (128x128 over two warpgroups); d64 128x64 over two.  ``attention()`` stages K and V by TMA ("auto" on
    sm_90a: ``pipeline_loops``) with the split epilogue (``SPLIT_EPILOGUE``) and matches SDPA on a ragged
    causal case, NaN-free; ``async_copy="cp.async"`` keeps the per-thread copies."""
    from wavec.kernels import attention as at

    def tile(sq, causal, d=128):
        subs, groups = at.attention_config(d, sq, mma="wgmma", causal=causal)
        return subs[BLOCK_M], subs[BLOCK_N], groups

    assert tile(200, True) == tile(200, False) == tile(8192, True) == tile(16384, False) == (64, 64, 1)
    assert tile(16384, True) == (128, 128, 2)
    assert tile(64, True) == (64, 128, 1)  # decode / one tile of queries: the short table first
    assert tile(512, True, d=64) == tile(20000, True, d=64) == (128, 64, 2)
    assert at.attention_config(128, 512, mma="mma_sync", causal=True) == at.attention_config(128, 512)
    q, k, v = _inputs(1, 2, 1, 200, 190, 128, wc.f16)
    at._COMPILED.clear()
    out = attention(q, k, v, causal="top_left", backend="emulator", mma="wgmma")
    assert not out.isnan().any()
    torch.testing.assert_close(out.float(), _reference(q, k, v, True), rtol=2e-3, atol=2e-3)
    (key,) = at._COMPILED
    assert ("BLOCK_M", 64) in key[3] and ("BLOCK_N", 64) in key[3] and key[4] == 1
    mlir = next(iter(at._COMPILED.values())).artifact.mlir
    plain = compile_wgmma(wc.f16, "bhsd", True, 128, (64, 64, 1), "cp.async").artifact.mlir  # guarded stores
    assert "cp.async.bulk.tensor" in mlir and "cp.async.bulk.tensor" not in plain
    assert mlir.count("vector.store") > plain.count("vector.store")  # the split epilogue's unguarded copies
    at._COMPILED.clear()
    q2, k2, v2 = _inputs(1, 2, 1, 200, 190, 128, wc.f16)
    out2 = attention(q2, k2, v2, causal="top_left", backend="emulator", mma="wgmma", async_copy="cp.async")
    assert "cp.async.bulk.tensor" not in next(iter(at._COMPILED.values())).artifact.mlir
    torch.testing.assert_close(out2.float(), _reference(q2, k2, v2, True), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("mma,cfg", [("mma_sync", (64, 32, 2)), ("wgmma", (64, 64, 1))])
def test_heavy_first_launch_order(mma, cfg) -> None:
    """``heavy_first`` (SchedulingConstraint.reverse_axis0): the query tiles launch last first; every tile
    is still computed once (NaN-filled output) and matches SDPA."""
    q, k, v = _inputs(1, 2, 1, 150, 150, 64, wc.f16)
    bm, bn, waves = cfg
    kernel = wc.compile(
        make_attention(wc.f16, "bhsd", True, waves, mma=mma, heavy_first=True),
        {BLOCK_M: bm, BLOCK_N: bn, NUM_STAGES: 2, D: 64},
        backend="emulator",
        target="sm_90a" if mma == "wgmma" else None,
        cache=False,
    )
    out = torch.full_like(q, float("nan"))
    kernel(q, k, v, out, 0.125)
    assert not out.isnan().any()
    torch.testing.assert_close(out.float(), _reference(q, k, v, True, 0.125), rtol=2e-3, atol=2e-3)
