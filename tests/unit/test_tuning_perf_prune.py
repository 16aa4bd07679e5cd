"""The tuner's pruning by the performance model's predicted time (``TuneOptions(rank=PerfRanker, prune_to=N)``,
``python -m wavec tune gemm --prune-top N``), with a fake timer: only the model's top N are timed."""

import pytest

import wavec as wc
from wavec.__main__ import main
from wavec.errors import TuningError
from wavec.kernels.gemm import make_gemm
from wavec.perf import estimator as E
from wavec.perf.decompose import decompose
from wavec.perf.features import features
from wavec.perf.gpus import gpu
from wavec.perf.schedule import schedule
from wavec.tuning import autotune
from wavec.tuning.cost_model import CostModel
from wavec.tuning.perf_prune import PerfRanker
from wavec.tuning.search import TuneOptions

SPACE = {
    "BLOCK_M": [16, 64, 128],
    "BLOCK_N": [64, 128],
    "BLOCK_K": [32],
    "NUM_STAGES": [2],
    "GROUP_M": [8],
    "waves": [(1, 2)],
}
KW = dict(
    fixed={"dtype": wc.f16},
    target="sm_90",
    backend="cuda",
    dtypes=["float16", "float16", "float32"],
    gpu="Test GPU",
    dims=("M", "N", "K"),
    progress=False,
    workers=0,
    warmup=0,
    rounds=2,
    use_cache=False,
)


class FakeTimer:
    """Records what is timed; 1 us per candidate, less for taller tiles (the winner must be among the timed)."""

    def __init__(self):
        self.calls = []

    def __call__(self, cand, fn):
        self.calls.append(cand)
        return 1e-6 / cand.subs_dict["BLOCK_M"]


def _predicted(cand, shape, spec):
    """The model's time from the full walk (no cache), compiled as the tuner compiles the candidate."""
    kernel = wc.compile(
        make_gemm(wc.f16, waves=cand.kwargs_dict["waves"]), cand.symbol_subs(), target="sm_90", backend="cuda"
    )
    m, n, k = shape
    d = decompose(kernel, (m, k), (n, k), gpu=spec)
    return E.estimate(E.launch_values(d, features(d, schedule(d, spec))), spec, "h100", "gemm_mma_sync").time_s


def test_prune_times_only_the_models_top_n():
    spec, shape = gpu("h100"), (200, 1024, 520)
    ranker, timer = PerfRanker("h100"), FakeTimer()
    res = autotune(make_gemm, SPACE, [shape], TuneOptions(timer=timer, rank=ranker, prune_to=2, **KW))
    timed = set(timer.calls)
    assert len(timed) == 2 and len(timer.calls) == 2 * KW["rounds"]
    assert set(res.times[shape]) == timed and res.best[shape] in timed
    # the two timed are the two fastest by the model's prediction over every compiled candidate
    compiled = [c for c in _space_candidates() if c not in res.rejected]
    predicted = {c: _predicted(c, shape, spec) for c in compiled}
    assert len(predicted) >= 4
    assert timed == set(sorted(predicted, key=predicted.__getitem__)[:2])
    for c, t in predicted.items():
        assert ranker.predicted[(c.label, shape)] == pytest.approx(t, rel=1e-12)


def _space_candidates():
    from wavec.tuning.search import _source, enumerate_space

    return enumerate_space(SPACE, _source(make_gemm, {"dtype": wc.f16}).params())


def test_rank_and_model_together_is_an_error():
    with pytest.raises(TuningError, match="rank"):
        TuneOptions(rank=PerfRanker("h100"), model=CostModel([]), prune_to=2)
    with pytest.raises(TuningError, match="rank"):
        TuneOptions(rank="not callable", prune_to=2)


def test_cli_rejects_a_bad_prune_top(capsys):
    assert main(["tune", "gemm", "--shapes", "64,64,64", "--prune-top", "0"]) == 2
    assert "--prune-top must be >= 1" in capsys.readouterr().err


def test_prune_by_the_ranking_model_times_its_top_n():
    from wavec.perf import rank

    spec, shape = gpu("h100"), (200, 1024, 520)
    ranker, timer = PerfRanker("h100", model="rank"), FakeTimer()
    res = autotune(make_gemm, SPACE, [shape], TuneOptions(timer=timer, rank=ranker, prune_to=2, **KW))
    timed = set(timer.calls)
    assert len(timed) == 2 and res.best[shape] in timed
    # the scores from the full walk (no cache) through the shipped model, by hand
    model = rank.load("h100")
    scores = {}
    for c in (c for c in _space_candidates() if c not in res.rejected):
        kernel = wc.compile(
            make_gemm(wc.f16, waves=c.kwargs_dict["waves"]), c.symbol_subs(), target="sm_90", backend="cuda"
        )
        d = decompose(kernel, (200, 520), (1024, 520), gpu=spec)
        x = E.model_inputs(E.launch_values(d, features(d, schedule(d, spec))), spec)
        scores[c] = float(model.scores(x, rank.config_inputs(shape, c.subs_dict, c.kwargs_dict["waves"]))[0])
        assert ranker.scored[(c.label, shape)] == pytest.approx(scores[c], rel=1e-9, abs=1e-9)
    assert timed == set(sorted(scores, key=scores.__getitem__)[:2])


def test_ranking_model_rejects_what_it_cannot_rank():
    with pytest.raises(TuningError, match="model must be"):
        PerfRanker("h100", model="nope")
    with pytest.raises(TuningError, match="needs model='rank'"):
        PerfRanker("h100").score(None, None, (1, 1, 1))
