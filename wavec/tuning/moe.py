"""Routing-aware dispatch of the fused MoE layer (RaMP; issue 21 item 3, DESIGN §14): model shapes, the
performance-region rules, the configuration space, the wave cost model over the CTA grid an expert
histogram implies, its per-configuration NNLS fit and the fitted table (JSON in the tuning cache).

Requires: numpy (fitting, tabulating); no torch and no GPU (the GPU side of the choice is
``kernels/moe_dispatch.py``, the profiling ``tuning/moe_profile.py``).

Guarantees: for a histogram ``h`` (tokens per local expert) and a configuration of token block ``BM``,
up-projection N tile ``BN`` over I and down-projection N tile ``BND`` over H::

    blocks    = sum_e ceil(h_e / BM)
    CTAs_up   = blocks * ceil(I / BN)          CTAs_down = blocks * ceil(H / BND) * split_k
    t = a + sum over g in (up, down) of  b_g * waves_g + c_g * CTAs_g + d_g * phi_g
    waves_g = ceil(CTAs_g / slots_g)     phi_g = rounds(CTAs_g, slots_g, knee)  (cost_model.rounds)

``slots_g`` = SMs x resident workgroups per SM of that GEMM's compiled kernel; ``phi`` is the existing
cost model's under-filled-wave knee (each wave costs max(knee, its fill) of a full one; knee 1: phi =
waves).  Seven coefficients >= 0 per configuration from ~25 profiled points by ``cost_model.solve`` (the
same NNLS, relative residuals), the knee chosen per configuration from ``cost_model.KNEES``.  A
configuration's cost depends on the histogram only through ``blocks`` at its BM, so ``MoeTable.keys``
tabulates, per BM and block count, the least cost over that BM's configurations (packed with its index):
the GPU choice is four block counts, a gather and a min.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import TuningError
from ..kernels.fused_moe import DEEP_K, MoeConfig, split_region, static_config
from . import cost_model as cm

TOKENS_MAX = 4096  # the largest batch the pool serves (compute-density rule)
L2_USABLE = 0.5  # share of L2 one expert's weights may fill before L2 grouping (GROUP_M) applies
SHALLOW_K = 1024  # below this, fewer stages pay even when the other GEMM's K is deep
SPLITS = (2, 3, 4)  # split-K slices of the down-projection (``split_candidates``)
SPLIT_BLOCK_M = 32  # split-K candidates only for decode token blocks up to this
BLOCK_MS = (16, 32, 64, 128)
BLOCK_NS = (32, 64, 128)
BLOCK_N_DOWNS = (64, 128, 256)
BLOCK_KS = (32, 64, 128)
SWAP_BLOCK_MS = (8, 16, 32)  # swap-AB candidates (``swap_candidates``)
SWAP_BLOCK_NS = (64, 128)
SWAP_BLOCK_N_DOWNS = (64, 128, 256)
BLOCK_K_NARROW = 16  # for tiles whose accumulators take half the registers or more
GROUP_M_L2 = 8
THREADS = 128  # 4 waves of 32 (both GEMMs)
MAX_ACC = 128  # f32 accumulator registers per thread beyond which the GEMMs spill (measured: 128 at BM 128)
TERMS = ("launch", "up_waves", "up_ctas", "up_tail", "down_waves", "down_ctas", "down_tail")
ID_BITS = 12  # the packed key: cost in ns << ID_BITS | configuration index
MAX_POOL = 1 << ID_BITS
FORMAT = 1
CACHE_KERNEL = "wavec.kernels.fused_moe.routing_aware"


@dataclass(frozen=True, slots=True)
class MoeShape:
    """A layer's experts, top-k, hidden size H, intermediate size I (per rank) and dtype."""

    experts: int
    top_k: int
    hidden: int
    inter: int
    dtype: str = "bf16"
    name: str = ""

    def key(self) -> str:
        return f"E={self.experts},k={self.top_k},H={self.hidden},I={self.inter},{self.dtype}"


# benchmarks/data/moe_shapes.csv (a unit test checks they agree); the CLI's --model names
MODELS = {
    "OLMoE-1B-7B": MoeShape(64, 8, 2048, 1024, name="OLMoE-1B-7B"),
    "Qwen3-30B-A3B": MoeShape(128, 8, 2048, 768, name="Qwen3-30B-A3B"),
    "Mixtral-8x7B-TP1": MoeShape(8, 2, 4096, 14336, name="Mixtral-8x7B-TP1"),
    "Mixtral-8x7B-TP2": MoeShape(8, 2, 4096, 7168, name="Mixtral-8x7B-TP2"),
    "DeepSeek-V2-Lite": MoeShape(64, 6, 2048, 1408, name="DeepSeek-V2-Lite"),
    "DeepSeek-V3-TP8": MoeShape(256, 8, 7168, 256, name="DeepSeek-V3-TP8"),
}


def model(name: str) -> MoeShape:
    if name not in MODELS:
        raise TuningError(message=f"unknown MoE model {name!r}; known: {', '.join(MODELS)}")
    return MODELS[name]


# ----------------------------------------------------------------------------- region rules


@dataclass(frozen=True, slots=True)
class Regions:
    """Which knobs a model shape needs on a device (the paper's performance regions)."""

    density: float  # tokens per expert at TOKENS_MAX, balanced routing
    block_ms: tuple[int, ...]
    expert_bytes: int  # the larger GEMM's weights of one expert
    usable_l2: int
    group_ms: tuple[int, ...]
    decode_up_ctas: int  # T = 1 grids at BN 64 / BND 128
    decode_down_ctas: int
    block_ns: tuple[int, ...]
    block_n_downs: tuple[int, ...]
    k_depths: tuple[int, int]  # H (up-projection's K) and I (down-projection's)
    block_ks: tuple[int, ...]
    stages: tuple[int, ...]
    split_k: bool  # the rule says split-K applies to the down-projection (``split_candidates``)
    sms: int

    def lines(self) -> list[str]:
        mib = 1 << 20
        return [
            f"compute density: {self.density:.0f} tokens/expert at T={TOKENS_MAX} -> BLOCK_M {list(self.block_ms)}",
            f"L2 pressure: one expert's weights {self.expert_bytes / mib:.1f} MiB vs usable L2 "
            f"{self.usable_l2 / mib:.0f} MiB -> GROUP_M {list(self.group_ms)}",
            f"wave utilisation: decode grids up {self.decode_up_ctas} / down {self.decode_down_ctas} CTAs on "
            f"{self.sms} SMs -> BLOCK_N {list(self.block_ns)}, BLOCK_N_DOWN {list(self.block_n_downs)}",
            f"K depth: H {self.k_depths[0]}, I {self.k_depths[1]} -> BLOCK_K {list(self.block_ks)}, stages "
            f"{list(self.stages)}; split-K (down): "
            + ("applies (tune moe --split-k adds candidates; not measured)" if self.split_k else "does not apply"),
        ]


def regions(shape: MoeShape, sms: int, l2_bytes: int) -> Regions:
    """The region rules: BLOCK_M up to what the densest batch fills; GROUP_M only when one expert's
    weights exceed the usable L2; narrow N tiles only when a decode grid is below one wave; BLOCK_K and
    stages from the K depths (3-4 stages for a deep K, 2-3 for shallow ones, all three for one of each;
    never more stages than the shallower K has steps); split-K for a deep I on a decode down-projection
    grid far below one wave."""
    density = TOKENS_MAX * shape.top_k / shape.experts
    fill = next((b for b in BLOCK_MS if density <= b), BLOCK_MS[-1])
    block_ms = tuple(b for b in BLOCK_MS if b <= fill)
    expert_bytes = 2 * shape.inter * shape.hidden * 2
    usable = int(L2_USABLE * l2_bytes)
    group_ms = (1, GROUP_M_L2) if expert_bytes > usable else (1,)
    active = min(shape.experts, shape.top_k)
    up_ctas, down_ctas = active * -(-shape.inter // 64), active * -(-shape.hidden // 128)
    block_ns = BLOCK_NS if up_ctas < sms else BLOCK_NS[1:]
    block_n_downs = BLOCK_N_DOWNS if down_ctas < sms else BLOCK_N_DOWNS[1:]
    shallow, deep = min(shape.hidden, shape.inter), max(shape.hidden, shape.inter)
    block_ks = tuple(k for k in BLOCK_KS if shallow // k >= 2) or (BLOCK_KS[0],)
    # both GEMMs share the stages: a deep and a very shallow K (DeepSeek-V3 TP8: 7168 and 256) keep all three
    stages = ((2, 3, 4) if shallow < SHALLOW_K else (3, 4)) if deep >= DEEP_K else (2, 3)
    split_k = split_region(active, shape.hidden, shape.inter, sms)
    return Regions(
        density, block_ms, expert_bytes, usable, group_ms, up_ctas, down_ctas, block_ns, block_n_downs,
        (shape.hidden, shape.inter), block_ks, stages, split_k, sms,
    )  # fmt: skip


def candidates(shape: MoeShape, reg: Regions) -> list[MoeConfig]:
    """The configuration space the rules allow, before compiling: accumulators within ``MAX_ACC`` registers
    per thread (two for the up-projection), stages no more than the shallower K's steps, GROUP_M > 1 only
    with 64-row blocks and up (several token blocks per expert); BLOCK_K 16 added for tiles whose
    accumulators take >= 64 registers; the static rule's configurations always (the table's static choice
    then covers today's rule)."""
    shallow = min(shape.hidden, shape.inter)
    out = []
    for bm in reg.block_ms:
        for bn in reg.block_ns:
            for bnd in reg.block_n_downs:
                acc = max(2 * bm * bn, bm * bnd) // THREADS
                if acc > MAX_ACC:
                    continue
                # register pressure: with the accumulators at half the registers or more, K steps of 32 and
                # up spill (ptxas, sm_90a: 64 x 128 up-projection tiles at BLOCK_K 64), so 16 is kept too
                for bk in (BLOCK_K_NARROW,) * (acc >= MAX_ACC // 2) + reg.block_ks:
                    for st in reg.stages:
                        if st > shallow // bk:
                            continue
                        for g in reg.group_ms:
                            if g == 1 or bm >= 64:
                                out.append(MoeConfig(bm, bn, bnd, bk, st, g))
    return out + sorted(static_configs(shape) - set(out), key=lambda c: c.label())


def swap_candidates(shape: MoeShape, reg: Regions) -> list[MoeConfig]:
    """The swap-AB configurations (``MoeConfig(swap=True)``, sm_90a wgmma with the token block on the N
    axis) for the pool when asked for (``tune moe --swap``; not in the default pool: the fitted dispatch
    is measured on the mma.sync kernels only): token blocks 8, 16 and 32 up to the densest the rules
    allow, N tiles of 64 and 128 (up) and 64 to 256 (down), the rules' K steps and stages, GROUP_M 1;
    token tiles of at least ``SWAP_MIN_TOKEN_TILE`` elements and accumulators within ``MAX_ACC``."""
    from ..kernels.fused_moe import SWAP_MIN_TOKEN_TILE
    from ..kernels.fused_moe_kernels import SWAP_THREADS

    shallow = min(shape.hidden, shape.inter)
    out = []
    for bm in (b for b in SWAP_BLOCK_MS if b <= max(reg.block_ms)):
        for bn in SWAP_BLOCK_NS:
            for bnd in SWAP_BLOCK_N_DOWNS:
                for bk in reg.block_ks:
                    cfg = MoeConfig(bm, bn, bnd, bk, reg.stages[0], 1, True)
                    up, down = cfg.swap_waves(False) or 1, cfg.swap_waves(True) or 1
                    acc = max(2 * bm * bn // up, bm * bnd // down) // SWAP_THREADS
                    if bm * bk < SWAP_MIN_TOKEN_TILE or acc > MAX_ACC:
                        continue
                    out += [MoeConfig(bm, bn, bnd, bk, st, 1, True) for st in reg.stages if st <= shallow // bk]
    return out


def wgmma_candidates(shape: MoeShape, reg: Regions) -> list[MoeConfig]:
    """The large token blocks on wgmma (``MoeConfig(wgmma=True)``, sm_90a, the token block on the M axis)
    for the pool when asked for (``tune moe --wgmma``; the static rule takes them on sm_90a from 32 tokens
    per expert): token blocks 64 and 128 up to the densest the rules allow, N tiles of 64 and 128 (up) and
    64 to 256 (down), K steps of 32 and 64 of the rules', stages 3 and 4 within the shallower K's steps, the
    rules' GROUP_M; every warpgroup's accumulators (64 tokens: ``bn`` registers up, ``bnd / 2`` down) within
    ``MAX_ACC``."""
    from ..kernels.fused_moe import WGMMA_BLOCK_MS, WGMMA_BLOCK_N_DOWNS, WGMMA_BLOCK_NS

    shallow = min(shape.hidden, shape.inter)
    out = []
    for bm in (b for b in WGMMA_BLOCK_MS if b <= max(reg.block_ms)):
        for bn in WGMMA_BLOCK_NS:
            for bnd in WGMMA_BLOCK_N_DOWNS:
                if max(bn, bnd // 2) > MAX_ACC:
                    continue
                for bk in (k for k in reg.block_ks if k <= 64):
                    for st in (s for s in (3, 4) if s <= shallow // bk):
                        out += [MoeConfig(bm, bn, bnd, bk, st, g, wgmma=True) for g in reg.group_ms]
    return out


def split_candidates(shape: MoeShape, reg: Regions, base: Sequence[MoeConfig]) -> list[MoeConfig]:
    """Split-K variants of ``base`` for the pool when asked for (``tune moe --split-k``; not in the default
    pool: the fitted dispatch is measured on unsplit kernels only), where the region rule applies (a deep
    I on a decode down-projection grid far below one wave; none elsewhere): for each configuration of a
    decode token block (BLOCK_M <= ``SPLIT_BLOCK_M``), each S of ``SPLITS`` whose T = 1 down grid (the
    top-k experts' blocks x ceil(H / BLOCK_N_DOWN) x S) still fits in one wave, at most one slice per K
    step of I."""
    if not reg.split_k:
        return []
    active = min(shape.experts, shape.top_k)
    out = []
    for c in base:
        if c.block_m > SPLIT_BLOCK_M or c.split_k != 1:
            continue
        ctas, steps = active * -(-shape.hidden // c.block_n_down), -(-shape.inter // c.block_k)
        out += [replace(c, split_k=sk) for sk in SPLITS if ctas * sk <= reg.sms and sk <= steps]
    return out


def shared_bytes(cfg: MoeConfig, dtype_bytes: int = 2) -> tuple[int, int]:
    """(up, down) shared memory of the staged operand tiles: stages x (A rows + B rows) x BLOCK_K."""
    up = cfg.stages * (cfg.block_m + 2 * cfg.block_n) * cfg.block_k * dtype_bytes
    return up, cfg.stages * (cfg.block_m + cfg.block_n_down) * cfg.block_k * dtype_bytes


def trim(pool: Sequence[Any], n: int | None, keep: Callable[[Any], bool] = lambda _c: False) -> list:
    """At most ``n`` entries of ``pool``: those ``keep`` marks (the static choices), then an even spread of
    the rest in pool order (every BLOCK_M stays represented)."""
    if n is None or len(pool) <= n:
        return list(pool)
    kept = [c for c in pool if keep(c)][:n]
    rest = [c for c in pool if not keep(c)]
    want = n - len(kept)
    spread = [rest[int(i * len(rest) / want)] for i in range(want)] if want > 0 else []
    chosen = {id(c) for c in kept + spread}
    return [c for c in pool if id(c) in chosen]


def static_configs(shape: MoeShape) -> set[MoeConfig]:
    """The static rule's configurations over the batch sizes the pool serves (always kept in a pool)."""
    return {static_config(t, shape.top_k, shape.experts) for t in (1, 16, 64, 256, 1024, TOKENS_MAX)}


# ----------------------------------------------------------------------------- the cost model


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """A legal configuration and the resident workgroups (slots, all SMs) of its two compiled GEMMs."""

    cfg: MoeConfig
    slots_up: int
    slots_down: int


def block_count(hist: Sequence[int], block_m: int) -> int:
    return sum(-(-int(h) // block_m) for h in hist)


def _rounds(ctas, slots, knee: float):
    """``cost_model.rounds`` over numpy arrays."""
    import numpy as np

    full, rem = np.divmod(ctas, slots)
    frac = rem / slots
    return full * max(knee, 1.0) + np.where(rem > 0, np.maximum(knee, frac), 0.0)


def terms(pc: PoolConfig, shape: MoeShape, blocks, knee: float):
    """The seven regressors (``TERMS``) for block counts ``blocks`` (a number or a numpy array): [..., 7]."""
    import numpy as np

    b = np.asarray(blocks, dtype=np.int64)
    cols: list[Any] = [np.ones(b.shape)]
    c = pc.cfg
    for tiles, slots in (
        (-(-shape.inter // c.block_n), pc.slots_up),
        (-(-shape.hidden // c.block_n_down) * c.split_k, pc.slots_down),
    ):
        ctas = b * tiles
        cols += [-(-ctas // slots), ctas, _rounds(ctas, slots, knee)]
    return np.stack([np.asarray(x, dtype=float) for x in cols], axis=-1)


def fit_config(pc: PoolConfig, shape: MoeShape, samples, knees=cm.KNEES) -> tuple[float, tuple[float, ...], float]:
    """(knee, 7 coefficients >= 0, relative RMS residual) from ``samples = [(blocks at pc's BM, seconds)]``:
    per knee ``cost_model.solve``; the largest knee within ``KNEE_TOL`` of the least residual; then one
    refit without points missed by more than ``cost_model.OUTLIER`` (at most ``MAX_DROP`` of them)."""

    def best(pts):
        sols = []
        for knee in knees:
            rows = [(terms(pc, shape, n, knee), t) for n, t in pts]
            coef, res = cm.solve(rows)
            sols.append((knee, coef, res))
        least = min(r for _k, _c, r in sols)
        return max((s for s in sols if s[2] <= cm.KNEE_TOL * least), key=lambda s: s[0])

    pts = list(samples)
    if not pts:
        raise TuningError(message=f"no timings to fit {pc.cfg.label()}")
    knee, coef, res = best(pts)
    miss = [abs(float(terms(pc, shape, n, knee) @ coef) - t) / t for n, t in pts]
    worst = sorted(range(len(pts)), key=lambda i: -miss[i])[: max(1, int(cm.MAX_DROP * len(pts)))]
    drop = {i for i in worst if miss[i] > cm.OUTLIER}
    if drop and len(pts) - len(drop) >= len(TERMS):
        pts = [p for i, p in enumerate(pts) if i not in drop]
        knee, coef, res = best(pts)
    return knee, tuple(float(c) for c in coef), math.sqrt(res / len(pts))


def balanced(tokens: int, top_k: int, experts: int) -> list[int]:
    """The histogram of perfectly balanced routing: T*k ids spread as evenly as the experts allow."""
    q, r = divmod(tokens * top_k, experts)
    return [q + 1] * r + [q] * (experts - r)


@dataclass
class MoeTable:
    """The fitted pool of one model shape on one device: configurations, knees, coefficients and how they
    were measured.  ``predict`` is the literal model; ``keys`` its per-block-count tabulation."""

    shape: MoeShape
    device: str
    sms: int
    pool: list[PoolConfig]
    knees: list[float]
    coef: list[tuple[float, ...]]
    meta: dict = field(default_factory=dict)
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not 0 < len(self.pool) <= MAX_POOL or not len(self.pool) == len(self.knees) == len(self.coef):
            raise TuningError(
                message=f"a MoE table needs 1..{MAX_POOL} configurations with one knee and coefficients each"
            )

    def key(self) -> str:
        if "key" not in self._memo:  # on every routing-aware call: formatted once
            self._memo["key"] = table_key(self.shape, self.device)
        return self._memo["key"]

    def predict(self, hist: Sequence[int]):
        """Predicted seconds of every configuration for the histogram ``hist`` (numpy [configs])."""
        import numpy as np

        blocks = {bm: block_count(hist, bm) for bm in {p.cfg.block_m for p in self.pool}}
        return np.array(
            [
                float(terms(p, self.shape, blocks[p.cfg.block_m], k) @ np.array(c))
                for p, k, c in zip(self.pool, self.knees, self.coef)
            ]
        )

    def choose(self, hist: Sequence[int]) -> int:
        return int(self.predict(hist).argmin())

    def static_index(self, tokens: int) -> int:
        """The configuration with the least predicted time at balanced routing for ``tokens`` (the static
        choice every production system makes: the batch size alone decides); memoised per T."""
        key = ("static", tokens)
        if key not in self._memo:
            self._memo[key] = self.choose(balanced(tokens, self.shape.top_k, self.shape.experts))
        return self._memo[key]

    def block_ms(self) -> tuple[int, ...]:
        return tuple(sorted({p.cfg.block_m for p in self.pool}))

    def keys(self, most_blocks: int):
        """int64 [len(block_ms), most_blocks + 1]: per BM and block count n, ``ns(cost) << ID_BITS | index``
        of the cheapest configuration of that BM (int64 max where none); memoised per size."""
        if ("keys", most_blocks) not in self._memo:
            self._memo[("keys", most_blocks)] = self._tabulate(most_blocks)
        return self._memo[("keys", most_blocks)]

    def _tabulate(self, most_blocks: int):
        import numpy as np

        bms = self.block_ms()
        out = np.full((len(bms), most_blocks + 1), np.iinfo(np.int64).max, dtype=np.int64)
        n = np.arange(most_blocks + 1)
        for i, (p, knee, c) in enumerate(zip(self.pool, self.knees, self.coef)):
            ns = np.rint(terms(p, self.shape, n, knee) @ np.array(c) * 1e9).astype(np.int64)
            packed = (np.minimum(ns, (1 << 50) - 1) << ID_BITS) | i
            row = bms.index(p.cfg.block_m)
            out[row] = np.minimum(out[row], packed)
        return out

    def to_json(self) -> dict:
        return {
            "format": FORMAT, "shape": vars_of(self.shape), "device": self.device, "sms": self.sms,
            "pool": [{"config": vars_of(p.cfg), "slots_up": p.slots_up, "slots_down": p.slots_down} for p in self.pool],
            "knees": list(self.knees), "coef": [list(c) for c in self.coef], "terms": list(TERMS), "meta": self.meta,
        }  # fmt: skip

    @classmethod
    def from_json(cls, d: dict) -> MoeTable:
        if d.get("format") != FORMAT or d.get("terms") != list(TERMS):
            raise TuningError(message=f"MoE table of another format ({d.get('format')}, terms {d.get('terms')})")
        pool = [PoolConfig(MoeConfig(**p["config"]), p["slots_up"], p["slots_down"]) for p in d["pool"]]
        coef = [tuple(float(x) for x in c) for c in d["coef"]]
        return cls(MoeShape(**d["shape"]), d["device"], d["sms"], pool, list(d["knees"]), coef, d.get("meta", {}))


def vars_of(obj: Any) -> dict:
    return {name: getattr(obj, name) for name in obj.__slots__}


def unpack(key: int) -> int:
    return int(key) & (MAX_POOL - 1)


def table_key(shape: MoeShape, device: str) -> str:
    return f"{shape.key()} | {device}"


def save(table: MoeTable, directory=None) -> str:
    """Merge ``table`` into the tuning cache file of the routing-aware dispatch; returns the file's path."""
    from .cache import TuningCache

    cache = TuningCache(CACHE_KERNEL, directory)
    cache.put_many({table.key(): json.loads(json.dumps(table.to_json()))})
    return str(cache.path)


def load(shape: MoeShape, device: str, directory=None) -> MoeTable | None:
    from .cache import TuningCache

    entry = TuningCache(CACHE_KERNEL, directory).get(table_key(shape, device))
    return MoeTable.from_json(entry) if entry is not None else None
