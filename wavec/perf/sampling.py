"""The rows of the performance-model dataset: seeded LLM-like launch shapes per kernel family and, per
shape, the configurations to time (``benchmarks/perf_dataset.py`` times them on a GPU).

Requires: the tuning module's GEMM search spaces and heuristics (``tuning/plan.py``), the library's
attention, row and MoE configuration rules.

Guarantees: :func:`plan_rows` returns the same rows for the same seed on any machine (so the H100 and
H200 datasets time the same launches, and the CPU rebuilds their features): groups of :class:`Case` that
share one launch shape, each group marked ``train`` or ``test`` (a held-out split by shape, not by row,
``TEST_FRACTION`` of each family's shapes).  GEMM groups hold the heuristic's plan (``plan_matmul``, as
``matmul`` runs it) and configurations of the tuner's space (``DEFAULT_SPACE``/``WGMMA_SPACE``) serving
the shape's M; attention the library's tile and another of its table; rows, elementwise and MoE the
library's configuration (MoE: also another token block); MoE routings are uniform or Zipf-skewed.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from .cases import Case, gemm_config
from .gpus import GPUSpec

__all__ = ["Group", "plan_rows", "TEST_FRACTION", "is_library"]

TEST_FRACTION = 0.2
LLM_DIMS = (512, 768, 1024, 1536, 2048, 2560, 3072, 3584, 4096, 5120, 6144, 7168, 8192, 11008, 13824, 14336, 18944)
MAX_GEMM_FLOP = 2 * 2**36  # ~0.15 ms at the H100's dense rate: keeps one row's timing short


@dataclass(frozen=True)
class Group:
    """Cases timed on the same inputs (one launch shape); ``split`` is ``train`` or ``test``."""

    family: str
    shape: str
    split: str
    cases: tuple[Case, ...]


def _m(rng: random.Random, lo: int, hi: int) -> int:
    """A token count: log-uniform in [lo, hi], half the time a power of two."""
    x = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    return max(lo, min(hi, 2 ** round(math.log2(x)) if rng.random() < 0.5 else round(x)))


def _space_configs(mma: str, count: int, seed: int) -> list:
    """``count`` configurations of the tuner's space (seeded), as plans with the tuner's flags."""
    from ..tuning.plan import schedule, space_for, tile_plan

    space = space_for(mma)
    keys = [k for k in space if k != "waves"]
    combos = [dict(zip(keys, v)) for v in _product([space[k] for k in keys])]
    every = [
        (c, w) for c in combos for w in space["waves"] if c["BLOCK_M"] % (w[0] * (64 if mma == "wgmma" else 16)) == 0
    ]
    picked = random.Random(seed).sample(every, min(count, len(every)))
    return [tile_plan(c, w, mma, schedule(prefetch_fragments=True)) for c, w in picked]


def _product(lists: list[list]) -> list[tuple]:
    out: list[tuple] = [()]
    for values in lists:
        out = [t + (v,) for t in out for v in values]
    return out


def _gemm_groups(mma: str, count: int, per_shape: int, rng: random.Random, gpu: GPUSpec) -> list[Group]:
    from ..tuning.gemm import m_limits
    from ..tuning.plan import GemmRequest, plan_matmul

    family = f"gemm_{mma}"
    space = _space_configs(mma, 28 if mma == "mma_sync" else 24, rng.randrange(1 << 30))
    groups: list[Group] = []
    while len(groups) < count:
        m = _m(rng, 1 if mma == "mma_sync" else 17, 16384)
        n, k = rng.choice(LLM_DIMS), rng.choice(LLM_DIMS)
        if rng.random() < 0.15:  # ragged sizes: masked edge tiles
            n, k = n + 8 * rng.randrange(1, 16), k + 8 * rng.randrange(1, 16)
        if 2 * m * n * k > MAX_GEMM_FLOP:
            continue
        dtype = "f16" if rng.random() < 0.7 else "bf16"
        heur = plan_matmul(m, n, k, GemmRequest(mma=mma, split=1), gpu.name)
        serving = [p for p in space if m_limits(p.block_m)[0] <= m <= m_limits(p.block_m)[1]]
        extra = rng.sample(serving, min(len(serving), per_shape - 1 if dtype == "f16" else 2))
        configs = list(dict.fromkeys(gemm_config(p) for p in [heur, *extra]))
        shape = f"{m}x{n}x{k}"
        cases = tuple(Case(family, "gemm", dtype, c, shape) for c in configs)
        groups.append(Group(family, shape, "", cases))
    return groups


def _attention_groups(count: int, rng: random.Random) -> list[Group]:
    from ..kernels import attention as A

    groups: list[Group] = []
    while len(groups) < count:
        b, h = rng.choice((1, 2, 4, 8)), rng.choice((8, 16, 32, 40))
        kvh = rng.choice([x for x in (h, h // 4, h // 8) if x >= 1 and h % x == 0])
        s = rng.choice((128, 256, 512, 1000, 1024, 2048, 3000, 4096, 8192))
        d = rng.choice((64, 128))
        if b * h * s * s * d > 2**37:
            continue
        mma, causal = rng.choice(("mma_sync", "wgmma")), rng.random() < 0.5
        dtype = "f16" if rng.random() < 0.75 else "bf16"
        subs, waves = A.attention_config(d, s, None, mma, causal)
        heur = (int(subs[A.BLOCK_M]), int(subs[A.BLOCK_N]), waves, int(subs[A.NUM_STAGES]))
        table = (A.WGMMA_CONFIGS if mma == "wgmma" else A.CONFIGS)[d]
        other = rng.choice(table)
        alt = (*other[:3], other[3] if len(other) > 3 else 2)
        configs = [heur] if dtype == "bf16" else list(dict.fromkeys([heur, alt]))
        shape = f"{b}x{h}x{kvh}x{s}x{d}"
        cases = tuple(
            Case(
                "attention",
                "attention",
                dtype,
                f"bm={c[0]};bn={c[1]};w={c[2]};st={c[3]};mma={mma};causal={int(causal)}",
                shape,
            )
            for c in configs
        )
        groups.append(Group("attention", shape + f"/{mma}/{int(causal)}", "", cases))
    return groups


def _row_groups(count: int, rng: random.Random) -> list[Group]:
    import wavec as wc

    from ..kernels import rows as R

    groups: list[Group] = []
    while len(groups) < count:
        kind = rng.choice(R.KINDS)
        m = _m(rng, 1, 16384)
        n = rng.choice((*LLM_DIMS, 1000, 3000, 32000)) + (rng.randrange(1, 64) if rng.random() < 0.15 else 0)
        if m * n > 2**27:
            continue
        dtype = rng.choice(("f16", "bf16"))
        block_n, loop, vec, waves = R.config_for(getattr(wc, dtype), n, kind)
        config = f"bn={block_n};loop={int(loop)};vec={vec};wpr={waves}"
        case = Case("rows", kind, dtype, config, f"{m}x{n}")
        groups.append(Group("rows", f"{kind}/{m}x{n}", "", (case,)))
    return groups


def _elementwise_groups(count: int, rng: random.Random) -> list[Group]:
    import wavec as wc

    from ..kernels import elementwise as E

    groups: list[Group] = []
    while len(groups) < count:
        kind = rng.choice(("copy", "silu_and_mul"))
        m = _m(rng, 1, 16384)
        n = rng.choice((1408, 2816, 5632, 11008, 13824, 14336, 18944) if kind == "silu_and_mul" else LLM_DIMS)
        if m * n > 2**27:
            continue
        dtype = rng.choice(("f16", "bf16"))
        subs, vec = E.rowwise_config(getattr(wc, dtype), n)
        config = f"bm={subs[E.BLOCK_M]};bn={subs[E.BLOCK_N]};vec={vec}"
        groups.append(
            Group("elementwise", f"{kind}/{m}x{n}", "", (Case("elementwise", kind, dtype, config, f"{m}x{n}"),))
        )
    return groups


MAX_MOE_WORK = 2**35  # T*k*I*H: the CPU's decomposition of a launch walks every workgroup and K step
MOE_MODELS = ((8, 2, 4096, 14336), (64, 8, 2048, 1408), (60, 4, 2048, 1408), (128, 8, 2048, 768))  # E, k, H, I


def _moe_groups(count: int, rng: random.Random) -> list[Group]:
    from ..kernels.fused_moe import static_config, tiles_for_block

    groups: list[Group] = []
    while len(groups) < count:
        e, k, h, inter = rng.choice(MOE_MODELS)
        t = rng.choice((1, 4, 16, 64, 256, 1024, 4096))
        if t * k * inter * h > MAX_MOE_WORK:
            continue
        dist, seed = rng.choice(("uniform", "zipf1.0", "zipf1.5")), rng.randrange(1 << 20)
        blocks = {static_config(t, k, e).block_m, rng.choice((16, 32, 64, 128))}
        shape = f"{t}x{h}x{inter}x{e}"
        cases = []
        for bm in sorted(blocks):
            c = tiles_for_block(bm)
            tiles = f"bm={c.block_m};bn={c.block_n};bnd={c.block_n_down};bk={c.block_k};st={c.stages}"
            config = f"{tiles};k={k};dist={dist};seed={seed}"
            cases += [Case("moe", "moe_up", "bf16", config, shape), Case("moe", "moe_down", "bf16", config, shape)]
        groups.append(Group("moe", f"{shape}/{dist}/{seed}", "", tuple(cases)))
    return groups


COUNTS = {"gemm_mma_sync": 110, "gemm_wgmma": 100, "attention": 90, "rows": 180, "elementwise": 120, "moe": 36}


def plan_rows(gpu: GPUSpec, seed: int = 0, scale: float = 1.0) -> list[Group]:
    """Every family's groups, interleaved round-robin (a run cut short by its budget still has each
    family), each family's shapes split ``TEST_FRACTION`` test / train.  ``scale`` multiplies the counts."""
    rng = random.Random(seed)
    n = {f: max(2, round(c * scale)) for f, c in COUNTS.items()}
    by_family = {
        "gemm_mma_sync": _gemm_groups("mma_sync", n["gemm_mma_sync"], 5, rng, gpu),
        "gemm_wgmma": _gemm_groups("wgmma", n["gemm_wgmma"], 5, rng, gpu),
        "attention": _attention_groups(n["attention"], rng),
        "rows": _row_groups(n["rows"], rng),
        "elementwise": _elementwise_groups(n["elementwise"], rng),
        "moe": _moe_groups(n["moe"], rng),
    }
    out: list[Group] = []
    for family, groups in by_family.items():
        test = set(
            random.Random(f"{seed}/{family}").sample(range(len(groups)), max(1, round(TEST_FRACTION * len(groups))))
        )
        by_family[family] = [
            Group(g.family, g.shape, "test" if i in test else "train", g.cases) for i, g in enumerate(groups)
        ]
    for i in range(max(len(g) for g in by_family.values())):
        out.extend(groups[i] for groups in by_family.values() if i < len(groups))
    return out


def is_library(case: Case, gpu: GPUSpec) -> bool:
    """Whether ``case`` is the configuration wavec's library runs for its launch (``matmul``'s plan, the
    attention table's tile, the rows and elementwise rules, MoE's static token block), not a tuning
    alternative."""
    from ..kernels import attention as A
    from ..kernels.fused_moe import static_config
    from ..tuning.plan import GemmRequest, plan_matmul

    p, sizes = case.params(), case.sizes()
    if case.family.startswith("gemm"):
        request = GemmRequest(mma=case.family.removeprefix("gemm_"), split=1)
        m, n, k = sizes
        plan = gemm_config(plan_matmul(m, n, k, request, gpu.name), c_f32=p.get("c") == "f32")
        return case.config == plan  # C's dtype is the caller's choice, not the plan's
    if case.family == "attention":
        subs, waves = A.attention_config(sizes[4], sizes[3], None, p["mma"], p["causal"] == "1")
        tile = (int(subs[A.BLOCK_M]), int(subs[A.BLOCK_N]), waves, int(subs[A.NUM_STAGES]))
        return tile == (int(p["bm"]), int(p["bn"]), int(p["w"]), int(p["st"]))
    if case.family == "moe":
        return int(p["bm"]) == static_config(sizes[0], int(p["k"]), sizes[3]).block_m
    return True
