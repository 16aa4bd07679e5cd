"""Emulator tier for ``SchedulingConstraint(split_epilogue=True)``: a masked store of several runs per
thread (the GEMM's C write) tests once whether the thread's furthest run is in bounds, then stores every
run unguarded; the per-run guards stay on the other branch.  Numerics against torch in float64 on fresh
random inputs with NaN-prefilled outputs (every element written, nothing outside C touched by the
emulator's bounds checks), on full tiles (the unguarded branch), on masked M, N and K edges (both branches
in one launch), for the wgmma kernels of ``wgmma_plan`` (warp-specialized, persistent) and mma.sync."""

from __future__ import annotations

import pytest
import torch
from test_kernels_emulated import TORCH_DTYPE, check, generator, randn

import wavec as wc
from wavec.errors import ConstraintError
from wavec.kernels import gemm as gm
from wavec.tuning.plan import schedule

WGMMA = {wc.f16: wc.MMAType.NV_WGMMA_F32_64xNx16_F16, wc.bf16: wc.MMAType.NV_WGMMA_F32_64xNx16_BF16}
SYNC = {wc.f16: wc.MMAType.NV_F32_16x8x16_F16, wc.bf16: wc.MMAType.NV_F32_16x8x16_BF16}
OUT_TOL = {wc.f16: 1e-3, wc.bf16: 8e-3}  # C rounded once from the f32 accumulator: the dtype's half ulp


def _subs(bm: int, bn: int, stages: int) -> dict:
    return {gm.BLOCK_M: bm, gm.BLOCK_N: bn, gm.BLOCK_K: 64, gm.NUM_STAGES: stages, gm.GROUP_M: 2}


# (id, wgmma?, subs, waves, make_gemm flags, shapes): a full-tile shape first, then masked ones
CONFIGS = [
    ("wgmma-64x64-ws", True, _subs(64, 64, 3), (1, 1), {"warp_specialize": True}, [(64, 128, 128), (100, 72, 200)]),
    (
        "wgmma-128x64-persistent",
        True,
        _subs(128, 64, 3),
        (2, 1),
        {"persistent": True},
        [(256, 128, 128), (130, 136, 40)],
    ),
    ("mma_sync-64x64", False, _subs(64, 64, 2), (2, 2), {}, [(128, 64, 96), (100, 72, 96)]),
]


def _kernel(dtype, wgmma: bool, subs, waves, split: bool, **flags):
    mma, target = (WGMMA[dtype], "sm_90a") if wgmma else (SYNC[dtype], "sm_90")
    return wc.compile(
        gm.make_gemm(
            dtype,
            32,
            mma,
            waves,
            out_dtype=dtype,
            sched=schedule(prefetch_fragments=True, split_epilogue=split, **flags),
        ),
        subs,
        backend="emulator",
        target=target,
        cache=False,
    )


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c[0] for c in CONFIGS])
@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16], ids=lambda d: d.name)
def test_split_epilogue_matches_torch(dtype, cfg) -> None:
    name, wgmma, subs, waves, flags, shapes = cfg
    split, plain = _kernel(dtype, wgmma, subs, waves, True, **flags), _kernel(dtype, wgmma, subs, waves, False, **flags)
    # the C write is emitted twice (unguarded and guarded branches): more stores than without the split
    assert split.mlir.count("vector.store") > plain.mlir.count("vector.store")
    g, seed = generator()
    tdt = TORCH_DTYPE[dtype]
    for m, n, k in shapes:
        a, b = randn(g, m, k, dtype=tdt), randn(g, n, k, dtype=tdt)
        buf = torch.full((m * n + 256,), float("nan"), dtype=tdt)  # C, then a guard band nothing may write
        c = buf[: m * n].view(m, n)
        split(a, b, c)
        assert buf[m * n :].isnan().all(), f"{name}: wrote past the end of C at M={m} N={n} K={k}"
        check(c, a.double() @ b.double().T, OUT_TOL[dtype], f"split epilogue {name} M={m} N={n} K={k} (seed {seed})")


def test_split_epilogue_is_a_bool() -> None:
    with pytest.raises(ConstraintError, match="split_epilogue"):
        wc.SchedulingConstraint(split_epilogue="yes")


# (layout, dtype, causal, (B, H, KVH, Sq, Skv, D), (BLOCK_M, BLOCK_N, waves), mma): Sq not a multiple of
# BLOCK_M, so full and ragged query tiles in one launch
ATTENTION = [
    ("bhsd", wc.f16, False, (1, 2, 2, 100, 72, 64), (64, 32, 1), "wgmma"),
    ("bshd", wc.bf16, True, (1, 2, 1, 130, 130, 128), (128, 64, 2), "wgmma"),
    ("bhsd", wc.f16, True, (1, 2, 1, 70, 70, 64), (32, 32, 2), "mma_sync"),
]


@pytest.mark.parametrize(
    "layout,dtype,causal,shape,cfg,mma",
    ATTENTION,
    ids=[f"{c[5]}-{c[0]}-{c[1].name}-{'causal' if c[2] else 'full'}" for c in ATTENTION],
)
def test_split_epilogue_attention(layout, dtype, causal, shape, cfg, mma) -> None:
    """The attention kernel's O store with ``split_epilogue``: every element written, within the dtype's
    tolerance of SDPA in f32, no write past O (a guard band after it)."""
    from test_attention import _inputs, _reference, check_attention

    from wavec.kernels.attention import BLOCK_M, BLOCK_N, NUM_STAGES, D, make_attention

    b, h, kvh, sq, skv, d = shape
    bm, bn, waves = cfg
    kernel = wc.compile(
        make_attention(dtype, layout, causal, waves, mma=mma, split_epilogue=True),
        {BLOCK_M: bm, BLOCK_N: bn, NUM_STAGES: 2, D: d},
        backend="emulator",
        target="sm_90a" if mma == "wgmma" else "sm_90",
        cache=False,
    )
    q, k, v = _inputs(b, h, kvh, sq, skv, d, dtype)
    check_attention(kernel, layout, dtype, q, k, v, _reference(q, k, v, causal))  # with a guard band after O
