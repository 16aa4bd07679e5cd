"""The GEMM's schedule in one object (``GemmPlan``: tile, waves, instruction kind, split-K's S and the
``wc.SchedulingConstraint`` of the flags; ``matmul`` keys its compile cache by it), every rule that
chooses one for a shape (driven by the SM count of ``tuning/devices.py``) and the tuner's search spaces.
The measurements behind the tables: ``docs/performance.md``, "Why the schedule tables are what they are".
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import wavec as wc

from .devices import Device, as_device

BLOCK_M, BLOCK_N, BLOCK_K = wc.sym.BLOCK_M, wc.sym.BLOCK_N, wc.sym.BLOCK_K
NUM_STAGES, GROUP_M = wc.sym.NUM_STAGES, wc.sym.GROUP_M

MMA_KINDS = ("mma_sync", "wgmma")
MMA_FOR_TARGET = {
    "sm_80": (32, wc.MMAType.NV_F32_16x8x16_F16),
    "sm_90": (32, wc.MMAType.NV_F32_16x8x16_F16),
    "sm_90a": (32, wc.MMAType.NV_WGMMA_F32_64xNx16_F16),  # warpgroup MMA: wave tiles of M are 64k
    "gfx942": (64, wc.MMAType.F32_16x16x16_F16),
}
MMA_SYNC_FOR_DTYPE = {
    "f16": wc.MMAType.NV_F32_16x8x16_F16,
    "bf16": wc.MMAType.NV_F32_16x8x16_BF16,
    "i8": wc.MMAType.NV_I32_16x8x32_I8,
    "f32": wc.MMAType.NV_F32_16x8x8_TF32,  # f32 operands multiplied as tf32 (opt-in: matmul(allow_tf32=True))
}
WGMMA_FOR_DTYPE = {
    "f16": wc.MMAType.NV_WGMMA_F32_64xNx16_F16,
    "bf16": wc.MMAType.NV_WGMMA_F32_64xNx16_BF16,
    "i8": wc.MMAType.NV_WGMMA_I32_64xNx32_I8,
    "f32": wc.MMAType.NV_WGMMA_F32_64xNx8_TF32,
}
MFMA_FOR_DTYPE = {"f16": wc.MMAType.F32_16x16x16_F16, "i8": wc.MMAType.I32_16x16x32_I8}


def schedule(**flags) -> wc.SchedulingConstraint:
    """The GEMM's ``SchedulingConstraint``: stages and GROUP_M stay symbols (bound by a plan's ``subs``),
    ``flags`` set the rest (``warp_specialize=True``, ``async_copy="cp.async"`` ...)."""
    return wc.SchedulingConstraint(num_stages=NUM_STAGES, group_size=GROUP_M, **flags)


def mma_type_for(mma: str, dtype, target: str | None = None) -> tuple[int, wc.MMAType]:
    """(threads per wave, matrix instruction) of an MMA kind for ``dtype`` inputs; on gfx942 the MFMA (the
    f16 one for a dtype without its own: callers that only want the wave size ask with any dtype, and an
    mma of other operands is a ``DTypeError`` naming the type at compile time)."""
    if target == "gfx942":
        return 64, MFMA_FOR_DTYPE.get(dtype.name, MMA_FOR_TARGET["gfx942"][1])
    table = WGMMA_FOR_DTYPE if mma == "wgmma" else MMA_SYNC_FOR_DTYPE
    if dtype.name not in table:
        raise wc.WavecError(message=f"{mma} has no matrix instruction for {dtype.name} operands")
    return 32, table[dtype.name]


@dataclass(frozen=True, slots=True)
class GemmPlan:
    """One GEMM schedule: the workgroup tile, its waves (warpgroups for wgmma), the instruction kind,
    split-K's S (1: none) and the ``SchedulingConstraint`` of the flags.  Hashable: it is the compile key."""

    block_m: int
    block_n: int
    block_k: int
    stages: int
    group_m: int
    waves: tuple[int, int]
    mma: str = "mma_sync"
    schedule: wc.SchedulingConstraint = field(default_factory=lambda: schedule(prefetch_fragments=True))
    split: int = 1

    @property
    def subs(self) -> dict:
        """The symbol bindings ``wc.compile`` takes."""
        values = (self.block_m, self.block_n, self.block_k, self.stages, self.group_m)
        return dict(zip((BLOCK_M, BLOCK_N, BLOCK_K, NUM_STAGES, GROUP_M), values))

    @property
    def config(self) -> tuple[dict, tuple[int, int]]:
        """(subs, waves), the form of ``matmul(config=)`` and the older ``*_config`` functions."""
        return self.subs, self.waves

    @property
    def warp_specialize(self) -> bool:
        return self.schedule.warp_specialize

    @property
    def persistent(self) -> bool:
        return self.schedule.persistent

    @property
    def split_epilogue(self) -> bool:
        return self.schedule.split_epilogue

    def with_tile(self, subs: dict, waves) -> GemmPlan:
        """This plan with the tile of ``(subs, waves)`` (subs keyed by symbols or their names)."""
        by = {str(k): int(v) for k, v in subs.items()}
        return replace(
            self,
            block_m=by["BLOCK_M"],
            block_n=by["BLOCK_N"],
            block_k=by["BLOCK_K"],
            stages=by.get("NUM_STAGES", self.stages),
            group_m=by.get("GROUP_M", self.group_m),
            waves=tuple(waves),
        )

    def with_flags(self, **flags) -> GemmPlan:
        """This plan with schedule flags replaced (``plan.with_flags(persistent=False)``)."""
        return replace(self, schedule=replace(self.schedule, **flags))


def tile_plan(subs: dict, waves, mma: str = "mma_sync", sched: wc.SchedulingConstraint | None = None) -> GemmPlan:
    """A plan from ``(subs, waves)``, its flags ``sched`` (default: ``schedule()``, all off)."""
    return GemmPlan(0, 0, 0, 2, 1, (1, 1), mma, sched or schedule()).with_tile(subs, waves)


DEFAULT_PLAN = GemmPlan(64, 64, 32, 2, 4, (2, 2))
DEFAULT_SUBS = DEFAULT_PLAN.subs


# ----- mma.sync (sm_80+): throughput per tile on the H100, see docs/performance.md ("schedule tables") -----
_TILES = [  # (BLOCK_M, BLOCK_N, waves, relative throughput, workgroups per SM)
    (128, 256, (2, 4), 1.00, 1),
    (256, 128, (4, 2), 0.995, 1),
    (128, 128, (2, 2), 0.94, 2),
    (64, 128, (2, 2), 0.70, 3),
    (64, 64, (2, 2), 0.40, 4),
]
_DECODE_TILES = [(16, 128, (1, 4)), (16, 64, (1, 2))]  # 16x32 single-wave tiles measured slower


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def mma_sync_plan(m: int, n: int, k: int, device: Device | str | None = None) -> GemmPlan:
    """The mma.sync tile for m x n x k: decode (M <= 16) a 16-row tile narrow enough along N for two
    workgroups per SM (long K steps keep B's bytes in flight), else the ``_TILES`` entry of least
    (rounds of workgroups over the SMs) x (work per workgroup) / throughput."""
    sms = as_device(device).sms
    bk = 64 if k % 64 == 0 or k > 256 else 32
    if m <= 16:
        bm, bn, waves = next((t for t in _DECODE_TILES if _ceil(n, t[1]) >= 2 * sms), _DECODE_TILES[-1])
        return GemmPlan(bm, bn, 128 if k >= 1024 else bk, 4, 1, waves)

    def cost(tile) -> float:
        bm, bn, _w, rate, _per_sm = tile
        return _ceil(_ceil(m, bm) * _ceil(n, bn), sms) * bm * bn / rate

    bm, bn, waves, _rate, _per_sm = min(_TILES, key=cost)
    return GemmPlan(bm, bn, bk, 3, 8, waves)


def gemm_config(m: int, n: int, k: int, device: Device | str | None = None) -> tuple[dict, tuple[int, int]]:
    """(subs, waves) of ``mma_sync_plan``."""
    return mma_sync_plan(m, n, k, device).config


# ----- split-K for decode (M <= 16): the rule of docs/performance.md ("Split-K"); opt-in in matmul -----
_MIN_SLICE_STEPS = 4  # K steps per slice: the 4-stage pipeline has something to overlap
_MAX_SPLIT = 16  # partials cost S*M*N*4 bytes written and read again


def choose_split(tiles: int, k_steps: int, device: Device | str | None = None) -> int:
    """S for ``tiles`` workgroup tiles and ``k_steps`` K steps: the least power of two with S * tiles >= 2
    workgroups per SM, each slice >= ``_MIN_SLICE_STEPS`` steps, S <= ``_MAX_SPLIT`` (1 = no split)."""
    target = 2 * as_device(device).sms
    split, most = 1, min(_MAX_SPLIT, k_steps // _MIN_SLICE_STEPS)
    while tiles * split < target and 2 * split <= most:
        split *= 2
    return split


def splitk_config(m: int, n: int, k: int, device: Device | str | None = None) -> tuple[dict, tuple[int, int], int]:
    """(subs, waves, S): ``gemm_config``'s tile; S from ``choose_split`` when M <= 16, else 1."""
    plan = mma_sync_plan(m, n, k, device)
    if m > 16:
        return plan.subs, plan.waves, 1
    return plan.subs, plan.waves, choose_split(_ceil(n, plan.block_n), _ceil(k, plan.block_k), device)


# ----- Hopper (sm_90a) wgmma: warpgroup tiles, 64-row multiples along M spanning the workgroup's N -----
@dataclass(frozen=True, slots=True)
class WgmmaTile:
    """One schedule of the wgmma GEMM: tile, warpgroups (consumers when warp-specialized), stages, the TMA
    producer warpgroup and persistent grid flags, the throughput on a full grid relative to the best, and
    the K thresholds of the producer (``wgmma_plan``)."""

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


WGMMA_WAVES = (2, 1)
WGMMA_SUBS = {BLOCK_M: 128, BLOCK_N: 128, BLOCK_K: 64, NUM_STAGES: 4, GROUP_M: 8}
_WGMMA_TILES = [  # measured on the H100, docs/performance.md ("schedule tables")
    WgmmaTile(128, 256, (2, 1), 4, False, True, 1.00, ws_max_k=4096, ws_max_rounds=8, ws_short_k=1024),
    WgmmaTile(128, 160, (2, 1), 4, False, True, 0.80),
    WgmmaTile(128, 128, (2, 1), 4, True, True, 0.90),
    WgmmaTile(64, 128, (1, 1), 8, True, False, 0.62),
    WgmmaTile(64, 64, (1, 1), 8, True, False, 0.45),
]


def wgmma_plan(m: int, n: int, k: int, device: Device | str | None = None) -> GemmPlan:
    """The wgmma GEMM's schedule for m x n x k: the ``_WGMMA_TILES`` entry of least (rounds of workgroups
    over the SMs) x (tile area) / rate (64-row tiles only when M <= 64); its stages, at most the K steps
    and at least 2 (the warp-specialized loop's minimum); a producer warpgroup when the entry says so, K
    <= ``ws_short_k``, or K <= ``ws_max_k`` on at most ``ws_max_rounds`` rounds; the split epilogue always
    (never slower).  Not for decode (M <= 16): a 64-row instruction would waste 3/4 of its rows."""
    sms = as_device(device, "sm_90a").sms
    tiles = [t for t in _WGMMA_TILES if t.bm == 64] if m <= 64 else _WGMMA_TILES

    def rounds(t: WgmmaTile) -> int:
        return _ceil(_ceil(m, t.bm) * _ceil(n, t.bn), sms)

    t = min(tiles, key=lambda t: rounds(t) * t.bm * t.bn / t.rate)
    ws = t.warp_specialize or k <= t.ws_short_k or (k <= t.ws_max_k and rounds(t) <= t.ws_max_rounds)
    flags = schedule(warp_specialize=ws, persistent=t.persistent, split_epilogue=True)
    return GemmPlan(t.bm, t.bn, 64, max(2, min(t.stages, _ceil(k, 64))), 8, t.waves, "wgmma", flags)


def wgmma_config(m: int, n: int, k: int, device: Device | str | None = None) -> tuple[dict, tuple[int, int]]:
    """(subs, waves) of ``wgmma_plan`` (the tile without its schedule flags)."""
    return wgmma_plan(m, n, k, device).config


# ----- matmul's keyword arguments -> a plan, in one place -----
@dataclass(frozen=True, slots=True)
class GemmRequest:
    """``matmul``'s keyword arguments (``config`` as ``(subs items, waves)``); hashable: with the dtypes and
    shapes it keys ``matmul``'s dispatch."""

    mma: str = "mma_sync"
    async_copy: str = "auto"
    warp_specialize: bool | None = None
    persistent: bool | None = None
    split: int | str | None = None
    config: tuple | None = None
    prefetch_fragments: bool = True
    cluster: tuple[int, int] = (1, 1)

    def __post_init__(self) -> None:
        if self.cluster != (1, 1) and self.mma not in ("wgmma", "auto"):
            raise wc.WavecError(message=f"matmul: cluster={self.cluster} needs mma='wgmma' (TMA multicast, sm_90a)")
        if self.split not in (None, "auto") and (not isinstance(self.split, int) or self.split < 1):
            raise wc.WavecError(message=f"matmul: split must be None, 'auto' or a positive int, got {self.split!r}")
        if self.mma != "auto":  # matmul resolves "auto" for the tensors' device before planning
            check_mma(self.mma, "matmul: ")


def plan_matmul(m: int, n: int, k: int, req: GemmRequest, device: Device | str | None = None) -> GemmPlan:
    """``matmul``'s plan for m x n x k: the rule's tile (or ``req.config``'s) and flags.  wgmma takes
    ``wgmma_plan``'s producer and persistent grid when neither is given, only with its own tile on "auto"
    copies (as measured) and a K of 16-byte rows (TMA); decode (M <= 16) keeps the mma.sync decode tiles.
    Split-K (mma.sync only): ``req.split`` S, or ``"auto"`` for ``splitk_config``'s rule."""
    explicit = req.config is not None
    if req.mma == "wgmma" and m > 16:
        if req.split not in (None, 1):
            raise wc.WavecError(message="matmul: split-K runs on the mma.sync path only")
        base = wgmma_plan(m, n, k, device)
        planned = not explicit and req.async_copy == "auto" and k % 8 == 0  # TMA needs 16-byte rows of K
        ws = base.warp_specialize and planned if req.warp_specialize is None else req.warp_specialize
        pers = base.persistent and planned if req.persistent is None else req.persistent
        pers = pers and (req.cluster == (1, 1) or req.persistent is True)  # clusters: no persistent grid yet
        flags = schedule(
            async_copy=req.async_copy, warp_specialize=ws, persistent=pers, split_epilogue=True, cluster=req.cluster
        )
        plan = replace(base, schedule=flags)
        if req.cluster == (1, 2):  # the grouped order linearises the grid along x: clusters along N need it off
            plan = replace(plan, group_m=1)
    else:
        subs, waves, rule = splitk_config(m, n, k, device)
        split = rule if req.split == "auto" else int(req.split or 1)  # __post_init__: "auto" or an int
        plain = split > 1 or req.mma == "wgmma"  # split-K, wgmma's decode: no producer, no persistent grid
        flags = schedule(
            async_copy=req.async_copy,
            warp_specialize=bool(req.warp_specialize) and not plain,
            persistent=bool(req.persistent) and not plain,
            prefetch_fragments=bool(req.prefetch_fragments) and split == 1,
        )
        plan = replace(tile_plan(subs, waves, "mma_sync", flags), split=split)
    return plan.with_tile(dict(req.config[0]), req.config[1]) if req.config is not None else plan


# ----- the tuner's search spaces -----
DEFAULT_SPACE = {  # 324 tuples; 248 pass the legality filter on sm_90, ptxas rejects the spilling ones
    "BLOCK_M": [16, 64, 128],
    "BLOCK_N": [64, 128, 256],
    "BLOCK_K": [32, 64, 128],
    "NUM_STAGES": [2, 3, 4],
    "GROUP_M": [8],
    "waves": [(1, 2), (1, 4), (2, 2), (2, 4)],
}
# Hopper wgmma (sm_90a): ``waves`` count warpgroups along M (BLOCK_M / waves[0] rows each, a multiple of
# 64), each spanning BLOCK_N.  108 tuples; ``legal`` drops M wave tiles not a multiple of 64, operand tiles
# that do not split into core matrices among the threads and stages over the 227 KiB of shared memory
# (256x256x64 x 4 stages = 256 KiB), ptxas the spilling ones.
WGMMA_SPACE = {
    "BLOCK_M": [64, 128, 256],
    "BLOCK_N": [64, 128, 192, 256],
    "BLOCK_K": [64],
    "NUM_STAGES": [3, 4, 5],
    "GROUP_M": [8],
    "waves": [(1, 1), (2, 1), (4, 1)],
}


def check_mma(mma: str, who: str = "") -> None:
    if mma not in MMA_KINDS:
        raise wc.WavecError(message=f"{who}mma must be one of {MMA_KINDS}, got {mma!r}")


def space_for(mma: str = "mma_sync") -> dict:
    """The default search space of an MMA kind."""
    check_mma(mma)
    return dict(WGMMA_SPACE if mma == "wgmma" else DEFAULT_SPACE)


def heuristic_plan(m: int, n: int, k: int, mma: str = "mma_sync", device: Device | str | None = None) -> GemmPlan:
    """The rule's plan of an MMA kind (``wgmma_plan`` or ``mma_sync_plan``)."""
    check_mma(mma)
    return (wgmma_plan if mma == "wgmma" else mma_sync_plan)(m, n, k, device)
