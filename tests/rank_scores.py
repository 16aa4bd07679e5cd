"""The configuration ranking model's score of each candidate, by hand (``matmul(config="rank")`` tests):
its full-walk decomposition, the estimator's inputs and the model's score, for the candidates serving M."""

from __future__ import annotations

from wavec.perf import estimator as E
from wavec.perf import rank
from wavec.perf.decompose import decompose
from wavec.perf.features import features
from wavec.perf.schedule import schedule
from wavec.tuning.gemm import serves


def hand_scores(kernels: dict, shape: tuple[int, int, int], spec, model, mma: str = "mma_sync") -> dict:
    """{candidate: score} over ``kernels`` ({candidate: compiled kernel}) serving ``shape``'s M, on GPU
    ``spec`` with ranking ``model``; the caller compiles the kernels (independently of the pool, or not)."""
    m, n, k = shape
    out = {}
    for c, kernel in kernels.items():
        if not serves(c, m):
            continue
        d = decompose(kernel, (m, k), (n, k), gpu=spec)
        x = E.model_inputs(E.launch_values(d, features(d, schedule(d, spec))), spec)
        out[c] = float(model.scores(x, rank.config_inputs(shape, c.subs_dict, c.kwargs_dict["waves"], mma))[0])
    return out
