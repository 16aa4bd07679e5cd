"""Profiling and fitting the routing-aware MoE dispatch on the visible GPU (``python -m wavec tune moe``).

Requires: torch with CUDA for ``profile``/``tune`` (``routing`` and ``balance`` also run on the CPU); the
IREE compiler and ptxas for the pool's legality (compiled in worker processes into the disk cache).

Guarantees: ``routing`` is the RaMP protocol's generator (logits skewed by a random expert permutation's
rank, the skew bisected to a target balance beta = entropy(h) / ln min(E, T*k); ``benchmarks/moe.py``
uses it too).  ``build_pool`` is the region rules' candidates that compile for the target without spills,
within the register file and shared memory (``legality.reject_after_compile``), at most ``max_configs``
(the static rule's configurations kept).  ``profile`` times every pool configuration of the whole
operator (``fused_experts(config=...)``, routing included) at each (T, beta) point by CUDA-graph replay
with L2 flushed before each replay (median of ``reps``); ``tune`` fits every configuration
(``tuning.moe.fit_config``), stores the table in the tuning cache and registers it for this process.
"""

from __future__ import annotations

import math
import multiprocessing
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..errors import TuningError
from ..kernels.fused_moe import MoeConfig
from ..knobs import knobs
from . import moe as tm

FIT_TOKENS = (8, 64, 256, 1024, 4096)
FIT_BETAS = (1.0, 0.9, 0.8, 0.7, 0.6)
HELD_OUT_TOKENS = (1, 16, 32, 128, 512, 2048)
HELD_OUT_BETAS = (0.95, 0.85, 0.75, 0.65)
FLUSH_BYTES = 256 << 20
WARMUP, REPS = 3, 10


def balance(ids: Any, experts: int) -> float:
    """beta = entropy of the expert histogram / ln min(E, ids): 1 when every id has its own expert or the
    ids spread evenly."""
    import torch

    h = torch.bincount(ids.flatten().long().cpu(), minlength=experts).double()
    p = h[h > 0] / h.sum()
    top = math.log(min(experts, ids.numel()))
    return float(-(p * p.log()).sum() / top) if top > 0 else 1.0


def routing(t: int, e: int, k: int, beta: float, renormalize: bool, seed: int, device: Any = "cuda") -> tuple:
    """(weights f32 [T, k], ids int32 [T, k], achieved beta): the skew ``s`` of rank-ordered logits is
    bisected until beta is within 0.01 of the target (small T*k bounds beta from below)."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    noise = torch.randn(t, e, device=device, generator=g)
    perm = torch.randperm(e, device=device, generator=g)
    rank = torch.empty(e, device=device).scatter_(0, perm, torch.arange(e, device=device, dtype=torch.float32))

    def route(s: float):
        w, i = torch.topk(torch.softmax(noise - s * rank, -1), k)
        return (w / w.sum(-1, keepdim=True) if renormalize else w), i.to(torch.int32)

    lo, hi = 0.0, 64.0
    best = route(0.0)
    for _ in range(30):
        mid = (lo + hi) / 2
        cand = route(mid)
        b = balance(cand[1], e)
        if abs(b - beta) < abs(balance(best[1], e) - beta):
            best = cand
        if abs(b - beta) < 0.01:
            break
        lo, hi = (mid, hi) if b > beta else (lo, mid)
    return best[0], best[1], balance(best[1], e)


def fit_points(n: int | None = None) -> list[tuple[int, float]]:
    """The (T, beta) profiling points, 5 x 5, or ``n`` of them spread over T and beta."""
    pts = [(t, b) for t in FIT_TOKENS for b in FIT_BETAS]
    if n is None or n >= len(pts):
        return pts
    return [pts[int(i * len(pts) / n + len(pts) / (2 * n))] for i in range(n)]


# ----------------------------------------------------------------------------- the pool


def _compile_gemm(kind: str, dtype: str, top_k: int, cfg: tuple, target: str, deterministic: bool = True) -> dict:
    """Worker: compile one GEMM of ``fused_experts`` (the up or the down kernel, as
    ``fused_moe.plan_kernels`` builds them for that combine) into the disk cache; its metadata or
    ``{"error": ...}``."""
    import wavec as wc

    c = MoeConfig(*cfg)
    dt = getattr(wc, dtype)
    try:
        kernel = c.make_gemm(kind == "down", dt, top_k, target, deterministic=deterministic)
        m = wc.compile(kernel, c.subs(kind == "down"), target=target, backend="cuda").artifact.metadata
    except Exception as e:  # noqa: BLE001 - a configuration that fails to compile is an illegal one
        return {"error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
    return {"registers": m.registers, "spills": m.spills, "shared_bytes": m.shared_bytes, "block": list(m.block)}


def _astuple(c: MoeConfig) -> tuple:
    return (c.block_m, c.block_n, c.block_n_down, c.block_k, c.stages, c.group_m, c.swap, c.split_k, c.wgmma)


@dataclass
class Pool:
    """The legal pool of a model shape on a target, with what was dropped and why."""

    regions: tm.Regions
    candidates: int
    compiled: int  # candidates compiled (fewer than the candidates with max_configs)
    legal: int
    pool: list[tm.PoolConfig]
    rejected: dict = field(default_factory=dict)  # label -> reason
    seconds: float = 0.0


def build_pool(
    shape: tm.MoeShape, target: str, sms: int, l2_bytes: int, max_configs: int | None = None, workers: int = 0,
    progress: Callable[[str], None] = lambda _s: None, swap: bool = False, split: bool = False,
    deterministic: bool = True, wgmma: bool = False,
) -> Pool:  # fmt: skip
    """The region rules' candidates for ``shape``, filtered by the target's shared memory (estimate), then
    by compiling both GEMMs (``workers`` processes; 0: all CPUs but one) without spills, within 255
    registers and the register file; at most ``max_configs``, the static rule's configurations kept.
    ``swap``: the swap-AB configurations (``tm.swap_candidates``) join the candidates (sm_90a only, else
    a ``TuningError``); ``split``: the split-K ones (``tm.split_candidates``) too; ``wgmma``: the large
    token blocks on wgmma (``tm.wgmma_candidates``, sm_90a only).  The down-projection is compiled for the
    combine the pool is timed on (``deterministic``, else the atomic one)."""
    from ..target import get_target
    from .legality import ctas_per_sm, reject_after_compile

    t0 = time.perf_counter()
    reg = tm.regions(shape, sms, l2_bytes)
    cands = all_candidates(shape, reg, target, swap, split, wgmma)
    limit = get_target(target).max_shared_bytes
    rejected = {c.label(): "shared memory" for c in cands if max(tm.shared_bytes(c)) > limit}
    cands = [c for c in cands if c.label() not in rejected]
    statics = tm.static_configs(shape)
    if max_configs is not None:  # compile a margin over the wanted count: some will not be legal
        cands = tm.trim(cands, 2 * max_configs, lambda c: c in statics)
    jobs = {
        (kind, c): (kind, shape.dtype, shape.top_k, _astuple(c), target, deterministic)
        for c in cands
        for kind in ("up", "down")
    }
    n = workers or max(1, (multiprocessing.cpu_count() or 2) - 1)
    progress(f"compiling {len(jobs)} kernels of {len(cands)} candidates in {n} processes")
    with ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn")) as ex:
        futs = {key: ex.submit(_compile_gemm, *args) for key, args in jobs.items()}
        meta = {key: f.result() for key, f in futs.items()}
    legal = []
    for c in cands:
        why = [meta[(k, c)].get("error") or reject_after_compile(meta[(k, c)]) for k in ("up", "down")]
        if any(why):
            rejected[c.label()] = "; ".join(f"{k}: {w}" for k, w in zip(("up", "down"), why) if w)
            continue
        slots = [ctas_per_sm(meta[(k, c)], target) * sms for k in ("up", "down")]
        legal.append(tm.PoolConfig(c, *slots))
    pool = tm.trim(legal, max_configs, lambda p: p.cfg in statics)
    n_all = len(all_candidates(shape, reg, target, swap, split, wgmma))
    return Pool(reg, n_all, len(cands), len(legal), pool, rejected, time.perf_counter() - t0)


def all_candidates(
    shape: tm.MoeShape, reg: tm.Regions, target: str, swap: bool, split: bool = False, wgmma: bool = False
) -> list[MoeConfig]:
    """``tm.candidates``, with ``swap`` the swap-AB ones after them and with ``wgmma`` the large wgmma
    token blocks (both sm_90a only), with ``split`` the split-K variants of all (``tm.split_candidates``)
    last."""
    from ..kernels.fused_moe import SWAP_TARGET

    for flag, what in ((swap, "swap-AB"), (wgmma, "wgmma token-block")):
        if flag and target != SWAP_TARGET:
            raise TuningError(message=f"{what} configurations run on wgmma ({SWAP_TARGET}); the target is {target}")
    base = tm.candidates(shape, reg) + (tm.swap_candidates(shape, reg) if swap else [])
    base += tm.wgmma_candidates(shape, reg) if wgmma else []
    return base + (tm.split_candidates(shape, reg, base) if split else [])


# ----------------------------------------------------------------------------- timing


def graph_time(
    fn: Callable[[], Any], flush: Any, warmup: int = WARMUP, reps: int = REPS, pool: Any = None,
    keep: list | None = None,
) -> float:  # fmt: skip
    """Median seconds of one replay of a CUDA graph of ``fn`` (L2 flushed by a write before each replay,
    which is not timed); ``pool``: a graph memory pool to share (one per point: the graphs of a pool's
    configurations are captured one after another and never replayed later), with ``keep`` holding the
    graphs until the caller is done: torch frees a shared pool when its last graph goes, and a later
    capture into it then fails an internal assert of the caching allocator."""
    import torch

    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        fn()
    if keep is not None:
        keep.append(graph)
    events = []
    for i in range(warmup + reps):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        if i >= warmup:
            events.append((start, end))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events) / 1e3


def weights(shape: tm.MoeShape, device: Any = "cuda", seed: int = 0) -> tuple:
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    dt = {"bf16": torch.bfloat16, "f16": torch.float16}[shape.dtype]
    w1 = torch.randn(shape.experts, 2 * shape.inter, shape.hidden, device=device, generator=g) / shape.hidden**0.5
    w2 = torch.randn(shape.experts, shape.hidden, shape.inter, device=device, generator=g) / shape.inter**0.5
    return w1.to(dt), w2.to(dt)


@dataclass
class Point:
    """One profiled (T, beta, seed): the histogram, the achieved beta and seconds per pool configuration."""

    tokens: int
    beta: float
    seed: int
    beta_got: float
    hist: list[int]
    seconds: list[float]


def time_pool(shape: tm.MoeShape, pool: Sequence[MoeConfig], tokens: int, beta: float, seed: int, w: tuple,
              flush: Any, renormalize: bool = True, reps: int = REPS, deterministic: bool = True) -> Point:  # fmt: skip
    """Every configuration of ``pool`` on one routing (``routing``'s generator), CUDA-graph replays, all on
    one combine (``deterministic``: split-K ones in their f32-rows form, summed in order; else atomic adds):
    it is the combine a serving call with that flag runs, and one combine for the whole pool keeps the
    comparison between configurations fair."""
    import torch

    from ..kernels.fused_moe import fused_experts

    x = torch.randn(tokens, shape.hidden, device="cuda", dtype=w[0].dtype)
    wts, ids, got = routing(tokens, shape.experts, shape.top_k, beta, renormalize, seed)
    out = torch.empty_like(x)
    w1, w2 = w
    mem = torch.cuda.graph_pool_handle()
    secs: list[float] = []
    graphs: list = []  # alive until every configuration of the point is timed (graph_time's ``keep``)
    for cfg in pool:

        def run(c: MoeConfig = cfg) -> Any:
            return fused_experts(x, w1, w2, wts, ids, config=c, out=out, deterministic=deterministic)

        secs.append(graph_time(run, flush, reps=reps, pool=mem, keep=graphs))
    del graphs
    hist = torch.bincount(ids.flatten().long(), minlength=shape.experts).tolist()
    return Point(tokens, beta, seed, got, hist, secs)


def profile(shape: tm.MoeShape, pool: Sequence[MoeConfig], points: Sequence[tuple[int, float]], budget_s: float,
            seed: int = 0, progress: Callable[[str], None] = lambda _s: None,
            deterministic: bool = True) -> list[Point]:  # fmt: skip
    """``time_pool`` at each point until the points are done or ``budget_s`` seconds have passed."""
    import torch

    w = weights(shape)
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    t0, out = time.perf_counter(), list[Point]()
    for i, (t, b) in enumerate(points):
        if out and time.perf_counter() - t0 > budget_s:
            progress(f"budget spent after {len(out)} of {len(points)} points")
            break
        out.append(time_pool(shape, pool, t, b, seed + i, w, flush, deterministic=deterministic))
        progress(f"point {i + 1}/{len(points)}: T={t} beta={b} ({time.perf_counter() - t0:.0f} s)")
    return out


def fit_table(shape: tm.MoeShape, device: str, sms: int, pool: Sequence[tm.PoolConfig], points: Sequence[Point],
              meta: dict | None = None) -> tm.MoeTable:  # fmt: skip
    """A ``MoeTable`` fitted per configuration from ``points`` (each's block count at the configuration's
    BM and its seconds)."""
    if not points:
        raise TuningError(message="no profiled points to fit")
    knees, coefs, resid = [], [], []
    for j, pc in enumerate(pool):
        samples = [(tm.block_count(p.hist, pc.cfg.block_m), p.seconds[j]) for p in points]
        knee, coef, r = tm.fit_config(pc, shape, samples)
        knees.append(knee)
        coefs.append(coef)
        resid.append(r)
    info = {"points": [[p.tokens, p.beta, round(p.beta_got, 3)] for p in points], "rms_rel_residual_median":
            statistics.median(resid), "rms_rel_residual_max": max(resid)}  # fmt: skip
    return tm.MoeTable(shape, device, sms, list(pool), knees, coefs, {**info, **(meta or {})})


def regret_rows(table: tm.MoeTable, points: Sequence[Point]) -> list[dict]:
    """Per point: the measured best, the routing-aware and static choices' measured time and regret."""
    rows = []
    for p in points:
        best = min(p.seconds)
        ra, st = table.choose(p.hist), table.static_index(p.tokens)
        rows.append({
            "T": p.tokens, "beta": p.beta, "beta_got": round(p.beta_got, 3), "best_us": best * 1e6,
            "best": table.pool[p.seconds.index(best)].cfg.label(), "routing_aware": table.pool[ra].cfg.label(),
            "ra_us": p.seconds[ra] * 1e6, "static": table.pool[st].cfg.label(), "static_us": p.seconds[st] * 1e6,
            "ra_regret": p.seconds[ra] / best - 1, "static_regret": p.seconds[st] / best - 1,
        })  # fmt: skip
    return rows


def summary(rows: Sequence[dict]) -> dict:
    """Mean, p95 and max regret of both choices; routing-aware vs static speed-up (geomean) at beta <= 0.8."""

    def stats(xs: list[float]) -> tuple[float, float, float]:
        s = sorted(xs)
        return statistics.fmean(s), s[min(len(s) - 1, math.ceil(0.95 * len(s)) - 1)], s[-1]

    skew = [r["static_us"] / r["ra_us"] for r in rows if r["beta"] <= 0.8]
    return {
        "points": len(rows),
        "ra_regret": stats([r["ra_regret"] for r in rows]),
        "static_regret": stats([r["static_regret"] for r in rows]),
        "speedup_skewed": math.exp(statistics.fmean(math.log(x) for x in skew)) if skew else float("nan"),
    }


def format_rows(rows: Sequence[dict], summ: dict) -> str:
    """The compact table the CLI and the benchmark print."""
    cols = {"T": 5, "beta": 5, "got": 5, "best us": 9, "RA us": 9, "static us": 9, "RA reg": 7, "st reg": 7}
    lines = [" ".join(f"{c:>{w}}" for c, w in cols.items()) + "  RA choice / best"]
    for r in rows:
        lines.append(
            f"{r['T']:>5} {r['beta']:>5} {r['beta_got']:>5} {r['best_us']:>9.1f} {r['ra_us']:>9.1f} "
            f"{r['static_us']:>9.1f} {100 * r['ra_regret']:>6.1f}% {100 * r['static_regret']:>6.1f}%  "
            f"{r['routing_aware']} / {r['best']}"
        )
    ra, st = summ["ra_regret"], summ["static_regret"]
    lines.append(
        f"regret over {summ['points']} points: routing-aware mean {100 * ra[0]:.2f}% p95 {100 * ra[1]:.2f}% "
        f"max {100 * ra[2]:.2f}%; static mean {100 * st[0]:.2f}% p95 {100 * st[1]:.2f}% max {100 * st[2]:.2f}%; "
        f"routing-aware vs static at beta <= 0.8: {summ['speedup_skewed']:.3f}x (geomean)"
    )
    return "\n".join(lines)


@dataclass
class TuneResult:
    table: tm.MoeTable
    pool: Pool
    points: list[Point]
    path: str
    seconds: dict  # phase -> seconds


def tune(
    shape: tm.MoeShape, *, budget_s: float = 25 * 60, max_configs: int | None = None, n_points: int | None = None,
    workers: int = 0, progress: Callable[[str], None] = lambda _s: None, swap: bool = False, split: bool = False,
    deterministic: bool = True, wgmma: bool = False,
) -> TuneResult:  # fmt: skip
    """Pool, profile, fit, store (tuning cache) and register the table of ``shape`` on the visible GPU;
    ``swap``, ``split``, ``wgmma``: the swap-AB, split-K, wgmma token-block configurations join the pool
    (``build_pool``); timed on the
    deterministic combine, or the atomic one (``deterministic=False``), as ``fused_experts`` runs them."""
    import torch

    from ..kernels import moe_dispatch as md
    from ..kernels.indexing import hopper_target
    from .devices import device as device_of

    dev = torch.device("cuda", torch.cuda.current_device())
    name = md.device_name(dev)
    props = torch.cuda.get_device_properties(dev)
    target = hopper_target(None, dev) or f"sm_{props.major}{props.minor}"
    t0 = time.perf_counter()
    sms, l2 = props.multi_processor_count, device_of(name).l2_bytes
    pool = build_pool(shape, target, sms, l2, max_configs, workers, progress, swap, split, deterministic, wgmma)
    if not pool.pool:
        raise TuningError(message=f"no legal configuration for {shape.key()} on {target}")
    t1 = time.perf_counter()
    pts = profile(
        shape, [p.cfg for p in pool.pool], fit_points(n_points), budget_s - (t1 - t0), progress=progress,
        deterministic=deterministic,
    )  # fmt: skip
    t2 = time.perf_counter()
    from .cache import versions

    meta = {"target": target, "versions": versions(), "profile_s": round(t2 - t1, 1), "pool_s": round(t1 - t0, 1),
            "combine": "deterministic" if deterministic else "atomic"}  # fmt: skip
    table = fit_table(shape, name, props.multi_processor_count, pool.pool, pts, meta)
    path = tm.save(table)
    if knobs.cache_disable:
        path = "(not stored: the cache is disabled; registered for this process only)"
    md.register_table(table)
    t3 = time.perf_counter()
    return TuneResult(table, pool, pts, path, {"pool": t1 - t0, "profile": t2 - t1, "fit": t3 - t2, "total": t3 - t0})
