"""Kernels whose wave tiles are smaller than an MMA instruction tile (issue #20 item 2), shared by the
emulator, binary and GPU tiers: the instruction tile is padded (``wavec/indexing/padding.py``).

``CONFIGS``: (id, target, dtype, BLOCK_M, BLOCK_N, BLOCK_K, stages) of the library GEMM on 2 x 2 waves:
wave tiles of 8 rows and 4 columns under mma.sync m16n8k16 and MFMA 16x16x16, BLOCK_K = 8 under an
instruction K of 16, and 8-row tiles with it (a smaller B tile than 8 x 8 has fewer elements than
the 128 threads that stage it)."""

from __future__ import annotations

import wavec as wc
from wavec import Memory, Register, f32
from wavec.kernels import gemm as gm

M, N, K = gm.M, gm.N, gm.K
NV_MMA = {wc.f16: wc.MMAType.NV_F32_16x8x16_F16, wc.bf16: wc.MMAType.NV_F32_16x8x16_BF16}
AMD_MMA = wc.MMAType.F32_16x16x16_F16

CONFIGS = [
    ("nv-f16-m8n4", "sm_80", wc.f16, 16, 8, 32, 1),
    ("nv-bf16-m8n4-stages2", "sm_80", wc.bf16, 16, 8, 32, 2),
    ("nv-f16-k8", "sm_80", wc.f16, 32, 32, 8, 2),
    ("nv-bf16-m8k8", "sm_80", wc.bf16, 16, 16, 8, 1),
    ("amd-f16-m8n4", "gfx942", wc.f16, 16, 8, 32, 1),
    ("amd-f16-k8", "gfx942", wc.f16, 32, 32, 8, 2),
]
SIZES = [(33, 13, 40), (8, 4, 8), (17, 9, 29)]  # (M, N, K): ragged tiles, one wave tile, K not a run multiple


def gemm_for(target: str, dtype, bm: int, bn: int, bk: int, stages: int) -> tuple[wc.WaveKernel, dict]:
    """(the library GEMM on 2 x 2 waves, its subs) for ``target``'s instruction."""
    amd = target == "gfx942"
    kernel = gm.make_gemm(dtype, 64 if amd else 32, AMD_MMA if amd else NV_MMA[dtype], (2, 2))
    subs = {gm.BLOCK_M: bm, gm.BLOCK_N: bn, gm.BLOCK_K: bk, gm.NUM_STAGES: stages, gm.GROUP_M: 1}
    return kernel, subs


def epilogue_gemm(wave_m: int, wave_n: int, dtype=wc.f16, rows: str = "sum") -> wc.WaveKernel:
    """``c = a @ b.T + bias`` (bias [N]) and its row sums ``s`` and row maxima ``mx`` on 2 x 1 waves of
    ``wave_m`` x ``wave_n`` with K in steps of 16 (mma.sync m16n8k16): a padded tile's values flow through
    a broadcast operand, an elementwise op and reductions (along a padded N their identity fills the
    padding).  ``rows="cumsum"``: c holds the row prefix sums instead (and s, mx are not written)."""
    cons = [
        wc.WorkgroupConstraint(M, 2 * wave_m, 0),
        wc.WorkgroupConstraint(N, wave_n, 1),
        wc.WaveConstraint(M, wave_m),
        wc.WaveConstraint(N, wave_n),
        wc.TilingConstraint(K, 16),
        wc.HardwareConstraint(threads_per_wave=32, mma_type=NV_MMA[dtype]),
    ]

    @wc.wave(cons)
    def epilogue(a: Memory[M, K, dtype], b: Memory[N, K, dtype], bias: Memory[N, f32], c: Memory[M, N, f32],
                 s: Memory[M, f32], mx: Memory[M, f32]):  # fmt: skip
        @wc.iterate(K, init_args=[Register[M, N, f32](0.0)])
        def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
            return wc.mma(wc.read(a), wc.read(b), acc)

        y = body + wc.read(bias)
        if rows == "cumsum":
            wc.write(wc.cumsum(y, N), c)
        else:
            wc.write(y, c)
            wc.write(wc.sum(y, N), s)
            wc.write(wc.max(y, N), mx)

    return epilogue


def gemm_nn(target: str, wave_m: int, wave_n: int, block_k: int) -> wc.WaveKernel:
    """``c = a @ b`` with b stored [K, N] (its operand the read permuted to [N, K]; on mma.sync staged for
    ``ldmatrix.trans``, which a padded N cannot use) on 2 x 2 waves of ``wave_m`` x ``wave_n``."""
    threads, mma = (64, AMD_MMA) if target == "gfx942" else (32, NV_MMA[wc.f16])
    cons = [
        wc.WorkgroupConstraint(M, 2 * wave_m, 0),
        wc.WorkgroupConstraint(N, 2 * wave_n, 1),
        wc.WaveConstraint(M, wave_m),
        wc.WaveConstraint(N, wave_n),
        wc.TilingConstraint(K, block_k),
        wc.HardwareConstraint(threads_per_wave=threads, mma_type=mma),
        wc.SchedulingConstraint(num_stages=2, promote_operands=True),
    ]

    @wc.wave(cons)
    def gemm_nn(a: Memory[M, K, wc.f16], b: Memory[K, N, wc.f16], c: Memory[M, N, f32]):
        @wc.iterate(K, init_args=[Register[M, N, f32](0.0)])
        def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
            return wc.mma(wc.read(a), wc.permute(wc.read(b), (N, K)), acc)

        wc.write(body, c)

    return gemm_nn
