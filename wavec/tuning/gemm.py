"""Tuning the GEMM of ``wavec.kernels.gemm``: the default space, inputs, dispatch from the tuning cache
(falling back to ``gemm_config``'s heuristic), the cost-model fit and the % of ceiling per shape."""

from __future__ import annotations

import math

import wavec as wc

from .ceiling import device_rates, gemm_ceiling
from .cost_model import ConfigModel, CostModel
from .legality import ctas_per_sm
from .search import autotune, lookup

FACTORY = "wavec.kernels.gemm:make_gemm"
DIMS = ("M", "N", "K")

DEFAULT_SPACE = {
    "BLOCK_M": [16, 64, 128, 256],
    "BLOCK_N": [64, 128, 256],
    "BLOCK_K": [32, 64, 128],
    "NUM_STAGES": [2, 3, 4],
    "GROUP_M": [8],
    "waves": [(1, 2), (1, 4), (2, 2), (2, 4), (4, 2)],
}


def _fixed(dtype) -> dict:
    mma = wc.MMAType.NV_F32_16x8x16_F16 if dtype == wc.f16 else wc.MMAType.NV_F32_16x8x16_BF16
    return {"dtype": dtype, "mma_type": mma}


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


def tune_gemm(shapes, dtype=wc.f16, space: dict | None = None, **kw):
    """``autotune`` of the GEMM factory over ``space`` (default ``DEFAULT_SPACE``) for ``shapes`` (M, N, K)."""
    kw.setdefault("make_inputs", gemm_inputs(dtype))
    return autotune(FACTORY, space or DEFAULT_SPACE, shapes, fixed=_fixed(dtype), dtypes=_dtypes(dtype), dims=DIMS,
                    **kw)


def tuned_config(m: int, n: int, k: int, dtype=wc.f16, target: str | None = None) -> tuple[dict, tuple]:
    """(subs, waves) from the tuning cache for this shape's bucket, else ``gemm_config``'s heuristic."""
    from ..kernels.gemm import gemm_config

    hit = lookup(FACTORY, (m, n, k), fixed=_fixed(dtype), target=target, dtypes=_dtypes(dtype), dims=DIMS)
    if hit is None:
        return gemm_config(m, n, k)
    kwargs, subs = hit
    return subs, tuple(kwargs.get("waves", (2, 2)))


_COMPILED: dict = {}


def matmul(a, b, *, backend: str | None = None):
    """``a @ b.T`` like ``wavec.kernels.gemm.matmul``, with the configuration dispatched from the tuning cache."""
    import torch

    from ..kernels.gemm import make_gemm

    dtype = {torch.float16: wc.f16, torch.bfloat16: wc.bf16}[a.dtype]
    subs, waves = tuned_config(a.shape[0], b.shape[0], a.shape[1], dtype)
    key = (dtype.name, tuple(sorted((str(k), v) for k, v in subs.items())), waves, backend)
    kernel = _COMPILED.get(key)
    if kernel is None:
        kernel = _COMPILED[key] = wc.compile(make_gemm(**_fixed(dtype), waves=waves), subs, backend=backend)
    c = torch.empty(a.shape[0], b.shape[0], device=a.device, dtype=torch.float32)
    kernel(a, b, c)
    return c


def fit_cost_model(result, sms: int = 132, target: str = "sm_90") -> CostModel:
    """A ``CostModel`` fitted per configuration from a ``TuningResult``'s times over its shapes."""
    model = CostModel()
    per_cand: dict = {}
    for shape, times in result.times.items():
        for c, t in times.items():
            per_cand.setdefault(c, []).append((shape, t))
    for c, pts in per_cand.items():
        s = c.subs_dict
        slots = sms * ctas_per_sm(result.metadata.get(c, {}), target)
        data = [(math.ceil(m / s["BLOCK_M"]) * math.ceil(n / s["BLOCK_N"]), slots, math.ceil(k / s["BLOCK_K"]), t)
                for (m, n, k), t in pts]
        model.add(ConfigModel(c.label, (s["BLOCK_M"], s["BLOCK_N"]), s["BLOCK_K"], slots), data)
    return model


def ceiling_report(result, gpu: str = "H100", measured: dict | None = None) -> list[dict]:
    """Per shape: the best time, its ceiling and the % of ceiling reached."""
    rates = device_rates(gpu, measured)
    rows = []
    for shape, best in result.best.items():
        t = result.times.get(shape, {}).get(best)
        s = best.subs_dict
        ceil = gemm_ceiling(*shape, s["BLOCK_M"], s["BLOCK_N"], tuple(best.kwargs_dict.get("waves", (2, 2))),
                            rates=rates)
        rows.append({"shape": shape, "config": best.label, "seconds": t, "ceiling_s": ceil["bound"],
                     "limiter": ceil["limiter"], "percent": 100.0 * ceil["bound"] / t if t else None})
    return rows
