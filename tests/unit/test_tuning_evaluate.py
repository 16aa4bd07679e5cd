"""Evaluation helpers of the tuner: split, regret, portfolio, budget plan, racing; GEMM limits and dispatch."""

import math
import random

import pytest

from wavec.tuning.cost_model import ConfigModel, CostModel, features, fit, predict
from wavec.tuning.evaluate import dedupe, geomean, plan_holdout, portfolio, regret, split_shapes, summary
from wavec.tuning.timing import race_candidates

SHAPES = [
    (m, n, k)
    for m in (1, 16, 64, 128, 512, 2048, 4096, 8192)
    for n, k in ((4096, 4096), (8192, 1024), (12288, 4096), (32000, 8192), (5120, 13824), (1280, 8192))
]


def test_dedupe_keeps_first_seen_order():
    assert dedupe([(1, 2, 3), ("4", 5, 6), (1, 2, 3)]) == [(1, 2, 3), (4, 5, 6)]


def test_split_sizes_disjoint_and_seeded():
    shapes = SHAPES + SHAPES[:10]  # repeats count once
    fit, held = split_shapes(shapes, seed=3)
    assert len(fit) == 25 and len(held) == len(SHAPES) - 25
    assert not set(fit) & set(held) and set(fit) | set(held) == set(SHAPES)
    assert (fit, held) == split_shapes(list(reversed(shapes)), seed=3)  # order of the file does not matter
    assert split_shapes(shapes, seed=4) != (fit, held)


def test_split_is_stratified_and_caps_at_two_thirds():
    fit, held = split_shapes(SHAPES, seed=0)
    assert {s[0] for s in fit} == {s[0] for s in SHAPES}  # every M class is fitted
    per_class = [sum(s[0] == m for s in fit) for m in {s[0] for s in SHAPES}]
    assert max(per_class) - min(per_class) <= 1
    small = SHAPES[:9]
    fit, held = split_shapes(small, seed=0)
    assert len(fit) == 6 and len(held) == 3  # two thirds of 9, at least a third held out


def test_regret_and_summary():
    times = {"a": 1.0, "b": 1.1, "c": 2.0}
    assert regret(times, "a") == 0.0
    assert regret(times, "b") == pytest.approx(0.1)
    s = summary([0.0, 0.1, 0.5])
    assert s["mean"] == pytest.approx(0.2) and s["max"] == 0.5 and s["median"] == 0.1 and s["n"] == 3
    assert math.isnan(summary([])["mean"])
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)


def test_portfolio_covers_every_shape_with_few_configurations():
    times = {
        "s1": {"a": 1.0, "b": 1.01, "c": 3.0},
        "s2": {"a": 2.0, "b": 1.0, "c": 1.5},
        "s3": {"a": 1.0, "b": 5.0, "c": 1.0},
    }
    port = portfolio(times, tol=0.02)
    for ts in times.values():
        assert min(ts[n] for n in port) <= min(ts.values()) * 1.02
    assert port == ["b", "a"] or port == ["b", "c"] or len(port) == 2
    assert portfolio(times, tol=10.0) == ["a"]  # everything is near: the best geomean covers all


def test_plan_keeps_minimum_then_fills_budget():
    held = list(range(10))
    plan = plan_holdout(held, lambda s: 10.0, lambda s: 1.0, min_exhaustive=4, budget_s=70.0)
    # 4 x 10 exhaustive + 6 x 1 pruned = 46; each more exhaustive shape adds 9: 2 more fit (64)
    assert plan.exhaustive == [0, 1, 2, 3, 4, 5] and plan.pruned == [6, 7, 8, 9]
    assert plan.fits and plan.estimate_s == pytest.approx(64.0)
    tight = plan_holdout(held, lambda s: 10.0, lambda s: 1.0, min_exhaustive=4, budget_s=20.0)
    assert tight.exhaustive == [0, 1, 2, 3] and not tight.fits and tight.notes
    roomy = plan_holdout(held, lambda s: 10.0, lambda s: 1.0, min_exhaustive=4, budget_s=1e9)
    assert roomy.exhaustive == held and not roomy.pruned


def test_race_spends_rounds_on_contenders_and_interleaves():
    speed = {"fast": 1.0, "close": 1.05, "slow": 1.5, "ref": 0.5}
    calls = []

    def timer(c, fn):
        calls.append(c)
        return speed[c]

    runners = {c: (lambda: None) for c in speed}
    race = race_candidates(runners, timer, rounds=3, keep_within=0.10, always=("ref",), seed=1)
    assert len(race.samples["slow"]) == 1 and race.dropped["slow"] == 1
    assert len(race.samples["fast"]) == 3 and len(race.samples["close"]) == 3 and len(race.samples["ref"]) == 3
    assert min(race.medians(), key=race.medians().get) == "ref"  # the reference never sets the pace
    assert set(calls[:4]) == set(speed)  # round 1 times everybody before anyone is timed twice
    orders = [tuple(calls[4 + 3 * i : 7 + 3 * i]) for i in range(2)]
    assert all(set(o) == {"fast", "close", "ref"} for o in orders)


def test_race_clock_costs():
    t = [0.0]

    def clock():
        return t[0]

    def timer(c, fn):
        t[0] += {"a": 2.0, "b": 3.0}[c]
        return 1.0

    race = race_candidates({"a": None, "b": None}, timer, rounds=2, clock=clock)
    assert race.cost_s == {"a": 4.0, "b": 6.0}


def test_fit_is_nonnegative_where_it_must_be():
    # three points that a free fit explains with a negative startup: the constrained one cannot
    rows = [(features(c, 132, 10), t) for c, t in ((132, 10e-6), (264, 30e-6), (528, 70e-6))]
    coef = fit(rows)
    assert all(c >= 0 for c in coef)
    assert all(predict(coef, c, 132, 10) > 0 for c in (132, 264, 528))
    assert predict(coef, 1, 132, 1) >= 0  # nothing can make a prediction negative far outside the fitted range


def test_split_covers_grid_fill_and_k():
    from wavec.tuning.evaluate import cover_coords

    fit, held = split_shapes(SHAPES, seed=0)
    fill = [cover_coords(s)[1] for s in SHAPES]
    fit_fill = [cover_coords(s)[1] for s in fit]
    assert min(fit_fill) == min(fill) and max(fit_fill) == max(fill)  # the emptiest and the fullest grid
    assert {s[2] for s in fit} == {s[2] for s in SHAPES}  # every K of the file
    for m in (1, 16, 64):  # small M: the fit shapes are not all full grids
        assert min(cover_coords(s)[1] for s in fit if s[0] == m) < 0  # under one CTA per SM
    assert split_shapes(SHAPES, seed=0, ref_tile=64)[0] != fit  # the fill tile matters


def test_choose_respects_limits_and_falls_back():
    small = ConfigModel("small", (16, 64), 64, 264, (1e-6, 0.0, 0.0, 0.0), limits=(0, 64))
    big = ConfigModel("big", (128, 128), 64, 264, (5e-6, 0.0, 0.0, 0.0), limits=(65, 1 << 62))
    m = CostModel([small, big])
    assert m.choose((1, 4096, 4096)).name == "small"
    assert m.choose((4096, 4096, 4096)).name == "big"  # small predicts less but does not serve M = 4096
    assert [c.name for c in m.rank((4096, 4096, 4096))] == ["big"]
    only_small = CostModel([small])
    assert only_small.choose((4096, 4096, 4096)).name == "small"  # nothing serves: least over all
    assert CostModel.from_json(m.to_json()).configs[0].limits == (0, 64)


def test_gemm_limits_rules():
    from wavec.tuning.gemm import heuristic_candidate, m_limits, serves

    assert m_limits(16) == (0, 64) and m_limits(64)[0] == 17 and m_limits(128)[0] == 65
    heur = heuristic_candidate(1, 4096, 4096)
    assert heur.subs_dict["BLOCK_M"] == 16 and serves(heur, 1) and not serves(heur, 128)
    assert "waves=" in heur.label and heur.kwargs_dict["waves"] == tuple(heur.kwargs_dict["waves"])


def _synthetic_times(cands, shapes, seed=0):
    """A made-up machine whose times follow the cost model's form exactly (plus 1 % noise); 528 slots is
    132 SMs x the 4 workgroups per SM that the metadata below allows."""
    from wavec.tuning.gemm import serves

    rng = random.Random(seed)
    out = {}
    for s in shapes:
        m, n, k = s
        row = {}
        for c in cands:
            if not serves(c, m):
                continue
            d = c.subs_dict
            ctas = -(-m // d["BLOCK_M"]) * -(-n // d["BLOCK_N"])
            work = -(-k // d["BLOCK_K"])
            eff = {16: 0.5, 64: 0.8, 128: 1.0}[d["BLOCK_M"]] * (1.0 if d["BLOCK_N"] == 128 else 0.9)
            per_wave = 1e-8 * d["BLOCK_M"] * d["BLOCK_N"] * d["BLOCK_K"] / eff / 64
            t = 3e-6 + work * (per_wave * -(-ctas // 528) + 2e-10 * d["BLOCK_N"] * ctas)
            row[c] = t * math.exp(rng.gauss(0, 0.01))
        out[s] = row
    return out


def test_dispatch_model_and_tuning_cache_dispatch(tmp_path, monkeypatch):
    monkeypatch.setenv("WAVEC_CACHE_DIR", str(tmp_path))
    from wavec.tuning.gemm import dispatch, dispatch_model, fit_gemm_model, store_tuned
    from wavec.tuning.search import Candidate

    cands = [
        Candidate(
            (("waves", (2, 2)),), (("BLOCK_K", 64), ("BLOCK_M", bm), ("BLOCK_N", bn), ("GROUP_M", 8), ("NUM_STAGES", 3))
        )
        for bm in (16, 64, 128)
        for bn in (64, 128)
    ]
    fit_shapes, held = split_shapes(SHAPES, seed=0)
    times = _synthetic_times(cands, SHAPES)
    meta = {c: {"registers": 128, "block": [128, 1, 1], "shared_bytes": 32768} for c in cands}
    model, port, info = dispatch_model({s: times[s] for s in fit_shapes}, meta, sms=132)
    assert port and info["kept"] == len(port) <= info["fitted"] == len(cands)
    regrets = [regret({c.label: t for c, t in times[s].items()}, model.choose(s).name) for s in held]
    assert summary(regrets)["mean"] < 0.03  # the model's own form: it must find the best
    full = fit_gemm_model({s: times[s] for s in fit_shapes}, meta, sms=132)
    assert {c.name for c in full.configs} == {c.label for c in cands}

    import wavec as wc

    measured = {s: times[s] for s in SHAPES[:5]}
    n = store_tuned(wc.f16, measured, meta, target="sm_90", gpu="test-gpu", model=model, candidates=cands)
    assert n == len(
        {tuple(1 << (v - 1).bit_length() if (i or v >= 16) and v > 1 else v for i, v in enumerate(s)) for s in measured}
    )
    monkeypatch.setattr("wavec.tuning.gemm.gpu_name", lambda: "test-gpu")
    monkeypatch.setattr("wavec.tuning.search.gpu_name", lambda: "test-gpu")
    s0 = SHAPES[0]
    subs, waves, source = dispatch(*s0, wc.f16, "sm_90")
    assert source == "cache"
    best = min(measured[s0], key=measured[s0].get)
    assert {str(k): v for k, v in subs.items()} == best.subs_dict and waves == (2, 2)
    unseen = (4096, 7000, 3000)
    subs, waves, source = dispatch(*unseen, wc.f16, "sm_90")
    assert source == "model"
    assert {str(k): v for k, v in subs.items()} == dict(
        next(c for c in cands if c.label == model.choose(unseen).name).subs
    )


def test_split_caps_fit_shapes_per_configuration_class():
    """``classes``: the cap applies per class of configurations (GEMM tile heights serving the shape's M),
    not to the total.  Hand-checked with a cap of 4, dealt round-robin over M = 1, 16, 64, ...: 16-row
    tiles serve M <= 64, 64-row ones M >= 17, 128-row ones M >= 65.  Round 1: M = 1, 16, 64 fill the
    16-row class to 3 (64 also counts for the 64-row class), 128, 512, 2048 fill the 64-row class to 4;
    4096 and 8192 would overfill it.  Round 2: only M = 1 is open (16-row class to 4).  So 7 shapes."""
    from collections import Counter

    from wavec.tuning.gemm import fit_classes

    fit, held = split_shapes(SHAPES, max_fit=4, seed=0, classes=fit_classes((16, 64, 128)))
    assert Counter(s[0] for s in fit) == {1: 2, 16: 1, 64: 1, 128: 1, 512: 1, 2048: 1}
    assert len(held) == len(SHAPES) - 7
    fit, held = split_shapes(SHAPES, max_fit=25, seed=0, classes=fit_classes((16, 64, 128)))
    classes = fit_classes((16, 64, 128))
    per_class = Counter(c for s in fit for c in classes(s))
    assert max(per_class.values()) <= 25 and len(fit) > 25  # more shapes in all, <= 25 per configuration
    assert len(fit) <= 2 * len(SHAPES) // 3 and {s[0] for s in fit} == {s[0] for s in SHAPES}
    assert split_shapes(SHAPES, max_fit=25, seed=0)[0] != fit  # without classes: 25 in all
