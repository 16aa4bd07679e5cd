"""Emulator tier, issue #20 item 2 (tiles part): wave tiles smaller than an MMA instruction tile compile and
compute correctly, the instruction tile padded (``wavec/indexing/padding.py``): reads of padding re-read
the wave's tile, stores skip it, and the mma zeroes its operands' padding along K.

The library GEMM with wave tiles of 8 rows and 4 columns (mma.sync m16n8k16, MFMA 16x16x16) and with
BLOCK_K = 8 under an instruction K of 16, at ragged sizes; K tiles under the int8 and tf32 instructions'
K; a GEMM epilogue (broadcast bias, row sums) on padded rows; attention with head dim 8 (K padded in
Q @ K.T) and with 8-row wave tiles.  Inputs are fresh random numbers (seed in every message), outputs
poisoned with NaN and written in full (the emulator's race checker also sees two waves storing one
element), references from torch in float64.  Tiles that cannot
be padded keep a ``ConstraintError`` that says why."""

from __future__ import annotations

import pytest
import torch
from test_attention import _inputs, _reference, check_attention
from test_kernels_emulated import GEMM_TOL, TORCH_DTYPE, check, generator, poisoned, randn

import wavec as wc
from tests.small_tiles import CONFIGS, SIZES, epilogue_gemm, gemm_for, gemm_nn
from wavec.errors import ConstraintError
from wavec.kernels import gemm as gm
from wavec.kernels.attention import BLOCK_M, BLOCK_N, NUM_STAGES, D, make_attention


@pytest.mark.parametrize("target,dtype,bm,bn,bk,stages", [c[1:] for c in CONFIGS], ids=[c[0] for c in CONFIGS])
def test_gemm_small_wave_tiles(target: str, dtype, bm: int, bn: int, bk: int, stages: int) -> None:
    kernel, subs = gemm_for(target, dtype, bm, bn, bk, stages)
    compiled = wc.compile(kernel, subs, backend="emulator", target=target)
    g, seed = generator()
    tdt = TORCH_DTYPE[dtype]
    for m, n, k in SIZES:
        a, b = randn(g, m, k, dtype=tdt), randn(g, n, k, dtype=tdt)
        c = poisoned(m, n)
        compiled(a, b, c)
        what = f"{target} {dtype.name} tile {bm}x{bn}x{bk} stages {stages}, M={m} N={n} K={k} (seed {seed})"
        check(c, a.double() @ b.double().T, GEMM_TOL, what)


@pytest.mark.parametrize("wave_m,wave_n", [(8, 8), (16, 4), (8, 4)], ids=["m8", "n4", "m8n4"])
def test_epilogue_on_padded_tiles(wave_m: int, wave_n: int) -> None:
    """A broadcast bias read in the padded layout, row sums and maxima of 8-row and 4-column wave tiles
    (a 4-column tile's padding columns duplicate real ones: a sum that took them would count those twice)."""
    compiled = wc.compile(epilogue_gemm(wave_m, wave_n), {}, backend="emulator", target="sm_80")
    g, seed = generator()
    m, n, k = 37, wave_n, 40
    a, b, bias = randn(g, m, k, dtype=torch.float16), randn(g, n, k, dtype=torch.float16), randn(g, n)
    c, s, mx = poisoned(m, n), poisoned(m), poisoned(m)
    compiled(a, b, bias, c, s, mx)
    ref = a.double() @ b.double().T + bias.double()
    check(c, ref, GEMM_TOL, f"epilogue {wave_m}x{wave_n} (seed {seed})")
    check(s, ref.sum(1), GEMM_TOL, f"row sums {wave_m}x{wave_n} (seed {seed})")
    check(mx, ref.max(1).values, GEMM_TOL, f"row maxima {wave_m}x{wave_n} (seed {seed})")


I8_MMA = {"sm_80": (wc.MMAType.NV_I32_16x8x32_I8, 32), "gfx942": (wc.MMAType.I32_16x16x32_I8, 64)}


@pytest.mark.parametrize("target", list(I8_MMA))
def test_int8_k_tile_under_the_instruction(target: str) -> None:
    """BLOCK_K = 16 under the int8 instructions' K of 32: exact i32 sums, -7 where nothing was written."""
    mma, threads = I8_MMA[target]
    subs = {gm.BLOCK_M: 32, gm.BLOCK_N: 32, gm.BLOCK_K: 16, gm.NUM_STAGES: 2, gm.GROUP_M: 1}
    compiled = wc.compile(gm.make_gemm(wc.i8, threads, mma, (2, 2)), subs, backend="emulator", target=target)
    g, seed = generator()
    for m, n, k in [(33, 13, 48), (17, 9, 16)]:
        a, b = (torch.randint(-128, 128, (r, k), generator=g, dtype=torch.int8) for r in (m, n))
        c = torch.full((m, n), -7, dtype=torch.int32)
        compiled(a, b, c)
        assert torch.equal(c, (a.long() @ b.long().T).int()), f"{target} M={m} N={n} K={k} (seed {seed})"


def test_tf32_k_tile_under_the_instruction() -> None:
    """BLOCK_K = 4 under tf32's K of 8 (f32 operands rounded to tf32: about 1e-3 relative error)."""
    subs = {gm.BLOCK_M: 32, gm.BLOCK_N: 32, gm.BLOCK_K: 4, gm.NUM_STAGES: 1, gm.GROUP_M: 1}
    kernel = gm.make_gemm(wc.f32, 32, wc.MMAType.NV_F32_16x8x8_TF32, (2, 2))
    compiled = wc.compile(kernel, subs, backend="emulator", target="sm_80")
    g, seed = generator()
    for m, n, k in [(33, 13, 12), (5, 3, 4)]:
        a, b = randn(g, m, k), randn(g, n, k)
        c = poisoned(m, n)
        compiled(a, b, c)
        check(c, a.double() @ b.double().T, 3e-3, f"tf32 M={m} N={n} K={k} (seed {seed})")


NN = [("sm_80", 16, 4, 32), ("sm_80", 8, 8, 8), ("gfx942", 16, 4, 32)]


@pytest.mark.parametrize("target,wave_m,wave_n,block_k", NN, ids=[f"{t}-{m}x{n}x{k}" for t, m, n, k in NN])
def test_b_stored_k_by_n(target: str, wave_m: int, wave_n: int, block_k: int) -> None:
    """B stored [K, N]: ``ldmatrix.trans`` reads 8 N-columns per address, past a padded N tile, so a
    padded N reads B element-wise (and an unpadded one keeps ``.trans``)."""
    compiled = wc.compile(gemm_nn(target, wave_m, wave_n, block_k), {}, backend="emulator", target=target)
    if target != "gfx942":
        assert ("transpose = true" in compiled.mlir) == (wave_n >= 8)
    g, seed = generator()
    for m, n, k in [(33, 13, 40), (7, 5, 8)]:
        a, b = randn(g, m, k, dtype=torch.float16), randn(g, k, n, dtype=torch.float16)
        c = poisoned(m, n)
        compiled(a, b, c)
        check(c, a.double() @ b.double(), GEMM_TOL, f"{target} {wave_m}x{wave_n}x{block_k} {m}x{n}x{k} (seed {seed})")


ATTENTION = [  # (target, dtype, BLOCK_M, head dim): 2 waves, so BLOCK_M = 16 is an 8-row wave tile
    ("sm_80", wc.f16, 32, 8),
    ("sm_80", wc.bf16, 16, 8),
    ("sm_80", wc.f16, 16, 64),
    ("gfx942", wc.f16, 32, 8),
]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize(
    "target,dtype,bm,d", ATTENTION, ids=[f"{t}-{dt.name}-bm{bm}-d{d}" for t, dt, bm, d in ATTENTION]
)
def test_attention_small_tiles(target: str, dtype, bm: int, d: int, causal: bool) -> None:
    """The library's attention body with head dim 8 (Q @ K.T runs k16 on 8 columns) and 8-row wave tiles."""
    mma = "mfma" if target == "gfx942" else "mma_sync"
    kernel = make_attention(dtype, "bhsd", causal, 2, mma=mma)
    subs = {BLOCK_M: bm, BLOCK_N: 32, NUM_STAGES: 2, D: d}
    compiled = wc.compile(kernel, subs, backend="emulator", target=target, cache=False)
    _g, seed = generator()
    torch.manual_seed(seed)  # _inputs draws from torch's global generator
    q, k, v = _inputs(1, 2, 1, 37, 45, d, dtype)
    check_attention(compiled, "bhsd", dtype, q, k, v, _reference(q, k, v, causal))


def test_unpaddable_tiles_still_error() -> None:
    """A tile that does not divide the instruction's, a prefix sum along a padded dim, and a conversion through
    shared memory of padded rows (MFMA attention) keep a ConstraintError naming the constraint and why."""
    kernel, subs = gemm_for("sm_80", wc.f16, 48, 32, 32, 1)
    with pytest.raises(ConstraintError, match=r"a tile of 24 .* nor a divisor of it"):
        wc.compile(kernel, subs, backend="emulator", target="sm_80")
    with pytest.raises(ConstraintError, match=r"WaveConstraint\(N, 4\).*%scan at .* combines elements along N"):
        wc.compile(epilogue_gemm(16, 4, rows="cumsum"), {}, backend="emulator", target="sm_80")
    mfma = make_attention(wc.f16, "bhsd", False, 2, mma="mfma")
    with pytest.raises(ConstraintError, match=r"BLOCK_M = 16 .*a tile of 8 .*through shared memory"):
        wc.compile(mfma, {BLOCK_M: 16, BLOCK_N: 32, NUM_STAGES: 2, D: 8}, backend="emulator", target="gfx942")
