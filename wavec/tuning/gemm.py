"""Tuning the GEMM of ``wavec.kernels.gemm``: inputs, dispatch from the tuning cache (falling back to
the rules of ``tuning/plan.py``, where the search spaces live too), the cost-model fit and the % of ceiling
per shape."""

from __future__ import annotations

import wavec as wc

from .cache import TuningCache, bucket, entry_key, gpu_name, model_key, versions
from .ceiling import device_rates, gemm_ceiling
from .cost_model import ConfigModel, CostModel
from .devices import device
from .legality import ctas_per_sm
from .plan import DEFAULT_SPACE, check_mma, heuristic_plan, mma_type_for, schedule, tile_plan
from .search import Candidate, TuneOptions, _source, autotune, cache_entry

FACTORY = "wavec.kernels.gemm:make_gemm"
DIMS = ("M", "N", "K")

UNLIMITED = 1 << 62


def target_for(mma: str = "mma_sync", target: str | None = None) -> str:
    """The compile target of an MMA kind: wgmma exists only on sm_90a."""
    from ..compiler import default_target

    check_mma(mma)
    return "sm_90a" if mma == "wgmma" else (target or default_target("cuda"))


def m_limits(block_m: int) -> tuple[int, int]:
    """The M a tile height serves: 16-row tiles up to M = 64 (above, the matrix units idle on them), 64-row
    tiles above M = 16, taller ones above M = 64 (below, most rows are padding)."""
    if block_m <= 16:
        return 0, 64
    return (17, UNLIMITED) if block_m <= 64 else (65, UNLIMITED)


def fit_classes(block_ms=(16, 64, 128)):
    """For ``evaluate.split_shapes(classes=...)``: a shape's classes are the tile heights of ``block_ms``
    serving its M (``m_limits``), so each configuration is fitted on ``max_fit`` shapes of its M range."""
    heights = sorted(set(block_ms))

    def classes(shape) -> set[int]:
        return {h for h in heights if m_limits(h)[0] <= shape[0] <= m_limits(h)[1]}

    return classes


def serves(candidate: Candidate, m: int) -> bool:
    lo, hi = m_limits(candidate.subs_dict["BLOCK_M"])
    return lo <= m <= hi


def heuristic_candidate(m: int, n: int, k: int, mma: str = "mma_sync") -> Candidate:
    """``heuristic_plan`` for a shape as a Candidate (labelled like the space's)."""
    plan = heuristic_plan(m, n, k, mma)
    return Candidate((("waves", tuple(plan.waves)),), tuple(sorted((str(s), int(v)) for s, v in plan.subs.items())))


def _fixed(dtype, mma: str = "mma_sync") -> dict:
    check_mma(mma)
    return {"dtype": dtype, "mma_type": mma_type_for(mma, dtype)[1]}


def gemm_inputs(dtype=wc.f16):
    def make(shape):
        import torch

        m, n, k = shape
        a = torch.randn(m, k, device="cuda", dtype=dtype.torch())
        b = torch.randn(n, k, device="cuda", dtype=dtype.torch())
        return a, b, torch.empty(m, n, device="cuda", dtype=torch.float32)

    return make


def _dtypes(dtype) -> list[str]:
    t = {"f16": "float16", "bf16": "bfloat16"}[dtype.name]
    return [t, t, "float32"]


def tune_gemm(shapes, dtype=wc.f16, space: dict | None = None, **options):
    """``autotune`` of the GEMM factory over ``space`` (default ``DEFAULT_SPACE``) for ``shapes`` (M, N, K);
    ``options`` are further ``TuneOptions`` fields."""
    options.setdefault("make_inputs", gemm_inputs(dtype))
    opt = TuneOptions(fixed=_fixed(dtype), dtypes=_dtypes(dtype), dims=DIMS, **options)
    return autotune(FACTORY, space or DEFAULT_SPACE, shapes, opt)


def kernel_id(dtype=wc.f16, mma: str = "mma_sync") -> str:
    return _source(FACTORY, _fixed(dtype, mma)).kernel_id


def _cache(dtype, target: str | None, mma: str = "mma_sync", directory=None) -> TuningCache:
    return TuningCache(f"{kernel_id(dtype, mma)}@{target_for(mma, target)}", directory)


# (m, n, k, dtype, target, mma, folder) -> (subs, waves, source): the cache file is read once per shape;
# ("run", dtype, shapes, options) -> matmul's runner for them
_DISPATCH: dict = {}


def tuned_config(
    m: int, n: int, k: int, dtype=wc.f16, target: str | None = None, *, mma: str = "mma_sync", directory=None
) -> tuple[dict, tuple]:
    """(subs, waves) from the tuning cache for this shape's bucket, else from the cost model stored by
    ``store_tuned``, else the heuristic (``heuristic_plan``)."""
    return dispatch(m, n, k, dtype, target, mma=mma, directory=directory)[:2]


def dispatch(
    m: int, n: int, k: int, dtype=wc.f16, target: str | None = None, *, mma: str = "mma_sync", directory=None
) -> tuple[dict, tuple, str]:
    """``tuned_config`` and its source: "cache", "model" or "heuristic".  ``directory``: the tuning cache's
    folder (default ``$WAVEC_CACHE_DIR/tuning``)."""
    key = (m, n, k, dtype.name, target, mma, str(directory))
    hit = _DISPATCH.get(key)
    if hit is not None:
        return hit
    cache = _cache(dtype, target, mma, directory)
    entry = cache.get(entry_key((m, n, k), _dtypes(dtype), gpu_name(), versions(), DIMS))
    stored = None if entry is not None else cache.get_model(model_key(_dtypes(dtype), gpu_name(), versions()))
    if entry is not None:
        cand, source = Candidate.from_json(entry["best"]), "cache"
    elif stored is not None:
        name = CostModel.from_json(stored["configs"]).choose((m, n, k)).name
        cand, source = Candidate.from_json(stored["candidates"][name]), "model"
    else:
        cand, source = heuristic_candidate(m, n, k, mma), "heuristic"
    out = (cand.symbol_subs(), tuple(cand.kwargs_dict.get("waves", (2, 2))), source)
    _DISPATCH[key] = out
    return out


def store_tuned(
    dtype,
    times_by_shape: dict,
    metadata: dict | None = None,
    *,
    target: str | None = None,
    gpu: str | None = None,
    model: CostModel | None = None,
    candidates=(),
    mma: str = "mma_sync",
) -> int:
    """Write measured times (``{shape: {Candidate: seconds}}``) to the tuning cache, one entry per shape
    bucket (for several shapes, the configuration of least summed time / best time among those timed on
    all of them), and ``model``, which dispatches buckets never measured.  Returns the number of entries."""
    gpu = gpu or gpu_name()
    vers = versions()
    by_bucket: dict = {}
    for shape, times in times_by_shape.items():
        by_bucket.setdefault(bucket(shape), []).append((shape, times))
    entries = {}
    for group in by_bucket.values():
        common = set.intersection(*(set(t) for _s, t in group))
        if not common:
            common = set(max(group, key=lambda g: len(g[1]))[1])
            group = [g for g in group if common <= set(g[1])]
        best = min(common, key=lambda c: (sum(t[c] / min(t.values()) for _s, t in group), c.label))
        shape, times = max(group, key=lambda g: g[0])
        entry = cache_entry(shape, best, times, (metadata or {}).get(best, {}))
        entries[entry_key(shape, _dtypes(dtype), gpu, vers, DIMS)] = {**entry, "shapes": [list(s) for s, _t in group]}
    models = None
    if model is not None:
        by_label = {c.label: c for c in candidates}
        cands = {c.name: by_label[c.name].to_json() for c in model.configs}
        models = {model_key(_dtypes(dtype), gpu, vers): {"configs": model.to_json(), "candidates": cands}}
    _cache(dtype, target, mma).put_many(entries, models)
    _DISPATCH.clear()
    return len(entries)


_COMPILED: dict = {}


def matmul(a, b, *, backend: str | None = None, mma: str = "mma_sync", directory=None, out_dtype=None):
    """``a @ b.T`` like ``wavec.kernels.gemm.matmul`` (``out_dtype``: None/torch.float32 or a's dtype), the
    configuration dispatched from the tuning cache of ``mma`` in ``directory``; a shape with neither a
    cached entry nor a stored model runs ``kernels.gemm.matmul`` itself.  wgmma leaves decode shapes
    (M <= 16) to the mma.sync decode tiles."""
    # A repeated call is one lookup in the dispatch cache (cleared when tuning results change): deciding
    # again costs tens of microseconds, as much as a small GEMM.
    from ..kernels.fastpath import tensor_key

    call = ("run", tensor_key(a), tensor_key(b), backend, mma, str(directory), out_dtype)
    run = _DISPATCH.get(call)
    if run is None:
        run = _DISPATCH[call] = _tuned_runner(a, b, backend, mma, directory, out_dtype)
    return run(a, b)


def _tuned_runner(a, b, backend, mma: str, directory, out_dtype):
    """``matmul``'s decision for a's and b's dtypes and shapes: ``run(a, b) -> c``."""
    import torch

    from ..kernels.gemm import build_gemm, output_dtype, output_runner
    from ..kernels.gemm import matmul as heuristic_matmul

    dtype = {torch.float16: wc.f16, torch.bfloat16: wc.bf16}[a.dtype]
    if mma == "wgmma" and a.shape[0] <= 16:
        mma = "mma_sync"
    subs, waves, source = dispatch(a.shape[0], b.shape[0], a.shape[1], dtype, mma=mma, directory=directory)
    if source == "heuristic":  # nothing tuned for this shape: the heuristic's tile and schedule (wgmma_plan)
        return lambda a, b: heuristic_matmul(a, b, backend=backend, mma=mma, out_dtype=out_dtype)
    out_dtype, out = output_dtype(a, out_dtype)
    plan = tile_plan(subs, waves, mma, schedule(prefetch_fragments=True))  # make_gemm's default flags, as tuned
    key = (dtype.name, out.name, backend, plan)
    kernel = _COMPILED.get(key)
    if kernel is None:
        target = "sm_90a" if mma == "wgmma" else None
        kernel = _COMPILED[key] = wc.compile(build_gemm(plan, dtype, out, target), subs, backend=backend, target=target)
    return output_runner(kernel, out_dtype, a, b)


def fit_cost_model(result, sms: int | None = None, target: str = "sm_90") -> CostModel:
    """A ``CostModel`` fitted per configuration from a ``TuningResult``'s times over its shapes."""
    return fit_gemm_model(result.times, result.metadata, sms=sms, target=target)


UNLIMITED_REGIME = ((0, UNLIMITED),)


def fit_gemm_model(
    times_by_shape: dict,
    metadata: dict,
    *,
    sms: int | None = None,
    target: str = "sm_90",
    only=None,
    regimes=UNLIMITED_REGIME,
    min_points: int = 2,
) -> CostModel:
    """Per configuration (``only``: these labels) and per regime of M, non-negative least squares over the
    shapes it was timed on (``{shape: {Candidate: seconds}}``), serving the M range of ``m_limits`` within
    the regime; a fit needs ``min_points`` shapes.  One regime by default: the perimeter (compulsory
    traffic) term covers the HBM-bound small-M GEMMs."""
    sms = sms or device(target=target).sms
    model = CostModel()
    per_cand: dict = {}
    for shape, times in times_by_shape.items():
        for c, t in times.items():
            per_cand.setdefault(c, []).append((shape, t))
    for c, pts in sorted(per_cand.items(), key=lambda kv: kv[0].label):
        if only is not None and c.label not in only:
            continue
        s = c.subs_dict
        slots = sms * ctas_per_sm(metadata.get(c, {}), target)
        lo, hi = m_limits(s["BLOCK_M"])
        for r_lo, r_hi in regimes:
            limits = (max(lo, r_lo), min(hi, r_hi))
            cfg = ConfigModel(c.label, (s["BLOCK_M"], s["BLOCK_N"]), s["BLOCK_K"], slots, limits=limits, sms=sms)
            served = [(shape, t) for shape, t in pts if limits[0] <= shape[0] <= limits[1]]
            if len(served) >= min_points:
                model.fit_shapes(cfg, served)
    return model


def reference_shapes(ms=(1, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)) -> list[tuple[int, int, int]]:
    """A log grid of GEMM shapes (N, K from 512 to 128K by factors of ~sqrt 2) for ``winners``."""
    steps = [round(512 * 2 ** (i / 2)) for i in range(17)]
    return [(m, n, k) for m in ms for n in steps for k in steps if k <= 32768]


def winners(model: CostModel, shapes) -> list[str]:
    """Labels of the configurations ``model`` chooses on some of ``shapes``: dropping the others keeps
    ``choose``'s answers there with ~3x fewer configurations to scan per launch."""
    return list(dict.fromkeys(model.choose(s).name for s in shapes))


def dispatch_model(
    times_by_shape: dict, metadata: dict, *, sms: int | None = None, target: str = "sm_90"
) -> tuple[CostModel, list[str], dict]:
    """(model, kept labels, info): every profiled configuration fitted (``fit_gemm_model``), then only the
    ``winners`` on ``reference_shapes`` and the fitted shapes kept."""
    full = fit_gemm_model(times_by_shape, metadata, sms=sms, target=target)
    keep = set(winners(full, [*reference_shapes(), *times_by_shape]))
    model = CostModel([c for c in full.configs if c.name in keep])
    return model, [c.name for c in model.configs], {"fitted": len(full.configs), "kept": len(model.configs)}


def ceiling_report(result, gpu: str = "H100", measured: dict | None = None) -> list[dict]:
    """Per shape: the best time, its ceiling and the % of ceiling reached."""
    rates = device_rates(gpu, measured)
    rows = []
    for shape, best in result.best.items():
        t = result.times.get(shape, {}).get(best)
        (m, n, k), s = shape, best.subs_dict  # a GEMM shape
        ceil = gemm_ceiling(
            m, n, k, s["BLOCK_M"], s["BLOCK_N"], tuple(best.kwargs_dict.get("waves", (2, 2))), rates=rates
        )
        rows.append(
            {
                "shape": shape,
                "config": best.label,
                "seconds": t,
                "ceiling_s": ceil["bound"],
                "limiter": ceil["limiter"],
                "percent": 100.0 * ceil["bound"] / t if t else None,
            }
        )
    return rows
