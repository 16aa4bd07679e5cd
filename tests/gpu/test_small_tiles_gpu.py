"""GPU tier, issue #20 item 2 (tiles part): wave tiles smaller than the mma.sync instruction tile (padded)
on a CUDA device against torch in float64 — the library GEMM with 8-row, 4-column and K = 8 tiles, a
bias, row-sum and row-max epilogue on 8-row and 4-column tiles, attention with head dim 8 and 8-row
tiles.  Outputs poisoned with NaN must be written in full."""

import math

import pytest
import torch
import torch.nn.functional as F

import wavec as wc
from tests.small_tiles import CONFIGS, epilogue_gemm, gemm_for
from wavec.kernels.attention import BLOCK_M, BLOCK_N, NUM_STAGES, D, make_attention

pytestmark = pytest.mark.gpu
SIZES = [(33, 13, 40), (8, 4, 8), (17, 9, 29), (1000, 300, 520), (4097, 7, 24)]
TORCH = {wc.f16: torch.float16, wc.bf16: torch.bfloat16}


def _check(out, ref, tol: float, what: str) -> None:
    assert not out.float().isnan().any(), f"{what}: outputs never written"
    err = ((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()
    assert err < tol, f"{what}: relative error {err:.3e}"


NV = [c for c in CONFIGS if c[1] == "sm_80"]


@pytest.mark.parametrize("dtype,bm,bn,bk,stages", [c[2:] for c in NV], ids=[c[0] for c in NV])
def test_gemm_small_wave_tiles(dtype, bm: int, bn: int, bk: int, stages: int) -> None:
    kernel, subs = gemm_for("sm_80", dtype, bm, bn, bk, stages)
    compiled = wc.compile(kernel, subs, backend="cuda")
    for m, n, k in SIZES:
        a = torch.randn(m, k, device="cuda", dtype=TORCH[dtype])
        b = torch.randn(n, k, device="cuda", dtype=TORCH[dtype])
        c = torch.full((m, n), float("nan"), device="cuda")
        compiled(a, b, c)
        torch.cuda.synchronize()
        _check(c, a.double() @ b.double().T, 1e-5, f"tile {bm}x{bn}x{bk} {dtype.name} {m}x{n}x{k}")


@pytest.mark.parametrize("wave_m,wave_n", [(8, 8), (16, 4), (8, 4)], ids=["m8", "n4", "m8n4"])
def test_epilogue_on_padded_tiles(wave_m: int, wave_n: int) -> None:
    compiled = wc.compile(epilogue_gemm(wave_m, wave_n), {}, backend="cuda")
    m, n, k = 1001, wave_n, 72
    a, b = (torch.randn(r, k, device="cuda", dtype=torch.float16) for r in (m, n))
    bias = torch.randn(n, device="cuda")
    c, s, mx = (torch.full(shape, float("nan"), device="cuda") for shape in ((m, n), (m,), (m,)))
    compiled(a, b, bias, c, s, mx)
    torch.cuda.synchronize()
    ref = a.double() @ b.double().T + bias.double()
    _check(c, ref, 1e-5, f"epilogue {wave_m}x{wave_n}")
    _check(s, ref.sum(1), 1e-5, f"row sums {wave_m}x{wave_n}")
    _check(mx, ref.max(1).values, 1e-5, f"row maxima {wave_m}x{wave_n}")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype,bm", [(wc.f16, 32), (wc.bf16, 16), (wc.f16, 16)], ids=lambda x: getattr(x, "name", x))
def test_attention_head_dim_8(dtype, bm: int, causal: bool) -> None:
    """Head dim 8 (Q @ K.T on k16 instructions, K padded); BLOCK_M = 16 on 2 waves: 8-row wave tiles."""
    kernel = make_attention(dtype, "bhsd", causal, 2)
    compiled = wc.compile(kernel, {BLOCK_M: bm, BLOCK_N: 32, NUM_STAGES: 2, D: 8}, backend="cuda")
    tol = 2e-3 if dtype == wc.f16 else 1.6e-2
    for b, h, sq, skv in [(1, 2, 37, 37), (2, 4, 513, 513), (1, 3, 1, 1)]:
        q, k, v = (torch.randn(b, h, s, 8, device="cuda", dtype=TORCH[dtype]) for s in (sq, skv, skv))
        out = torch.full_like(q, float("nan"))
        compiled(q, k, v, out, 1.0 / math.sqrt(8))
        torch.cuda.synchronize()
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
        assert not out.isnan().any(), f"{b}x{h}x{sq}: outputs never written"
        torch.testing.assert_close(out.float(), ref, rtol=tol, atol=tol)
