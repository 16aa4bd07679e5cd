"""benchmarks/retime_rank_top.py's CPU parts: labels, held-out shape selection, candidate sets from the
ranking model's order, the regret arithmetic on a hand-made timing table, the compile count."""

from __future__ import annotations

import math
import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))

import retime_rank_top as R  # noqa: E402

WG = "BLOCK_K=64 BLOCK_M=128 BLOCK_N=256 GROUP_M=8 NUM_STAGES=4 waves=[2, 1]"
MS = "BLOCK_K=32 BLOCK_M=64 BLOCK_N=128 GROUP_M=8 NUM_STAGES=3 waves=[2, 2]"


def test_parse_label() -> None:
    subs, waves = R.parse_label(WG)
    assert subs == {"BLOCK_K": 64, "BLOCK_M": 128, "BLOCK_N": 256, "GROUP_M": 8, "NUM_STAGES": 4}
    assert waves == (2, 1)
    assert R.short(MS) == "64x128x32/s3/w2x2"
    with pytest.raises(ValueError):
        R.parse_label("BLOCK_K=64 BLOCK_M=128")


def test_parse_label_matches_the_race_loader() -> None:
    # the race files are read by refit_cost_model.parse_label (a Candidate): the same tile either way
    from refit_cost_model import parse_label

    cand = parse_label(WG)
    subs, waves = R.parse_label(WG)
    assert cand.subs_dict == subs and tuple(cand.kwargs_dict["waves"]) == waves


def test_held_out_drops_trained_shapes() -> None:
    shapes = [(512, 4096, 4096), (16, 4096, 4096), (128, 12288, 4096)]
    assert R.held_out(shapes, {(16, 4096, 4096)}) == [(128, 12288, 4096), (512, 4096, 4096)]


def test_select_shapes_worst_and_spread() -> None:
    held = [(m, 4096, 4096) for m in range(32, 32 * 13, 32)]  # 12 shapes
    prior = {held[3]: 0.40, held[7]: 0.10, held[9]: 0.25, held[0]: 0.0}
    chosen = R.select_shapes(held, 6, prior)
    assert len(chosen) == 6 and len({s for s, _ in chosen}) == 6
    worst = [s for s, why in chosen if why == "worst"]
    assert worst == [held[3], held[9]]  # 6 // 3 of them, largest stored regret first
    spread = [s for s, why in chosen if why == "spread"]
    assert len(spread) == 4 and not set(spread) & set(worst)
    assert spread[0] == held[0] and [held.index(s) for s in spread] == sorted(held.index(s) for s in spread)
    assert chosen[0][1] == "spread" and chosen[1][1] == "worst"  # interleaved
    assert [s for s, _ in R.select_shapes(held[:2], 6, {})] == held[:2]  # fewer than asked: all of them
    assert R.select_shapes(held, 0, prior) == []


def test_candidate_set_from_the_shipped_ranking_model() -> None:
    # the real h200 weights order 8 made-up candidates; the set is their top 5 plus the stored best two
    from wavec.perf import rank
    from wavec.perf.estimator import INPUTS

    ranker = rank.load(rank.trained_for("h200", "wgmma"))
    rng = np.random.default_rng(0)
    labels = [
        f"BLOCK_K=64 BLOCK_M={bm} BLOCK_N={bn} GROUP_M=8 NUM_STAGES=4 waves=[1, 1]"
        for bm in (64, 128)
        for bn in (64, 128, 192, 256)
    ]
    conf = np.array([rank.config_inputs((512, 4096, 4096), *R.parse_label(c), "wgmma") for c in labels])
    perf = rng.normal(size=(len(labels), len(INPUTS)))
    order = [labels[i] for i in ranker.order(perf, conf)]
    assert order[0] == labels[int(np.argmin(ranker.scores(perf, conf)))]
    stored = {c: 1e-5 * (1 + i) for i, c in enumerate(reversed(order))}  # the model's last is the race's best
    s = R.candidate_set(order, stored)
    assert s["order"] == order[:5] and s["best"] == order[-1] and s["second"] == order[-2]
    assert s["candidates"] == [*order[:5], order[-1], order[-2]]
    assert s["stored_pick"] == pytest.approx(stored[order[0]] / stored[order[-1]] - 1)
    s = R.candidate_set(order, {c: 1e-5 * (1 + i) for i, c in enumerate(order)})  # best already in the top 5
    assert s["candidates"] == order[:5] and s["stored_pick"] == 0.0


def test_regrets_on_a_hand_made_table() -> None:
    entry = {"order": ["a", "b", "c", "d", "e"], "best": "f", "second": "c"}
    entry["stored"] = {"a": 12e-6, "b": 11e-6, "c": 10.5e-6, "d": 13e-6, "e": 14e-6, "f": 9e-6}
    times = {"cuBLAS": 5e-6, "a": 12e-6, "b": 11e-6, "c": 10.5e-6, "d": 10e-6, "e": None, "f": 10.2e-6}
    r = R.regrets(times, entry)
    assert r["pick"] == pytest.approx(12 / 10 - 1)  # the pick is not the best: d, 4th of the model's
    assert r["top3"] == pytest.approx(10.5 / 10 - 1)
    assert r["top5"] == pytest.approx(0.0)  # d; e failed and counts as never the best
    assert r["race_best"] == pytest.approx(10.2 / 10 - 1)  # cuBLAS (5 us) is an anchor, not a candidate
    assert r["best_vs_stored"] == pytest.approx(10.2 / 9 - 1)
    r = R.regrets({**times, "a": None}, entry)
    assert r["pick"] is None and r["top3"] == pytest.approx(0.05)


def test_summary_and_tolerance() -> None:
    rows = []
    for why, pick in (("spread", 0.02), ("worst", 0.10)):
        reg = {"pick": pick, "top3": 0.0, "top5": 0.0, "race_best": 0.01, "best_vs_stored": -0.05}
        rows.append({"race": "tune_wg", "dtype": "f16", "why": why, "stored_pick": 0.5, "regret": reg})
    text = R.summary(rows)
    assert "| tune_wg | f16 | 2 | all | 6.00 / 10.0 | 0.00 / 0.0 |" in text
    assert "| tune_wg | f16 | 1 | spread | 2.00 / 2.0 |" in text
    assert R.tolerance(8192, 300.0) > R.tolerance(64, 300.0) > 0
    assert R.tolerance(4096, 256.0) < 1.0  # a wrong K tile is off by O(sqrt(K)): caught
    assert math.isfinite(R.tolerance(1, 0.0))


def test_interleave_and_compile_count() -> None:
    base = {"mma": "wgmma", "why": "spread", "candidates": [WG], "compile_s": {WG: 2.0}}
    plan = [
        {**base, "race": "tune_wg", "dtype": "f16", "shape": [512, 4096, 4096]},
        {**base, "race": "tune_wg", "dtype": "f16", "shape": [2048, 12288, 4096]},
        {**base, "race": "tune_wg", "dtype": "bf16", "shape": [512, 4096, 4096]},
    ]
    assert [(e["dtype"], e["shape"][0]) for e in R.interleave(plan)] == [("f16", 512), ("bf16", 512), ("f16", 2048)]
    est = R.estimate(plan, rounds=3, workers=2)
    assert est["compiles"] == 2 and est["pairs"] == 3  # one binary per configuration and dtype
    assert est["compile_s"] == pytest.approx(10.0 + 4.0 / 2)
    assert est["time_s"] == pytest.approx(6 * 3 * R.BENCH_S + 3 * R.SHAPE_S)
