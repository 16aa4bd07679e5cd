"""GEMM ``C = A @ B.T`` (A [M, K], B [N, K], f16/bf16 in, f32 accumulation, C in f32 or the input dtype) on
the matrix units."""


import wavec as wc
from wavec import Memory, Register, f32

M, N, K = wc.sym.M, wc.sym.N, wc.sym.K
BLOCK_M, BLOCK_N, BLOCK_K = wc.sym.BLOCK_M, wc.sym.BLOCK_N, wc.sym.BLOCK_K
NUM_STAGES, GROUP_M = wc.sym.NUM_STAGES, wc.sym.GROUP_M

MMA_FOR_TARGET = {
    "sm_80": (32, wc.MMAType.NV_F32_16x8x16_F16),
    "sm_90": (32, wc.MMAType.NV_F32_16x8x16_F16),
    "sm_90a": (32, wc.MMAType.NV_WGMMA_F32_64xNx16_F16),  # warpgroup MMA: wave tiles of M are 64k
    "gfx942": (64, wc.MMAType.F32_16x16x16_F16),
}


def gemm_constraints(threads_per_wave: int = 32, mma_type=wc.MMAType.NV_F32_16x8x16_F16,
                     waves=(2, 2), operand_swizzle: str = "auto", async_copy: str = "auto",
                     warp_specialize: bool = False) -> list:
    """Workgroup tile BLOCK_M x BLOCK_N, a waves[0] x waves[1] grid of waves (of warpgroups for wgmma),
    K in steps of BLOCK_K; ``operand_swizzle`` picks the shared layout of wgmma operands, ``async_copy``
    how the pipeline fetches tiles ("auto": TMA where it applies, "tma", "cp.async"); ``warp_specialize``
    adds a TMA producer warpgroup (sm_90a wgmma with TMA only)."""
    return [
        wc.WorkgroupConstraint(M, BLOCK_M, 0),
        wc.WorkgroupConstraint(N, BLOCK_N, 1),
        wc.WaveConstraint(M, BLOCK_M / waves[0]),
        wc.WaveConstraint(N, BLOCK_N / waves[1]),
        wc.TilingConstraint(K, BLOCK_K),
        wc.HardwareConstraint(threads_per_wave=threads_per_wave, mma_type=mma_type),
        wc.SchedulingConstraint(num_stages=NUM_STAGES, group_size=GROUP_M, operand_swizzle=operand_swizzle,
                                async_copy=async_copy, warp_specialize=warp_specialize),
    ]


def make_gemm(dtype=wc.f16, threads_per_wave: int = 32, mma_type=wc.MMAType.NV_F32_16x8x16_F16,
              waves=(2, 2), operand_swizzle: str = "auto", async_copy: str = "auto",
              warp_specialize: bool = False, out_dtype=f32) -> wc.WaveKernel:
    """The GEMM kernel definition for ``dtype`` inputs; only the HardwareConstraint (and, for Hopper's
    wgmma, the wave tiles) changes per GPU.  ``out_dtype``: C's dtype, f32 or ``dtype`` (the f32
    accumulator rounded once, as cuBLAS does for ``torch.matmul``; half the epilogue's bytes)."""
    if out_dtype not in (f32, dtype):
        raise ValueError(f"out_dtype must be f32 or the input dtype {dtype.name}, got {out_dtype}")

    @wc.wave(gemm_constraints(threads_per_wave, mma_type, waves, operand_swizzle, async_copy, warp_specialize))
    def gemm(a: Memory[M, K, dtype], b: Memory[N, K, dtype], c: Memory[M, N, out_dtype]):
        acc = Register[M, N, f32](0.0)

        @wc.iterate(K, init_args=[acc])
        def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
            return wc.mma(wc.read(a), wc.read(b), acc)

        wc.write(body if out_dtype == f32 else wc.cast(body, out_dtype), c)

    return gemm


DEFAULT_SUBS = {BLOCK_M: 64, BLOCK_N: 64, BLOCK_K: 32, NUM_STAGES: 2, GROUP_M: 4}


# ----- a simple, documented shape heuristic (until the autotuner exists) -----
# Per-tile throughput measured on an H200 (benchmarks/gemm_sweep.py and the schedule experiment of
# 2026-11-22, 4096^3 and 8192^3 f16, relative to the best): 256x128x64 (4x2 waves) = 1.0 (341-345 TFLOP/s),
# 128x256 = 0.985, 128x128 = 0.97, 64-row tiles ~0.7, 64x64 ~0.4; workgroups per SM from registers (255 per
# thread) and shared memory (3 stages of BLOCK_K = 64 tiles, padded rows).
# The heuristic picks the tile with the least (rounds of workgroups over the 132 SMs) x (work per
# workgroup) / throughput, so mid-size problems (M = 128..512) still fill the machine.  Decode (M <= 16) is bound by
# reading B once: 16-row tiles, as narrow along N as needed for two workgroups per SM.
_SMS = 132
_TILES = [  # (BLOCK_M, BLOCK_N, waves, relative throughput, workgroups per SM)
    (128, 128, (2, 2), 0.97, 2),
    (256, 128, (4, 2), 1.00, 1),
    (128, 256, (2, 4), 0.985, 1),
    (64, 128, (2, 2), 0.70, 3),
    (64, 64, (2, 2), 0.40, 4),
]
_DECODE_TILES = [(16, 128, (1, 4)), (16, 64, (1, 2))]  # 16x32 single-wave tiles measured slower


def gemm_config(m: int, n: int, k: int) -> tuple[dict, tuple[int, int]]:
    """(subs, waves) for a problem of size m x n x k."""
    bk = 64 if k % 64 == 0 or k > 256 else 32
    if m <= 16:  # long K steps keep more bytes of B in flight per workgroup (bandwidth-bound)
        bm, bn, waves = next((t for t in _DECODE_TILES if -(-n // t[1]) >= 2 * _SMS), _DECODE_TILES[-1])
        bk = 128 if k >= 1024 else bk
        return {BLOCK_M: bm, BLOCK_N: bn, BLOCK_K: bk, NUM_STAGES: 4, GROUP_M: 1}, waves

    def cost(tile) -> float:  # rounds of one workgroup per SM x work per workgroup / tile throughput
        bm, bn, _w, rate, _per_sm = tile
        workgroups = -(-m // bm) * -(-n // bn)
        return -(-workgroups // _SMS) * bm * bn / rate

    bm, bn, waves, _rate, _per_sm = min(_TILES, key=cost)
    stages = 3
    return {BLOCK_M: bm, BLOCK_N: bn, BLOCK_K: bk, NUM_STAGES: stages, GROUP_M: 8}, waves


# ----- Hopper (sm_90a): wgmma -----
# The same kernel body; the HardwareConstraint names a warpgroup MMA type and the wave tiles are
# warpgroup tiles: 64-row multiples along M, each spanning the workgroup's N (one m64nNk16 instruction per
# 64 rows and K step, N = BLOCK_N up to 256).
WGMMA_FOR_DTYPE = {"f16": wc.MMAType.NV_WGMMA_F32_64xNx16_F16, "bf16": wc.MMAType.NV_WGMMA_F32_64xNx16_BF16}
WGMMA_WAVES = (2, 1)
WGMMA_SUBS = {BLOCK_M: 128, BLOCK_N: 128, BLOCK_K: 64, NUM_STAGES: 4, GROUP_M: 8}
# (BLOCK_M, BLOCK_N, warpgroups, relative throughput of a full grid).  128x256 (2 warpgroups, 4 stages:
# 192 KiB, one workgroup per SM) is the best tile measured at 4096^3 on the H200 (600 / 632 TFLOP/s
# f16 / bf16); the other rates are the mma.sync tiles' measured ratios (same tile, same operand bytes per
# FLOP), an estimate until a wgmma sweep (``tune_gemm.py --mma wgmma``) replaces them.
_WGMMA_TILES = [
    (128, 256, (2, 1), 1.00),
    (128, 128, (2, 1), 0.97),
    (64, 256, (1, 1), 0.75),
    (64, 128, (1, 1), 0.70),
    (64, 64, (1, 1), 0.40),
]


def wgmma_config(m: int, n: int, k: int) -> tuple[dict, tuple[int, int]]:
    """(subs, waves) for the wgmma GEMM: the tile of least (rounds of workgroups over the 132 SMs) x
    (tile area) / throughput, as ``gemm_config`` chooses, so small and skinny problems take 64-row or
    128-wide tiles that give every SM work instead of leaving most of the GPU idle under 128x256 tiles
    (1024^3: 32 workgroups of 128x256, 128 of 64x128).  64-row tiles only when M <= 64 or they fill more SMs.
    BLOCK_K 64 and 4 stages (3 stages lose ~25 % at 4096^3: the loop keeps one wgmma group in flight);
    3 when K is at most 2 steps deep.  Decode shapes (M <= 16) do not come here: ``matmul`` keeps the
    mma.sync decode tiles for them (bandwidth-bound; a 64-row instruction would waste 3/4 of its rows)."""
    tiles = [t for t in _WGMMA_TILES if t[0] == 64] if m <= 64 else _WGMMA_TILES

    def cost(tile) -> float:
        bm, bn, _w, rate = tile
        return -(-(-(-m // bm) * -(-n // bn)) // _SMS) * bm * bn / rate

    bm, bn, waves, _rate = min(tiles, key=cost)
    stages = 3 if k <= 128 else 4
    return {BLOCK_M: bm, BLOCK_N: bn, BLOCK_K: 64, NUM_STAGES: stages, GROUP_M: 8}, waves


_COMPILED: dict = {}
MMA_CHOICES = ("mma_sync", "wgmma")


def matmul(a, b, *, backend: str | None = None, mma: str = "mma_sync", async_copy: str = "auto",
           warp_specialize: bool = False, out_dtype=None):
    """``a @ b.T`` for torch tensors a [M, K], b [N, K] (f16 or bf16) into a new tensor of ``out_dtype``:
    ``torch.float32`` (None, the default) or a's dtype (as ``torch.matmul`` returns; rounded from the f32
    accumulator).

    ``mma``: "mma_sync" (sm_80+, the default) or "wgmma" (Hopper warpgroup MMA, compiled for sm_90a;
    decode shapes, M <= 16, keep the mma.sync decode tiles).  ``async_copy``: the pipeline's copies
    (``SchedulingConstraint.async_copy``; "auto": TMA for the wgmma tiles, "cp.async" to compare).
    ``warp_specialize``: a TMA producer warpgroup (``SchedulingConstraint.warp_specialize``; wgmma tiles
    only, decode shapes keep mma.sync without it)."""
    import torch

    dtype = {torch.float16: wc.f16, torch.bfloat16: wc.bf16}.get(a.dtype)
    if dtype is None:
        raise wc.WavecError(message=f"matmul: a must be float16 or bfloat16, got {a.dtype}")
    if mma not in MMA_CHOICES:
        raise wc.WavecError(message=f"matmul: mma must be one of {MMA_CHOICES}, got {mma!r}")
    out_dtype = torch.float32 if out_dtype is None else out_dtype
    if out_dtype not in (torch.float32, a.dtype):
        raise wc.WavecError(message=f"matmul: out_dtype must be torch.float32 or a's dtype {a.dtype}, got {out_dtype}")
    out = f32 if out_dtype == torch.float32 else dtype
    target = None
    if mma == "wgmma" and a.shape[0] <= 16:
        mma, warp_specialize = "mma_sync", False  # decode: the mma.sync decode tiles (see wgmma_config)
    if mma == "wgmma":
        mma_type, target = WGMMA_FOR_DTYPE[dtype.name], "sm_90a"
        subs, waves = wgmma_config(a.shape[0], b.shape[0], a.shape[1])
    else:
        mma_type = wc.MMAType.NV_F32_16x8x16_F16 if dtype == wc.f16 else wc.MMAType.NV_F32_16x8x16_BF16
        subs, waves = gemm_config(a.shape[0], b.shape[0], a.shape[1])
    key = (dtype.name, tuple(sorted((str(k), v) for k, v in subs.items())), waves, backend, mma, async_copy,
           warp_specialize, out.name)
    kernel = _COMPILED.get(key)
    if kernel is None:
        gemm = make_gemm(dtype, mma_type=mma_type, waves=waves, async_copy=async_copy,
                         warp_specialize=warp_specialize, out_dtype=out)
        kernel = _COMPILED[key] = wc.compile(gemm, subs, backend=backend, target=target)
    c = torch.empty(a.shape[0], b.shape[0], device=a.device, dtype=out_dtype)
    kernel(a, b, c)
    return c
