"""GEMM ``C = A @ B.T`` (A [M, K], B [N, K], f16/bf16 in, f32 out) on the matrix units."""


import wavec as wc
from wavec import Memory, Register, f32

M, N, K = wc.sym.M, wc.sym.N, wc.sym.K
BLOCK_M, BLOCK_N, BLOCK_K = wc.sym.BLOCK_M, wc.sym.BLOCK_N, wc.sym.BLOCK_K
NUM_STAGES, GROUP_M = wc.sym.NUM_STAGES, wc.sym.GROUP_M

MMA_FOR_TARGET = {
    "sm_80": (32, wc.MMAType.NV_F32_16x8x16_F16),
    "sm_90": (32, wc.MMAType.NV_F32_16x8x16_F16),
    "sm_90a": (32, wc.MMAType.NV_F32_16x8x16_F16),
    "gfx942": (64, wc.MMAType.F32_16x16x16_F16),
}


def gemm_constraints(threads_per_wave: int = 32, mma_type=wc.MMAType.NV_F32_16x8x16_F16,
                     waves=(2, 2)) -> list:
    """Workgroup tile BLOCK_M x BLOCK_N, a waves[0] x waves[1] grid of waves, K in steps of BLOCK_K."""
    return [
        wc.WorkgroupConstraint(M, BLOCK_M, 0),
        wc.WorkgroupConstraint(N, BLOCK_N, 1),
        wc.WaveConstraint(M, BLOCK_M / waves[0]),
        wc.WaveConstraint(N, BLOCK_N / waves[1]),
        wc.TilingConstraint(K, BLOCK_K),
        wc.HardwareConstraint(threads_per_wave=threads_per_wave, mma_type=mma_type),
        wc.SchedulingConstraint(num_stages=NUM_STAGES, group_size=GROUP_M),
    ]


def make_gemm(dtype=wc.f16, threads_per_wave: int = 32, mma_type=wc.MMAType.NV_F32_16x8x16_F16,
              waves=(2, 2)) -> wc.WaveKernel:
    """The GEMM kernel definition for ``dtype`` inputs; only the HardwareConstraint changes per GPU."""

    @wc.wave(gemm_constraints(threads_per_wave, mma_type, waves))
    def gemm(a: Memory[M, K, dtype], b: Memory[N, K, dtype], c: Memory[M, N, f32]):
        acc = Register[M, N, f32](0.0)

        @wc.iterate(K, init_args=[acc])
        def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
            return wc.mma(wc.read(a), wc.read(b), acc)

        wc.write(body, c)

    return gemm


DEFAULT_SUBS = {BLOCK_M: 64, BLOCK_N: 64, BLOCK_K: 32, NUM_STAGES: 2, GROUP_M: 4}
