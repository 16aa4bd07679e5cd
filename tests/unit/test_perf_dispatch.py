"""``benchmarks/perf_dispatch.py``'s pieces: the regret of a pick and of a top N, and a race candidate's
configuration string naming exactly the kernel the tuner raced (same MLIR)."""

import pathlib
import sys

import pytest

import wavec as wc
from wavec.perf.cases import Case, compile_case
from wavec.tuning.gemm import FACTORY, _fixed
from wavec.tuning.search import Candidate, _source

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))

import perf_dispatch  # noqa: E402


def test_regrets_of_the_pick_and_the_top_n():
    times = {"a": 1.0, "b": 1.2, "c": 1.5, "d": 2.0, "e": 3.0, "f": 4.0}
    predicted = {"c": 1.0, "b": 2.0, "d": 3.0, "e": 4.0, "f": 5.0, "a": 6.0}  # the best ranked last
    r = perf_dispatch._regrets(times, predicted)
    assert r["top1"] == pytest.approx(0.5)  # c: 1.5 / 1.0 - 1
    assert r["top3"] == pytest.approx(0.2)  # best of c, b, d: b
    assert r["top5"] == pytest.approx(0.2)
    assert r["top10"] == pytest.approx(0.0)  # all six


def test_case_config_is_the_raced_kernel():
    cand = Candidate(
        (("waves", (2, 2)),), (("BLOCK_K", 32), ("BLOCK_M", 64), ("BLOCK_N", 128), ("GROUP_M", 8), ("NUM_STAGES", 3))
    )
    key = perf_dispatch.case_config(cand, "mma_sync")
    assert key == "gemm_mma_sync|bm=64;bn=128;bk=32;st=3;gm=8;w=2x2;ws=0;pe=0;se=0;pf=1;c=f32"
    family, config = key.split("|")
    ours = compile_case(Case(family, "gemm", "f16", config, "1x1x8"), "sm_90")
    src = _source(FACTORY, _fixed(wc.f16))
    raced = wc.compile(src.build(cand.kwargs), cand.symbol_subs(), target="sm_90", backend="emulator")
    assert ours.artifact.mlir == raced.artifact.mlir


def _cand(bm: int, stages: int) -> Candidate:
    subs = (("BLOCK_K", 32), ("BLOCK_M", bm), ("BLOCK_N", 64), ("GROUP_M", 8), ("NUM_STAGES", stages))
    return Candidate((("waves", (2, 2)),), subs)


def test_candidate_rows_pair_inputs_configurations_and_times():
    from wavec.perf.rank import CONFIG_INPUTS

    a, b, shape = _cand(64, 2), _cand(128, 3), (256, 512, 1024)
    data = {
        "mma": "mma_sync",
        "times": {shape: {a: 2e-5, b: 1e-5}},
        "metadata": {a: {"registers": 80}, b: {"registers": 96}},
    }
    race = {"data": data, "gpu": "h100", "race_registers": True}
    inputs = {
        (perf_dispatch.case_config(a, "mma_sync"), shape, "h100", 80): ([1.0, 2.0], 3.0),
        (perf_dispatch.case_config(b, "mma_sync"), shape, "h100", 96): ([4.0, 5.0], 6.0),
    }
    cands, perf, conf, times = perf_dispatch.candidate_rows(race, inputs, shape)
    assert cands == [a, b] and perf.tolist() == [[1.0, 2.0], [4.0, 5.0]] and times.tolist() == [2e-5, 1e-5]
    got = [dict(zip(CONFIG_INPUTS, row, strict=True)) for row in conf]
    assert [g["log2_block_m"] for g in got] == [6.0, 7.0] and [g["stages"] for g in got] == [2.0, 3.0]
    assert all(g["log2_m"] == 8.0 and g["log2_k"] == 10.0 for g in got)


def test_refit_load_leaves_out_pruned_shapes(tmp_path):
    import json

    from refit_cost_model import load

    a, b = _cand(64, 2), _cand(128, 3)
    rows = [
        {"shape": [64, 64, 64], "split": "fit", "t": [[0, 1e-5, 3], [1, 2e-5, 3]]},
        {"shape": [128, 64, 64], "split": "exhaustive", "t": [[0, 1e-5, 3], [1, 2e-5, 3]]},
        {"shape": [256, 64, 64], "split": "pruned", "t": [[1, 2e-5, 3]]},
    ]
    raw = {"labels": [a.label, b.label], "metadata": [{}, {}], "space": [0, 1], "shapes": rows}
    (tmp_path / "times.json").write_text(json.dumps({"f16": raw}))
    data = load(tmp_path / "times.json", "f16")
    assert set(data["times"]) == {(64, 64, 64), (128, 64, 64)} and data["times"][(128, 64, 64)] == {a: 1e-5, b: 2e-5}


def test_rank_regrets_flags_one_sample_picks_far_off_their_twin(tmp_path):
    import json

    import rank_regrets

    a, b = "BLOCK_M=64 w=1", "BLOCK_M=128 w=1"
    race = {"f16": {"labels": [a, b], "shapes": []}, "bf16": {"labels": [a, b], "shapes": []}}
    # shape 1: a timed once in f16 at 2x its bf16 time (bf16: three samples) -> suspect; shape 2: a's f16
    # time is one sample but near its twin -> kept; shape 3: 3x its twin but timed thrice in f16 -> kept
    for shape, (fa, na), ba in (([1, 2, 3], (2.0, 1), 1.0), ([4, 5, 6], (1.1, 1), 1.0), ([7, 8, 9], (3.0, 3), 1.0)):
        race["f16"]["shapes"].append({"shape": shape, "t": [[0, fa, na], [1, 1.0, 3]]})
        race["bf16"]["shapes"].append({"shape": shape, "t": [[0, ba, 3], [1, 1.0, 3]]})
    path = tmp_path / "times.json"
    path.write_text(json.dumps(race))
    timed = rank_regrets.samples(path)
    assert timed["f16"][((1, 2, 3), a)] == (2.0, 1) and timed["bf16"][((7, 8, 9), b)] == (1.0, 3)
    rows = [{"shape": s, "rank_pick": a, "rank_top1": t - 1.0} for s, t in (([1, 2, 3], 2.0), ([4, 5, 6], 1.1))]
    rows.append({"shape": [7, 8, 9], "rank_pick": a, "rank_top1": 2.0})
    got = rank_regrets.suspects({"dtype": "f16", "rows": rows}, timed, 1.5)
    assert got == [([1, 2, 3], a, 2.0, 1.0)]
    assert rank_regrets.suspects({"dtype": "bf16", "rows": rows}, timed, 1.5) == []
