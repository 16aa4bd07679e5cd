"""Intra-warpgroup overlap (``intra_wg_overlap=True``: the next key tile's Q Kᵀ issued before this tile's
softmax, ``passes/hopper/intra_warpgroup_overlap.py``) on the emulator, race checker and mbarrier checks on.

Every case runs the rotated kernel into a NaN-prefilled output with a guard band, compares it with SDPA /
the masked reference in f32, and with the unrotated kernel of the same tile and stages bit for bit (the
rotation moves instructions, it must not change one value).  Loops that run no iteration (keys fewer than
a tile, keys a multiple of the tile), one iteration, and many; every mask mode's loops (full tiles, the
ragged edge, the causal diagonal, a window's two edges); GQA; f16 and bf16; d64 and d128; one and two
warpgroups; soft-cap and ALiBi.
"""

from __future__ import annotations

import pytest
import torch
from test_attention_masks import _align, _inputs, run_checked

import wavec as wc
from tests.attention_ref import reference, visible
from wavec.errors import ConstraintError, OptionError
from wavec.kernels.attention import BLOCK_M, BLOCK_N, NUM_STAGES, D, attention, make_attention

CASES = [  # causal, window, softcap, layout, dtype, (B, H, KVH, Sq, Skv, D), (BLOCK_M, BLOCK_N, warpgroups)
    (False, (-1, -1), 0.0, "bhsd", wc.f16, (1, 2, 2, 40, 200, 64), (64, 32, 1)),  # 6 full tiles + a ragged one
    (False, (-1, -1), 0.0, "bhsd", wc.f16, (1, 2, 1, 40, 20, 64), (64, 32, 1)),  # the full loop runs no iteration
    (False, (-1, -1), 0.0, "bshd", wc.bf16, (1, 2, 1, 33, 128, 64), (64, 32, 1)),  # the edge loop runs none
    (True, (-1, -1), 0.0, "bshd", wc.bf16, (1, 4, 2, 70, 70, 64), (128, 64, 2)),  # GQA, two warpgroups
    (True, (-1, -1), 0.0, "bhsd", wc.f16, (2, 2, 1, 130, 130, 128), (128, 64, 2)),  # d128: two boxes per tile
    ("bottom_right", (-1, -1), 0.0, "bshd", wc.bf16, (1, 2, 2, 72, 40, 64), (64, 32, 1)),  # rows that see nothing
    ("bottom_right", (9, -1), 0.0, "bhsd", wc.f16, (1, 4, 2, 37, 90, 64), (64, 32, 1)),  # three loops
    (False, (5, 3), 0.0, "bhsd", wc.f16, (1, 2, 1, 50, 130, 64), (64, 32, 1)),  # a window around the diagonal
    ("bottom_right", (9, -1), 0.5, "bshd", wc.bf16, (1, 2, 2, 37, 90, 64), (64, 32, 1)),  # soft-cap
]


def _id(c) -> str:
    return f"{c[0]}-w{c[1][0]}_{c[1][1]}-cap{c[2]:g}-{c[3]}-{c[4].name}-{'x'.join(map(str, c[5]))}-{c[6][2]}wg"


def _compile(dtype, layout, causal, window, softcap, d, cfg, overlap: bool, stages: int = 3, copy: str = "auto"):
    bm, bn, groups = cfg
    kernel = make_attention(
        dtype,
        layout,
        causal,
        groups,
        "wgmma",
        async_copy=copy,
        window=window,
        softcap=softcap,
        intra_wg_overlap=overlap,
    )
    subs = {BLOCK_M: bm, BLOCK_N: bn, NUM_STAGES: stages, D: d}
    return wc.compile(kernel, subs, backend="emulator", target="sm_90a", cache=False)


@pytest.mark.parametrize("causal,window,softcap,layout,dtype,shape,cfg", CASES, ids=[_id(c) for c in CASES])
def test_overlap_matches_reference_and_the_unrotated_kernel(causal, window, softcap, layout, dtype, shape, cfg) -> None:
    b, h, kvh, sq, skv, d = shape
    q, k, v = _inputs(b, h, kvh, sq, skv, d, d, dtype)
    ref = reference(q, k, v, visible(sq, skv, _align(causal), *window), 0.2, softcap)
    rotated = _compile(dtype, layout, causal, window, softcap, d, cfg, overlap=True)
    out = run_checked(rotated, layout, q, k, v, 0.2, ref)
    unrotated = _compile(dtype, layout, causal, window, softcap, d, cfg, overlap=False)
    plain = run_checked(unrotated, layout, q, k, v, 0.2, ref)
    assert torch.equal(out, plain), (out.float() - plain.float()).abs().max()


def test_overlap_through_attention_with_alibi() -> None:
    """``attention(..., intra_wg_overlap=True)``: 3 stages by default, ALiBi slopes, grouped heads."""
    q, k, v = _inputs(1, 4, 2, 45, 77, 64, 64, wc.f16)
    slopes = torch.tensor([0.9, 0.5, 0.25, 0.1])
    kw = dict(causal="bottom_right", backend="emulator", mma="wgmma", config=(64, 32, 1), alibi_slopes=slopes)
    out = attention(q, k, v, intra_wg_overlap=True, **kw)
    assert torch.equal(out, attention(q, k, v, **{**kw, "config": (64, 32, 1, 3)}))
    i, j = torch.arange(45)[:, None] + 77 - 45, torch.arange(77)[None, :]
    bias = -slopes[:, None, None] * (i - j).abs()
    s = (q.float() @ k.float().repeat_interleave(2, 1).transpose(-1, -2)) * 64**-0.5 + bias
    ref = torch.softmax(s.masked_fill(j > i, float("-inf")), -1) @ v.float().repeat_interleave(2, 1)
    torch.testing.assert_close(out.float(), ref, rtol=2e-3, atol=2e-3)


def test_overlap_needs_three_stages_tma_and_wgmma() -> None:
    with pytest.raises(ConstraintError, match="num_stages >= 3"):
        _compile(wc.f16, "bhsd", False, (-1, -1), 0.0, 64, (64, 32, 1), overlap=True, stages=2)
    with pytest.raises(ConstraintError, match="TMA"):
        _compile(wc.f16, "bhsd", False, (-1, -1), 0.0, 64, (64, 32, 1), overlap=True, copy="cp.async")
    q, k, v = _inputs(1, 1, 1, 16, 16, 64, 64, wc.f16)
    with pytest.raises(OptionError, match="intra_wg_overlap"):
        attention(q, k, v, backend="emulator", mma="mma_sync", intra_wg_overlap=True)
    with pytest.raises(ConstraintError, match="warpgroup MMA"):
        wc.compile(
            make_attention(wc.f16, "bhsd", False, 2, "mma_sync", intra_wg_overlap=True),
            {BLOCK_M: 32, BLOCK_N: 32, NUM_STAGES: 3, D: 64},
            backend="emulator",
            cache=False,
        )
