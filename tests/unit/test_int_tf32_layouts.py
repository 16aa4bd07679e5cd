"""The layouts of the i8 and tf32 MMA types against independent statements of the ISA fragments: the
emulator's PTX tables (``ops_nvgpu.frag_a`` / ``frag_b`` / ``frag_c``, which the PTX ISA's "Matrix
Fragments for mma.m16n8k32 / m16n8k8" define) and its CDNA3 MFMA table, lane by lane and register by
register.  A layout that disagrees would compute a product of permuted elements."""

from __future__ import annotations

import numpy as np
import pytest
import sympy

import wavec as wc
from wavec.emulator.ops_amdgpu import mfma_layouts
from wavec.emulator.ops_nvgpu import frag_a, frag_b, frag_c
from wavec.indexing import LANE
from wavec.indexing.mma import mma_layout

D0, D1 = sympy.symbols("D0 D1")


def coords(layout, lane: int) -> list[tuple[int, int]]:
    """(d0, d1) of each register position of ``lane``."""
    s0, s1 = (int(layout.seq(d).start.subs(LANE, lane)) for d in (D0, D1))
    return [(s0 + off[D0], s1 + off[D1]) for off in layout.positions()]


NV = [(wc.MMAType.NV_I32_16x8x32_I8, 4), (wc.MMAType.NV_F32_16x8x8_TF32, 1), (wc.MMAType.NV_F32_16x8x16_F16, 2)]


@pytest.mark.parametrize("mma,p", NV, ids=lambda x: getattr(x, "name", str(x)))
def test_nvidia_fragments_match_the_ptx_tables(mma, p: int) -> None:
    assert mma.per_register == p and mma.spec.k == 8 * p
    regs_a, regs_b = mma.spec.a_shape[0], mma.spec.b_shape[0]
    ar, ac = frag_a(regs_a, p)
    bk, bn = frag_b(regs_b, p)
    cr, cc = frag_c()
    la, lb, lc = (mma_layout(mma, role, D0, D1) for role in "abc")
    assert la.tile == (16, mma.spec.k) and lb.tile == (8, mma.spec.k) and lc.tile == (16, 8)
    for lane in range(32):
        assert coords(la, lane) == list(zip(ar[lane].ravel(), ac[lane].ravel())), f"A, lane {lane}"
        # B is [N, K] in wavec, (k, n) in the table
        assert coords(lb, lane) == list(zip(bn[lane].ravel(), bk[lane].ravel())), f"B, lane {lane}"
        assert coords(lc, lane) == list(zip(cr[lane].ravel(), cc[lane].ravel())), f"C, lane {lane}"


def test_mfma_i8_fragments_match_the_cdna3_table() -> None:
    mma = wc.MMAType.I32_16x16x32_I8
    (ar, ac), (bk, bn), (cr, cc) = mfma_layouts(16, 32)
    la, lb, lc = (mma_layout(mma, role, D0, D1) for role in "abc")
    assert ar.shape == (64, 8) and la.size == 8 and lc.size == 4
    for lane in range(64):
        assert coords(la, lane) == list(zip(ar[lane], ac[lane])), f"A, lane {lane}"
        assert coords(lb, lane) == list(zip(bn[lane], bk[lane])), f"B, lane {lane}"
        assert coords(lc, lane) == list(zip(cr[lane], cc[lane])), f"C, lane {lane}"


@pytest.mark.parametrize("mma", [wc.MMAType.NV_WGMMA_I32_64xNx32_I8, wc.MMAType.NV_WGMMA_F32_64xNx8_TF32])
def test_wgmma_register_a_is_four_warps_of_the_mma_sync_fragment(mma) -> None:
    """wgmma's register A (PTX ISA, "Register Fragments" of wgmma .k32 s8 / .k8 tf32): warp w holds rows
    16w..16w+15 as the m16n8k32 / m16n8k8 A fragment; descriptor tiles span the instruction's K."""
    p = mma.per_register
    ar, ac = frag_a(4, p)
    la = mma_layout(mma, "a", D0, D1, n=64, a_in_registers=True)
    for lane in range(128):
        want = [(16 * (lane // 32) + r, c) for r, c in zip(ar[lane % 32].ravel(), ac[lane % 32].ravel())]
        assert coords(la, lane) == want, f"lane {lane}"
    assert mma_layout(mma, "b", D0, D1, n=64).tile == (64, mma.spec.k)
    assert np.array_equal(np.array(mma_layout(mma, "a", D0, D1, n=64).tile), [64, mma.spec.k])
