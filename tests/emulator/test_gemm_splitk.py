"""Split-K GEMM for decode shapes (``wavec.kernels.gemm``: ``make_gemm_splitk``, ``make_splitk_reduce``,
``matmul``'s split path) on the CPU emulator against torch in float64.

Every partial ``c_part[s]`` is checked against its own K slice ``[s*KS, min(K, (s+1)*KS))`` (KS =
``split_slice``), not only their sum, so a slice bound off by one K step cannot hide in the total.  Shapes:
M in {1, 3, 16}; N = 72 / 136 (not multiples of BLOCK_N = 64); K = 200 with S = 3 (ragged last slice:
96 + 96 + 8), K = 40 with S = 4 (K < S*BLOCK_K: slices 2 and 3 are empty and must write zeros), and 296
with S = 8 (one K step per slice, fewer than the pipeline's 4 stages; 3 empty slices).  Outputs are
NaN-poisoned and must be written in full; inputs are fresh random numbers (seed in every failure message).
"""

from __future__ import annotations

import pytest
import torch
from test_kernels_emulated import GEMM_TOL, check, generator, poisoned, randn

import wavec as wc
from wavec.kernels import gemm as gm
from wavec.tuning.plan import splitk_config

NV_MMA = {wc.f16: wc.MMAType.NV_F32_16x8x16_F16, wc.bf16: wc.MMAType.NV_F32_16x8x16_BF16}
TORCH_DTYPE = {wc.f16: torch.float16, wc.bf16: torch.bfloat16, wc.f32: torch.float32}
# the decode tile (16x64, 1x2 waves, 4 cp.async stages) with BLOCK_K 32 so that short K has many steps
SUBS = {gm.BLOCK_M: 16, gm.BLOCK_N: 64, gm.BLOCK_K: 32, gm.NUM_STAGES: 4, gm.GROUP_M: 1}
# (M, N, K, S)
SHAPES = [(1, 136, 200, 3), (3, 72, 40, 4), (16, 136, 296, 8)]


@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16], ids=lambda d: d.name)
def test_splitk_partials(dtype) -> None:
    kernel = wc.compile(
        gm.make_gemm_splitk(dtype, mma_type=NV_MMA[dtype], waves=(1, 2)), SUBS, backend="emulator", target="sm_90"
    )
    assert kernel.metadata.block[0] == 64
    g, seed = generator()
    for m, n, k, s in SHAPES:
        a, b = randn(g, m, k, dtype=TORCH_DTYPE[dtype]), randn(g, n, k, dtype=TORCH_DTYPE[dtype])
        c_part = poisoned(s, m, n)
        kernel(a, b, c_part)
        ks = gm.split_slice(k, s, SUBS[gm.BLOCK_K])
        what = f"gemm_splitk {dtype.name} M={m} N={n} K={k} S={s} (seed {seed})"
        for i in range(s):
            lo, hi = min(k, i * ks), min(k, (i + 1) * ks)
            if lo == hi:  # empty slice: zeros, not left unwritten
                assert torch.equal(c_part[i], torch.zeros(m, n)), f"{what}: empty slice {i} is not zero"
            else:
                ref = a[:, lo:hi].double() @ b[:, lo:hi].double().T
                check(c_part[i], ref, GEMM_TOL, f"{what} slice {i} [{lo}, {hi})")
        check(c_part.sum(0), a.double() @ b.double().T, GEMM_TOL, f"{what} sum")


@pytest.mark.parametrize("out", [wc.f32, wc.f16, wc.bf16], ids=lambda d: d.name)
def test_splitk_reduce(out) -> None:
    """C = sum of the S partials over P = M*N (P not a multiple of BLOCK_P = 512), rounded once."""
    g, seed = generator()
    for s, p, vec in [(3, 1000, 4), (8, 136, 4), (2, 1030, 2)]:
        kernel = wc.compile(
            gm.make_splitk_reduce(out, vec=vec), {gm.S: s, gm.BLOCK_P: 4 * 32 * vec}, backend="emulator", target="sm_90"
        )
        part = randn(g, s, p)
        c = poisoned(p, dtype=TORCH_DTYPE[out])
        kernel(part, c)
        tol = {wc.f32: 1e-6, wc.f16: 2e-3, wc.bf16: 1e-2}[out]  # f32 sums, rounded once to the output dtype
        check(c, part.double().sum(0), tol, f"splitk_reduce {out.name} S={s} P={p} (seed {seed})")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_matmul_splitk(dtype) -> None:
    """``matmul`` on decode shapes: the split rule's choice (1 x 136 x 1024: S = 2 with BLOCK_K 128) and a
    forced S = 3 with a ragged last slice, in f32 and in the input dtype."""
    g, seed = generator()
    assert splitk_config(1, 136, 1024)[2] == 2
    for m, n, k, split, out_dtype in [(1, 136, 1024, "auto", torch.float32), (3, 72, 1096, 3, dtype)]:
        a, b = randn(g, m, k, dtype=dtype), randn(g, n, k, dtype=dtype)
        c = gm.matmul(a, b, backend="emulator", split=split, out_dtype=out_dtype)
        assert c.dtype == (out_dtype or torch.float32)
        ref = a.double() @ b.double().T
        tol = GEMM_TOL if out_dtype == torch.float32 else (2e-3 if dtype == torch.float16 else 1e-2)
        check(c, ref, tol, f"matmul split={split} {dtype} M={m} N={n} K={k} (seed {seed})")
