"""``matmul(config="rank")``: the mma.sync tile the configuration ranking model picks (``tuning.rank_plan``)
is the argmin of the shipped model's scores over the space's candidates serving M (each scored by hand from
its full-walk decomposition), and the GEMM it runs is right: every element against torch's f64 product."""

import pytest
import torch
from rank_scores import hand_scores
from test_kernels_emulated import GEMM_TOL, check, generator, randn

import wavec as wc
from wavec.kernels import gemm as gm
from wavec.kernels.gemm import make_gemm
from wavec.perf import rank
from wavec.perf.gpus import gpu
from wavec.tuning import plan, rank_plan
from wavec.tuning.gemm import serves

SMALL = {
    "BLOCK_M": [16, 64],
    "BLOCK_N": [64, 128],
    "BLOCK_K": [32],
    "NUM_STAGES": [2, 3],
    "GROUP_M": [8],
    "waves": [(1, 2), (2, 2)],
}


def _hand_scores(shape, dtype):
    """Each candidate compiled here through ``make_gemm``, not taken from the pool ``matmul`` ranks."""
    kernels = {
        c: wc.compile(make_gemm(dtype, waves=c.kwargs_dict["waves"]), c.symbol_subs(), target="sm_90", backend="cuda")
        for c in rank_plan.ranked_candidates(dtype, "sm_90", SMALL)
        if serves(c, shape[0])
    }
    return hand_scores(kernels, shape, gpu("h100"), rank.load("h100"))


@pytest.mark.parametrize("shape", [(40, 200, 72), (130, 96, 64)])
def test_ranked_config_is_the_models_argmin_and_matmul_runs_it(shape, monkeypatch):
    monkeypatch.setattr(plan, "DEFAULT_SPACE", SMALL)
    scores = _hand_scores(shape, wc.f16)
    assert len(scores) >= 4
    best = min(scores, key=scores.__getitem__)
    subs, waves = rank_plan.ranked_config(*shape, wc.f16, gpu="h100")
    assert subs == best.symbol_subs() and waves == best.kwargs_dict["waves"]
    g, seed = generator()
    m, n, k = shape
    a, b = randn(g, m, k, dtype=torch.float16), randn(g, n, k, dtype=torch.float16)
    c = gm.matmul(a, b, backend="emulator", config="rank", out_dtype=torch.float32)
    check(c, a.double() @ b.double().T, GEMM_TOL, f"matmul(config='rank') {shape} (seed {seed})")


def test_rank_config_refuses_what_it_was_not_trained_on():
    a, b = torch.zeros(32, 64, dtype=torch.float16), torch.zeros(64, 64, dtype=torch.float16)
    with pytest.raises(wc.WavecError, match="config='rank' ranks the tiles of f16/bf16 GEMMs without split-K"):
        gm.matmul(a, b, backend="emulator", config="rank", split=2)
