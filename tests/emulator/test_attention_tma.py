"""Flash attention with K and V staged by TMA (``async_copy="tma"``, wgmma, sm_90a) on the emulator (race
checker and mbarrier checks on) against ``scaled_dot_product_attention`` in f32.

Rank-4 tensor maps with batch coordinates from the workgroup ids and grouped-query heads from the read's
``mapping``; KV lengths that are not multiples of BLOCK_N (the box's out-of-bounds rows are zero-filled);
both memory layouts, causal and not, f16 and bf16, head dims 64 and 128 (two 64-element boxes per tile).
Outputs start as NaN: every element must be written.
"""

from __future__ import annotations

import pytest
from test_attention import _inputs, _reference, check_attention, compile_wgmma

import wavec as wc

CASES = [  # layout, dtype, causal, (B, H, KVH, Sq, Skv, D), (BLOCK_M, BLOCK_N, warpgroups)
    ("bhsd", wc.f16, False, (1, 2, 2, 40, 72, 64), (64, 32, 1)),
    ("bshd", wc.bf16, True, (1, 4, 2, 70, 70, 64), (128, 64, 2)),  # GQA, two warpgroups
    ("bhsd", wc.f16, True, (2, 4, 2, 130, 130, 128), (128, 128, 2)),  # d128 default tile: 2 boxes per tile
]


def _compile(dtype, layout, causal, d, cfg, async_copy="tma"):
    return compile_wgmma(dtype, layout, causal, d, cfg, async_copy)


@pytest.mark.parametrize(
    "layout,dtype,causal,shape,cfg",
    CASES,
    ids=[
        f"{c[0]}-{c[1].name}-{'causal' if c[2] else 'full'}-{'x'.join(map(str, c[3]))}-{'x'.join(map(str, c[4]))}"
        for c in CASES
    ],
)
def test_tma_attention_matches_sdpa(layout, dtype, causal, shape, cfg) -> None:
    b, h, kvh, sq, skv, d = shape
    q, k, v = _inputs(b, h, kvh, sq, skv, d, dtype)
    ref = _reference(q, k, v, causal)
    kernel = _compile(dtype, layout, causal, d, cfg)
    mlir = kernel.artifact.mlir
    assert "nvvm.cp.async.bulk.tensor.shared.cluster.global" in mlir and "nvvm.cp.async.shared.global" not in mlir
    specs = kernel.metadata.tensor_maps
    assert [s.arg for s in specs] == [1, 2] and all(len(s.box) == 4 for s in specs)
    assert specs[0].box == ((64, cfg[1], 1, 1) if layout == "bhsd" else (64, 1, cfg[1], 1))
    check_attention(kernel, layout, dtype, q, k, v, ref)
