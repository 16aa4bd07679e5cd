"""Binary tier for split-K (``wavec.kernels.gemm.make_gemm_splitk`` / ``make_splitk_reduce``): the decode tiles
assemble for sm_90 without spills, with the plain GEMM's shared memory (the slice bounds cost no registers
of note).  ptxas on sm_90 (2026-11-23): 16x64 tile 120 registers, 87040 bytes of shared memory; 16x128
tile 113 registers, 156672 bytes; reduce 15-32 registers; no spills."""

import pytest

import wavec as wc
from wavec.codegen.ptxas import find_ptxas
from wavec.kernels import gemm as gm

pytestmark = pytest.mark.skipif(find_ptxas() is None, reason="ptxas not found")


@pytest.mark.parametrize("bn,waves", [(64, (1, 2)), (128, (1, 4))], ids=["16x64", "16x128"])
def test_splitk_decode_tiles_have_no_spills(bn: int, waves) -> None:
    subs = {gm.BLOCK_M: 16, gm.BLOCK_N: bn, gm.BLOCK_K: 128, gm.NUM_STAGES: 4, gm.GROUP_M: 1}
    k = wc.compile(gm.make_gemm_splitk(wc.f16, waves=waves), subs, target="sm_90", backend="cuda", cache=False)
    m = k.metadata
    assert m.spills == 0 and 0 < m.registers <= 128, (m.registers, m.spills)
    assert m.block == (32 * waves[1], 1, 1)


def test_splitk_reduce_has_no_spills() -> None:
    k = wc.compile(
        gm.make_splitk_reduce(wc.bf16), {gm.S: 8, gm.BLOCK_P: 512}, target="sm_90", backend="cuda", cache=False
    )
    assert k.metadata.spills == 0 and k.metadata.registers <= 64, (k.metadata.registers, k.metadata.spills)
