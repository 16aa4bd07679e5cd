"""``benchmarks/tune_gemm_report.evaluate``: the race's and the head-to-head (confirmed) regrets, top-2
pruning and the measuring time it saves, on a hand-made shape result."""

import pathlib
import sys

import pytest

import wavec as wc
from wavec.tuning.cost_model import ConfigModel, CostModel
from wavec.tuning.search import Candidate

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
from tune_gemm_report import DtypeRun, Models, ShapeResult, evaluate  # noqa: E402


def _cand(bm: int, bn: int) -> Candidate:
    return Candidate(
        (("waves", (2, 2)),), (("BLOCK_K", 64), ("BLOCK_M", bm), ("BLOCK_N", bn), ("GROUP_M", 8), ("NUM_STAGES", 3))
    )


def test_race_and_confirmed_regret():
    a, b, c = _cand(128, 128), _cand(128, 256), _cand(64, 128)
    # predicted time = the startup coefficient: the model ranks b, a, c
    model = CostModel(
        [ConfigModel(x.label, (64, 64), 64, 132, (t, 0, 0, 0, 0, 0, 0)) for x, t in ((a, 2e-3), (b, 1e-3), (c, 3e-3))]
    )
    run = DtypeRun("f16", wc.f16, candidates=[a, b, c])
    shape = (4096, 4096, 4096)
    # the race: a fastest (1.0 ms), the model's pick b 20 % slower; re-timed head to head, b is 4.5 % slower
    run.results[shape] = ShapeResult(
        shape,
        "exhaustive",
        {a: 1.0e-3, b: 1.2e-3, c: 1.5e-3},
        1.3e-3,
        0.9e-3,
        {a: 0.1, b: 0.1, c: 0.1},
        {a: 3, b: 3, c: 1},
        0.5,
        confirmed={a: 1.10e-3, b: 1.15e-3},
    )
    head, rows = evaluate(
        run, {"models": Models(model, model, [b.label])}, 2, lambda s, cand: {"bound": 1e-4, "limiter": "mma"}
    )
    assert head["regret"]["max"] == pytest.approx(0.2)
    assert head["regret_confirmed"]["max"] == pytest.approx(1.15 / 1.10 - 1)
    assert head["prune_regret"][2]["max"] == 0.0 and head["top2_regret_confirmed"]["max"] == 0.0  # a is in the top 2
    assert head["prune_regret"][1]["max"] == pytest.approx(0.2)
    assert head["tuning_s_exhaustive"] == pytest.approx(0.3) and head["tuning_s_top2"] == pytest.approx(0.2)
    assert rows[0]["regret_model_confirmed"] == pytest.approx(1.15 / 1.10 - 1)
    assert rows[0]["model_config"] == b.label and rows[0]["tuned_config"] == a.label
