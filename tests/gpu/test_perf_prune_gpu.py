"""GPU tier: the tuner pruned by the performance model (``TuneOptions(rank=PerfRanker, prune_to=3)``, by
the MLP's predicted time or by the configuration ranking model) times exactly the model's top 3 on the real
device, and the configuration it keeps computes the GEMM: every output element against torch's f64 product
of the same f16 inputs."""

import pytest
import torch

import wavec as wc
from wavec.kernels.gemm import make_gemm
from wavec.tuning import autotune
from wavec.tuning.cache import gpu_name
from wavec.tuning.gemm import gemm_inputs
from wavec.tuning.perf_prune import PerfRanker
from wavec.tuning.search import TuneOptions

pytestmark = pytest.mark.gpu

SPACE = {
    "BLOCK_M": [64, 128],
    "BLOCK_N": [64, 128],
    "BLOCK_K": [32, 64],
    "NUM_STAGES": [3],
    "GROUP_M": [8],
    "waves": [(2, 2)],
}


@pytest.mark.parametrize("model", ["mlp", "rank"])
@pytest.mark.parametrize("shape", [(1000, 3000, 520), (4096, 4096, 4096)])
def test_pruned_tuning_times_the_top_3_and_its_pick_is_right(shape, model):
    calls = []

    def timer(cand, fn):
        calls.append(cand)
        from wavec.tuning.timing import cuda_event_timer

        return cuda_event_timer(cand, fn)

    ranker = PerfRanker(gpu_name(), model=model)
    opts = TuneOptions(
        fixed={"dtype": wc.f16},
        make_inputs=gemm_inputs(wc.f16),
        timer=timer,
        rank=ranker,
        prune_to=3,
        warmup=1,
        rounds=3,
        workers=0,
        use_cache=False,
        progress=False,
    )
    res = autotune(make_gemm, SPACE, [shape], opts)
    timed = set(calls)
    order = ranker.predicted if model == "mlp" else ranker.scored
    ranked = sorted((c for c in res.metadata if c not in res.rejected), key=lambda c: order[(c.label, shape)])
    assert timed == set(ranked[:3]) and res.best[shape] in timed

    m, n, k = shape
    kwargs, subs = res.config(shape)
    kernel = wc.compile(make_gemm(wc.f16, **kwargs), subs)
    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16)
    c = torch.empty(m, n, device="cuda", dtype=torch.float32)
    kernel(a, b, c)
    ref = a.double() @ b.double().T
    # f32 accumulation of K f16 products: error grows ~sqrt(K) x f32 epsilon x |a||b|
    torch.testing.assert_close(c.double(), ref, rtol=1e-4, atol=1e-4 * k**0.5)
