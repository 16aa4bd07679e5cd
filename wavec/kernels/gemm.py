"""GEMM ``C = A @ B.T`` (A [M, K], B [N, K], f16/bf16 in, f32 accumulation, C in f32 or the input dtype) on
the matrix units; split-K for decode shapes (``make_gemm_splitk``, ``splitk_config``)."""

from dataclasses import dataclass

import sympy

import wavec as wc
from wavec import Memory, Register, f32

M, N, K = wc.sym.M, wc.sym.N, wc.sym.K
S, P, BLOCK_P = wc.sym.S, wc.sym.P, wc.sym.BLOCK_P  # split-K: slices of K, flat M*N, reduce tile
BLOCK_M, BLOCK_N, BLOCK_K = wc.sym.BLOCK_M, wc.sym.BLOCK_N, wc.sym.BLOCK_K
NUM_STAGES, GROUP_M = wc.sym.NUM_STAGES, wc.sym.GROUP_M

MMA_FOR_TARGET = {
    "sm_80": (32, wc.MMAType.NV_F32_16x8x16_F16),
    "sm_90": (32, wc.MMAType.NV_F32_16x8x16_F16),
    "sm_90a": (32, wc.MMAType.NV_WGMMA_F32_64xNx16_F16),  # warpgroup MMA: wave tiles of M are 64k
    "gfx942": (64, wc.MMAType.F32_16x16x16_F16),
}


def gemm_constraints(
    threads_per_wave: int = 32,
    mma_type=wc.MMAType.NV_F32_16x8x16_F16,
    waves=(2, 2),
    operand_swizzle: str = "auto",
    async_copy: str = "auto",
    warp_specialize: bool = False,
    persistent: bool = False,
    split_epilogue: bool = False,
    prefetch_fragments: bool = False,
) -> list:
    """Workgroup tile BLOCK_M x BLOCK_N, a waves[0] x waves[1] grid of waves (of warpgroups for wgmma),
    K in steps of BLOCK_K; ``operand_swizzle`` picks the shared layout of wgmma operands, ``async_copy``
    how the pipeline fetches tiles ("auto": TMA where it applies, "tma", "cp.async"); ``warp_specialize``
    adds a TMA producer warpgroup (sm_90a wgmma with TMA only); ``persistent`` a persistent grid looping
    over the output tiles (sm_90a wgmma with TMA only); ``split_epilogue`` one bounds test per thread before
    C's stores; ``prefetch_fragments`` reads the next iteration's first mma.sync fragments during the
    last K step (``passes/prefetch_fragments.py``)."""
    return [
        wc.WorkgroupConstraint(M, BLOCK_M, 0),
        wc.WorkgroupConstraint(N, BLOCK_N, 1),
        wc.WaveConstraint(M, BLOCK_M / waves[0]),
        wc.WaveConstraint(N, BLOCK_N / waves[1]),
        wc.TilingConstraint(K, BLOCK_K),
        wc.HardwareConstraint(threads_per_wave=threads_per_wave, mma_type=mma_type),
        wc.SchedulingConstraint(
            num_stages=NUM_STAGES,
            group_size=GROUP_M,
            operand_swizzle=operand_swizzle,
            async_copy=async_copy,
            warp_specialize=warp_specialize,
            persistent=persistent,
            split_epilogue=split_epilogue,
            prefetch_fragments=prefetch_fragments,
        ),
    ]


def make_gemm(
    dtype=wc.f16,
    threads_per_wave: int = 32,
    mma_type=wc.MMAType.NV_F32_16x8x16_F16,
    waves=(2, 2),
    operand_swizzle: str = "auto",
    async_copy: str = "auto",
    warp_specialize: bool = False,
    out_dtype=f32,
    persistent: bool = False,
    split_epilogue: bool = False,
    prefetch_fragments: bool = True,
) -> wc.WaveKernel:
    """The GEMM kernel definition for ``dtype`` inputs; only the HardwareConstraint (and, for Hopper's
    wgmma, the wave tiles) changes per GPU.  ``out_dtype``: C's dtype, f32 or ``dtype`` (the f32
    accumulator rounded once, as cuBLAS does for ``torch.matmul``; half the epilogue's bytes).
    ``split_epilogue``: ``SchedulingConstraint.split_epilogue`` (one bounds test per thread, then C's
    stores unguarded; not yet timed on a GPU, off).  ``prefetch_fragments``: on an mma.sync tile, the next
    iteration's first fragments are read during the last K step (``SchedulingConstraint.prefetch_fragments``;
    H100 4096^3 / 8192^3 f16 and bf16: +7-12 % on the 128x256 and 256x128 tiles, ``docs/performance.md``);
    no effect on wgmma tiles."""
    if out_dtype not in (f32, dtype):
        raise ValueError(f"out_dtype must be f32 or the input dtype {dtype.name}, got {out_dtype}")

    @wc.wave(
        gemm_constraints(
            threads_per_wave,
            mma_type,
            waves,
            operand_swizzle,
            async_copy,
            warp_specialize,
            persistent,
            split_epilogue,
            prefetch_fragments,
        )
    )
    def gemm(a: Memory[M, K, dtype], b: Memory[N, K, dtype], c: Memory[M, N, out_dtype]):
        acc = Register[M, N, f32](0.0)

        @wc.iterate(K, init_args=[acc])
        def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
            return wc.mma(wc.read(a), wc.read(b), acc)

        wc.write(body if out_dtype == f32 else wc.cast(body, out_dtype), c)

    return gemm


# ----- split-K (decode shapes) -----
# Workgroup (m, n, s) reduces the K slice [s*KS, min(K, (s+1)*KS)) of its M x N tile into the f32 partial
# c_part[s]; KS = ceil(K / (S*BLOCK_K)) * BLOCK_K, a whole number of K steps, computed at run time from
# the sizes of a and c_part (K and S are both dynamic).  S is a batch dimension on grid axis 2
# (``WorkgroupConstraint(S, 1, 2)``): reads and writes index it by the workgroup, and ``iterate``'s
# ``start=``/``end=`` bound the K loop by the workgroup's slice.  Slices past K (K < S*KS, e.g. K smaller
# than S*BLOCK_K) run no iteration and write zeros; the ragged last slice is clamped to K and its last
# tile masked like any K tail.  ``make_splitk_reduce`` then sums the S partials into C (a second, small
# bandwidth-bound pass: S*M*N*4 bytes read; wavec has no global atomics for an in-kernel reduction).
def split_slice(k: int, s: int, block_k: int) -> int:
    """KS, the K extent of one slice (what the kernel computes at run time): ceil(k / (s*block_k)) * block_k."""
    return -(-k // (s * block_k)) * block_k


def make_gemm_splitk(
    dtype=wc.f16,
    threads_per_wave: int = 32,
    mma_type=wc.MMAType.NV_F32_16x8x16_F16,
    waves=(1, 2),
    async_copy: str = "auto",
) -> wc.WaveKernel:
    """``gemm_splitk(a [M, K], b [N, K], c_part [S, M, N] f32)``: c_part[s] = A[:, slice s] @ B[:, slice s].T,
    the K slices of ``split_slice``; the same tiles, pipeline and subs as ``make_gemm``."""
    constraints = [
        wc.WorkgroupConstraint(S, 1, 2),
        *gemm_constraints(threads_per_wave, mma_type, waves, async_copy=async_copy),
    ]
    ks = sympy.ceiling(K / (S * BLOCK_K)) * BLOCK_K

    @wc.wave(constraints)
    def gemm_splitk(a: Memory[M, K, dtype], b: Memory[N, K, dtype], c_part: Memory[S, M, N, f32]):
        first = wc.tile_start(S) * ks

        @wc.iterate(K, init_args=[Register[M, N, f32](0.0)], start=first, end=first + ks)
        def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
            return wc.mma(wc.read(a), wc.read(b), acc)

        wc.write(body, c_part)

    return gemm_splitk


def make_splitk_reduce(out_dtype=f32, threads_per_wave: int = 32, waves: int = 4, vec: int = 4) -> wc.WaveKernel:
    """``splitk_reduce(c_part [S, P] f32, c [P])``: C = sum over S of the partials (P = M*N, the flat
    views), in f32 or rounded once to ``out_dtype``.  S is bound in subs (every workgroup holds all S
    slices of its BLOCK_P run: one ``vec``-wide load per slice per thread, summed in-thread);
    BLOCK_P = waves * threads_per_wave * vec."""
    constraints = [
        wc.WorkgroupConstraint(P, BLOCK_P, 0),
        wc.WorkgroupConstraint(S, S, None),
        wc.WaveConstraint(P, BLOCK_P / waves),
        wc.HardwareConstraint(threads_per_wave=threads_per_wave, vector_shapes={S: 1, P: threads_per_wave * vec}),
    ]

    @wc.wave(constraints)
    def splitk_reduce(c_part: Memory[S, P, f32], c: Memory[P, out_dtype]):
        total = wc.sum(wc.read(c_part), S)
        wc.write(total if out_dtype == f32 else wc.cast(total, out_dtype), c)

    return splitk_reduce


DEFAULT_SUBS = {BLOCK_M: 64, BLOCK_N: 64, BLOCK_K: 32, NUM_STAGES: 2, GROUP_M: 4}


# ----- a simple, documented shape heuristic (until the autotuner exists) -----
# Per-tile throughput relative to the best, with fragment prefetch and XOR-swizzled operand tiles (H100,
# benchmarks/mma_sync_reference.py at 4096^3, f16 and bf16, 2026-11-24, reference_xor_configs.log):
# 128x256x64 (2x4 waves) = 1.0 (443-458 TFLOP/s), 256x128 = 0.995, 128x128 = 0.94 (3 stages; 4 stages
# 0.89); 64-row tiles ~0.7 and 64x64 ~0.4 (H200, before the prefetch and the swizzle); workgroups per SM
# from registers (~250 per thread) and shared memory (3 stages of BLOCK_K = 64 tiles, unpadded rows).
# The heuristic picks the tile with the least (rounds of workgroups over the 132 SMs) x (work per
# workgroup) / throughput, so mid-size problems (M = 128..512) still fill the machine.  Decode (M <= 16) is bound by
# reading B once: 16-row tiles, as narrow along N as needed for two workgroups per SM.
_SMS = 132
_TILES = [  # (BLOCK_M, BLOCK_N, waves, relative throughput, workgroups per SM)
    (128, 256, (2, 4), 1.00, 1),
    (256, 128, (4, 2), 0.995, 1),
    (128, 128, (2, 2), 0.94, 2),
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


# Split-K rule for decode (M <= 16; see docs/performance.md).  A decode GEMM streams B once, so its speed
# is the bytes in flight per SM times the SMs that have work.  The 16x64 decode tile (4 stages of 64x128
# B tiles, ~80 KiB of shared memory: two workgroups per SM) gives N = 4096 only 64 workgroups for 132 SMs
# (N = 8192: 128, one per SM at best), so most SMs idle or hold one workgroup.  Splitting K into S slices
# multiplies the workgroups by S: S is the smallest power of two with S * tiles >= 2 * 132 (one resident
# wave of two workgroups per SM; the doubling lands between 2 and 4 workgroups per SM), while every slice
# keeps at least _MIN_SLICE_STEPS K steps (the 4-stage pipeline has something to overlap) and S <= 16
# (partials cost S*M*N*4 bytes written and read again, small next to B's N*K*2 for M <= 16).  Shapes whose
# tiles already fill two workgroups per SM (tiles >= 2 * 132) are not split.  Examples (BLOCK_K 128):
# 1x4096x4096 (M x N x K): 64 tiles -> S = 8 (512 workgroups, 4 K steps each); 1x8192x8192: 128 -> 4;
# 1x14336x4096: 224 -> 2; 16x128256x4096: 1002 tiles of 16x128 -> no split.
# Measured on an H100 (benchmarks/decode_sweep.py, f16, benchmarks/results/decode_h100): the rule's choice
# lost to no split on all six shapes (1x4096x4096 29.9 vs 27.7 us, 16x4096x11008 84.2 vs 56.2, 1x8192x8192
# 78.9 vs 62.7): the partials' write + the second launch cost more than the idle SMs, so ``matmul`` splits
# only when asked (``split=`` S or "auto"); an in-kernel reduction (atomics) is what would make it pay.
_SPLIT_WORKGROUPS = 2 * _SMS
_MIN_SLICE_STEPS = 4
_MAX_SPLIT = 16


def choose_split(tiles: int, k_steps: int) -> int:
    """S for ``tiles`` workgroup tiles and ``k_steps`` K steps of BLOCK_K (the rule above; 1 = no split)."""
    split, most = 1, min(_MAX_SPLIT, k_steps // _MIN_SLICE_STEPS)
    while tiles * split < _SPLIT_WORKGROUPS and 2 * split <= most:
        split *= 2
    return split


def splitk_config(m: int, n: int, k: int) -> tuple[dict, tuple[int, int], int]:
    """(subs, waves, S): ``gemm_config``'s tile and S from ``choose_split`` for decode shapes (M <= 16),
    S = 1 (no split) otherwise."""
    subs, waves = gemm_config(m, n, k)
    if m > 16:
        return subs, waves, 1
    return subs, waves, choose_split(-(-n // subs[BLOCK_N]), -(-k // subs[BLOCK_K]))


# ----- Hopper (sm_90a): wgmma -----
# The same kernel body; the HardwareConstraint names a warpgroup MMA type and the wave tiles are
# warpgroup tiles: 64-row multiples along M, each spanning the workgroup's N (one m64nNk16 instruction per
# 64 rows and K step, N = BLOCK_N up to 256).
WGMMA_FOR_DTYPE = {"f16": wc.MMAType.NV_WGMMA_F32_64xNx16_F16, "bf16": wc.MMAType.NV_WGMMA_F32_64xNx16_BF16}
WGMMA_WAVES = (2, 1)
WGMMA_SUBS = {BLOCK_M: 128, BLOCK_N: 128, BLOCK_K: 64, NUM_STAGES: 4, GROUP_M: 8}


@dataclass(frozen=True, slots=True)
class WgmmaTile:
    """One schedule of the wgmma GEMM: tile, warpgroups (consumers when warp-specialized), stages, the TMA
    producer warpgroup (always; or for K up to ``ws_short_k``, or up to ``ws_max_k`` on grids of at most
    ``ws_max_rounds`` rounds of workgroups over the SMs), the persistent grid, and the tile's throughput on
    a full grid relative to the best."""

    bm: int
    bn: int
    waves: tuple[int, int]
    stages: int
    warp_specialize: bool
    persistent: bool
    rate: float
    ws_max_k: int = 0
    ws_max_rounds: int = 0
    ws_short_k: int = 0


# Measured on an H100 (f16, ``benchmarks/wgmma_tiles.py``, benchmarks/results/wgmma_tiles_h100): TFLOP/s on
# full grids (4096x8192x8192, 2048x5120x5120) 128x256 persistent 597 / 540, 128x128 WS+persistent 549 /
# 558, 64x128 WS 8 stages ~370, 64x64 WS 8 stages ~270.  At 4096^3 / 8192^3 (3 rounds) 128x256 persistent
# is 0.93 / 0.96 of cuBLAS, without the persistent grid 0.91 / 0.95, 128x256 WS 0.87 / 0.93, 256x128
# WS+persistent 0.91 / 0.90 (and 2-9 % slower than 128x256 over the shape file's large-N rows), so
# 128x256 keeps one warpgroup per 64 rows and no producer.  A producer warpgroup lifts the small tiles
# most (64x64 at 64x4096x4096: 55 -> 87 TFLOP/s with WS and 4 -> 8 stages, 0.57 -> 0.88 of cuBLAS): their
# loop is latency-bound, one K step per TMA round trip per stage in flight.  128x160 (0.73-0.80 of
# 128x256's rate at 4096^3) is there for the N that 160 divides into one round where 256 leaves SMs idle:
# 2048x1280x8192 128 workgroups instead of 80 (0.65 -> 0.73 of cuBLAS), 4096x1280x8192 0.63 -> 0.77,
# 512x5120x13824 0.76 -> 0.84.  128x256 takes a producer warpgroup where a tile has few K steps: on the
# persistent grid the producer loads the next tile's first stages while the consumers store C (H100, 3
# rounds, x cuBLAS, persistent -> WS+persistent, f16 / bf16; benchmarks/results/wgmma_tiles_h100/ws_256):
# 8192x8192x1024 0.69 -> 0.74 / 0.67 -> 0.72, 2048^3 0.79 -> 0.81 / 0.79 -> 0.80, 4096^3 0.88 -> 0.90 /
# 0.90 -> 0.91, 2048x6144x4096 0.93 -> 0.99, but 4096x4096x8192 0.95 -> 0.93 / 0.92 -> 0.90 and 8192^3
# 0.99 -> 0.93 / 0.95 -> 0.93.  Large grids at K = 4096 lose too (8192x12288x4096 0.94 -> 0.92,
# 8192x128256x4096 0.88 -> 0.86; over the shape file's K <= 4096 rows, one round each against the run
# before, rows of more than 8 rounds of workgroups -3.9 % while unchanged rows of that size drifted -1.5 %,
# rows of at most 8 rounds +2.0 % against +1.2 %; wgmma_h100/shapefile_f16_ws_k4096), so the producer
# serves K <= 1024 on any grid and K <= 4096 on grids of at most 8 rounds.
_WGMMA_TILES = [
    WgmmaTile(128, 256, (2, 1), 4, False, True, 1.00, ws_max_k=4096, ws_max_rounds=8, ws_short_k=1024),
    WgmmaTile(128, 160, (2, 1), 4, False, True, 0.80),
    WgmmaTile(128, 128, (2, 1), 4, True, True, 0.90),
    WgmmaTile(64, 128, (1, 1), 8, True, False, 0.62),
    WgmmaTile(64, 64, (1, 1), 8, True, False, 0.45),
]


@dataclass(frozen=True, slots=True)
class WgmmaPlan:
    """``wgmma_plan``'s choice: the substitutions and waves of ``make_gemm`` and its schedule flags."""

    subs: dict
    waves: tuple[int, int]
    warp_specialize: bool
    persistent: bool
    split_epilogue: bool = True


def wgmma_plan(m: int, n: int, k: int) -> WgmmaPlan:
    """The wgmma GEMM's schedule for m x n x k: the ``_WGMMA_TILES`` entry of least (rounds of workgroups
    over the 132 SMs) x (tile area) / rate, so small and skinny problems take 64-row or 128-wide tiles that
    give every SM work instead of leaving most of the GPU idle under big tiles (1024^3: 32 workgroups of
    128x256, 128 of 64x128).  64-row tiles only when M <= 64.  Stages: the entry's, at most the K steps
    (at least 2, the warp-specialized loop's minimum).  A producer warpgroup: the entry's flag, or K up to
    its ``ws_short_k``, or up to ``ws_max_k`` on at most ``ws_max_rounds`` rounds of workgroups.  Decode
    shapes (M <= 16) do not come here:
    ``matmul`` keeps the mma.sync decode tiles for them (a 64-row instruction would waste 3/4 of its rows)."""
    tiles = [t for t in _WGMMA_TILES if t.bm == 64] if m <= 64 else _WGMMA_TILES

    def rounds(t: WgmmaTile) -> int:
        return -(-(-(-m // t.bm) * -(-n // t.bn)) // _SMS)

    t = min(tiles, key=lambda t: rounds(t) * t.bm * t.bn / t.rate)
    stages = max(2, min(t.stages, -(-k // 64)))
    subs = {BLOCK_M: t.bm, BLOCK_N: t.bn, BLOCK_K: 64, NUM_STAGES: stages, GROUP_M: 8}
    ws = t.warp_specialize or k <= t.ws_short_k or (k <= t.ws_max_k and rounds(t) <= t.ws_max_rounds)
    # The split epilogue (one bounds test per thread before C's stores) was never slower on an H100: 3
    # rounds, 128x256 persistent 0.68 -> 0.71 of cuBLAS at 8192x8192x1024, 0.63 -> 0.65 at 2048x8192x1024,
    # 0.88 -> 0.89 at 4096^3, equal at 8192^3; warp-specialized tiles equal (benchmarks/results/
    # wgmma_tiles_h100/split_epilogue.log).
    return WgmmaPlan(subs, t.waves, ws, t.persistent, split_epilogue=True)


def wgmma_config(m: int, n: int, k: int) -> tuple[dict, tuple[int, int]]:
    """(subs, waves) of ``wgmma_plan`` (the tile without its schedule flags)."""
    plan = wgmma_plan(m, n, k)
    return plan.subs, plan.waves


_COMPILED: dict = {}
MMA_CHOICES = ("mma_sync", "wgmma")


def _cached(key, build):
    kernel = _COMPILED.get(key)
    if kernel is None:
        kernel = _COMPILED[key] = build()
    return kernel


def output_dtype(a, out_dtype) -> tuple:
    """(torch dtype, wavec dtype) of C for ``matmul(a, b, out_dtype=)``: None or torch.float32 gives f32,
    a's dtype gives the input dtype; anything else is a ``WavecError``."""
    import torch

    out_dtype = torch.float32 if out_dtype is None else out_dtype
    if out_dtype not in (torch.float32, a.dtype):
        raise wc.WavecError(message=f"matmul: out_dtype must be torch.float32 or a's dtype {a.dtype}, got {out_dtype}")
    return out_dtype, f32 if out_dtype == torch.float32 else {torch.float16: wc.f16, torch.bfloat16: wc.bf16}[a.dtype]


def matmul(
    a,
    b,
    *,
    backend: str | None = None,
    mma: str = "mma_sync",
    async_copy: str = "auto",
    warp_specialize: bool | None = None,
    out_dtype=None,
    split: int | str | None = None,
    persistent: bool | None = None,
    config: tuple[dict, tuple[int, int]] | None = None,
    prefetch_fragments: bool = True,
):
    """``a @ b.T`` for torch tensors a [M, K], b [N, K] (f16 or bf16) into a new tensor of ``out_dtype``:
    ``torch.float32`` (None, the default) or a's dtype (as ``torch.matmul`` returns; rounded from the f32
    accumulator).

    ``mma``: "mma_sync" (sm_80+, the default) or "wgmma" (Hopper warpgroup MMA, compiled for sm_90a;
    decode shapes, M <= 16, keep the mma.sync decode tiles).  ``async_copy``: the pipeline's copies
    (``SchedulingConstraint.async_copy``; "auto": TMA for the wgmma tiles, "cp.async" to compare).
    ``warp_specialize``: a TMA producer warpgroup (``SchedulingConstraint.warp_specialize``; wgmma tiles
    only, decode shapes keep mma.sync without it).  ``persistent``: a persistent grid over the output
    tiles (``SchedulingConstraint.persistent``; the TMA wgmma tiles only, decode shapes keep mma.sync
    without it; with ``mma="mma_sync"`` a ``ConstraintError``).  None (the default) for either: the
    choice of ``wgmma_plan`` for wgmma (with ``async_copy="auto"`` and no ``config``), else off.
    ``split``: K slices of the split-K path (mma.sync only; None or 1: no split; ``"auto"``:
    ``splitk_config``'s rule for M <= 16 — opt-in, because on the H100 the rule's splits were 4-50 %
    slower than no split on every benchmark decode shape, ``benchmarks/results/decode_h100``);
    ``config = (subs, waves)`` overrides the tile (benchmarks); ``prefetch_fragments``: ``make_gemm``'s
    (mma.sync tiles; False to compare)."""
    if split not in (None, "auto") and (not isinstance(split, int) or split < 1):
        raise wc.WavecError(message=f"matmul: split must be None, 'auto' or a positive int, got {split!r}")
    # The host path of a repeated call: one dict lookup (a kernel of 1024^3 runs ~10 us).  A config's
    # substitutions key by their symbols, whose hashes sympy caches (printing them is what costs).
    cfg = None if config is None else (tuple(config[0].items()), tuple(config[1]))
    key = (
        a.dtype,
        b.dtype,
        tuple(a.shape),
        tuple(b.shape),
        backend,
        mma,
        async_copy,
        warp_specialize,
        out_dtype,
        split,
        persistent,
        cfg,
        prefetch_fragments,
    )
    run = _DISPATCH.get(key)
    if run is None:
        run = _DISPATCH[key] = _matmul_runner(
            a,
            b,
            backend,
            mma,
            async_copy,
            warp_specialize,
            out_dtype,
            split,
            persistent,
            config,
            bool(prefetch_fragments),
        )
    return run(a, b)


# (dtypes, shapes, options) -> run(a, b): what matmul decided for them.  Deciding costs tens of
# microseconds (sympy symbols printed for the compile key), as much as a whole small GEMM on an H100.
_DISPATCH: dict = {}


def _matmul_runner(
    a, b, backend, mma, async_copy, warp_specialize, out_dtype, split, persistent, config, prefetch: bool = True
):
    """``matmul``'s decision for a's and b's dtypes and shapes: validate, choose the tile and schedule,
    compile (cached), and return ``run(a, b) -> c``."""
    import torch

    dtype = {torch.float16: wc.f16, torch.bfloat16: wc.bf16}.get(a.dtype)
    if dtype is None:
        raise wc.WavecError(message=f"matmul: a must be float16 or bfloat16, got {a.dtype}")
    if mma not in MMA_CHOICES:
        raise wc.WavecError(message=f"matmul: mma must be one of {MMA_CHOICES}, got {mma!r}")
    out_dtype, out = output_dtype(a, out_dtype)  # ``split`` was checked by ``matmul`` before the lookup
    m, n, k = a.shape[0], b.shape[0], a.shape[1]
    target = None
    if mma == "wgmma" and m <= 16:
        mma, warp_specialize, persistent = "mma_sync", False, False  # decode: the mma.sync tiles (wgmma_plan)
    if mma == "wgmma":
        if split not in (None, 1):
            raise wc.WavecError(message="matmul: split-K runs on the mma.sync path only")
        mma_type, target = WGMMA_FOR_DTYPE[dtype.name], "sm_90a"
        plan = wgmma_plan(m, n, k)
        planned = config is None and async_copy == "auto"  # the plan's flags were measured with its tiles on TMA
        warp_specialize = plan.warp_specialize and planned if warp_specialize is None else warp_specialize
        persistent = plan.persistent and planned if persistent is None else persistent
        subs, waves = config or (plan.subs, plan.waves)
        split, split_epilogue = 1, plan.split_epilogue  # the store's form, independent of tile and copies
    else:
        warp_specialize, persistent, split_epilogue = bool(warp_specialize), bool(persistent), False
        mma_type = wc.MMAType.NV_F32_16x8x16_F16 if dtype == wc.f16 else wc.MMAType.NV_F32_16x8x16_BF16
        subs, waves, rule = splitk_config(m, n, k)
        subs, waves = config or (subs, waves)
        split = rule if split == "auto" else split or 1
    sub_key = tuple(sorted((str(s), v) for s, v in subs.items()))
    if split > 1:
        return _splitk_runner(m, n, split, subs, waves, dtype, mma_type, out, out_dtype, backend, async_copy, sub_key)
    prefetch = prefetch and mma == "mma_sync"
    kernel = _cached(
        (
            dtype.name,
            sub_key,
            waves,
            backend,
            mma,
            async_copy,
            warp_specialize,
            out.name,
            persistent,
            split_epilogue,
            prefetch,
        ),
        lambda: wc.compile(
            make_gemm(
                dtype,
                mma_type=mma_type,
                waves=waves,
                async_copy=async_copy,
                warp_specialize=warp_specialize,
                out_dtype=out,
                persistent=persistent,
                split_epilogue=split_epilogue,
                prefetch_fragments=prefetch,
            ),
            subs,
            backend=backend,
            target=target,
        ),
    )
    return output_runner(kernel, out_dtype)


def output_runner(kernel, out_dtype):
    """``run(a, b) -> c``: a new C [M, N] of ``out_dtype`` on a's device, filled by ``kernel(a, b, c)``."""
    import torch

    def run(a, b):
        c = torch.empty(a.shape[0], b.shape[0], device=a.device, dtype=out_dtype)
        kernel(a, b, c)
        return c

    return run


def _splitk_runner(m, n, split, subs, waves, dtype, mma_type, out, out_dtype, backend, async_copy, sub_key):
    """Split-K: ``gemm_splitk`` into f32 partials [S, M, N], then ``splitk_reduce`` into C."""
    import torch

    part_kernel = _cached(
        ("splitk", dtype.name, sub_key, waves, backend, async_copy),
        lambda: wc.compile(
            make_gemm_splitk(dtype, mma_type=mma_type, waves=waves, async_copy=async_copy), subs, backend=backend
        ),
    )
    vec = 4 if (m * n) % 4 == 0 else 2 if (m * n) % 2 == 0 else 1  # rows of the flat [S, M*N] view stay aligned
    reduce_kernel = _cached(
        ("splitk_reduce", out.name, split, vec, backend),
        lambda: wc.compile(make_splitk_reduce(out, vec=vec), {S: split, BLOCK_P: 4 * 32 * vec}, backend=backend),
    )

    def run(a, b):
        c_part = torch.empty(split, m, n, device=a.device, dtype=torch.float32)
        part_kernel(a, b, c_part)
        c = torch.empty(m, n, device=a.device, dtype=out_dtype)
        reduce_kernel(c_part.view(split, m * n), c.view(m * n))
        return c

    return run
