"""The GEMM configuration ranking model (``wavec.perf.rank``, ``wavec.perf.rank_train``): the listwise loss
by hand, training lowers it and recovers a synthetic ranking on lists it never saw, numpy inference
equals a hand evaluation, inputs are read by name, and the shipped weights load."""

import math

import numpy as np
import pytest
import torch

from wavec.errors import OptionError
from wavec.perf import rank as R
from wavec.perf import rank_train as RT
from wavec.perf.estimator import INPUTS, MLP, Ensemble


def _synthetic(rng: np.random.Generator, lists: int, cands: int = 24, d: int = 4):
    """Lists whose log time is a nonlinear function of the candidate's inputs plus a large random offset
    per list (which a ranking model must ignore) and a little noise."""
    out = []
    for _ in range(lists):
        x = rng.normal(size=(cands, d))
        log_t = 0.3 * x[:, 0] + 0.2 * np.abs(x[:, 1]) - 0.1 * x[:, 2] * x[:, 3] + rng.normal(scale=5.0)
        out.append((x, np.exp(log_t + rng.normal(scale=0.005, size=cands))))
    return out


def test_rank_loss_by_hand():
    y = np.array([[0.0, 0.1, 0.3]])
    s = np.array([[0.2, 0.0, 0.5]])
    tau, w = 0.1, 2.0
    target = np.exp(-y[0] / tau) / np.exp(-y[0] / tau).sum()
    log_q = -s[0] / tau - np.log(np.exp(-s[0] / tau).sum())
    d = s[0] - y[0]
    expected = -(target * log_q).sum() + w * np.mean((d - d.mean()) ** 2)
    mask = torch.ones((1, 3), dtype=torch.bool)
    got = RT.rank_loss(torch.tensor(s), torch.tensor(y), mask, tau, w)
    assert float(got) == pytest.approx(expected, rel=1e-12)
    # a padded slot changes nothing; a constant added to one list's scores changes nothing
    s4, y4 = np.append(s, [[-9.0]], axis=1), np.append(y, [[0.0]], axis=1)
    m4 = torch.tensor([[True, True, True, False]])
    assert float(RT.rank_loss(torch.tensor(s4 + 3.0), torch.tensor(y4), m4, tau, w)) == pytest.approx(expected)


def test_pad_lists_clips_and_rejects_short_lists():
    x, y, mask = RT.pad_lists([(np.ones((3, 2)), np.array([1.0, 1.5, 100.0])), (np.ones((2, 2)), np.array([2.0, 1.0]))])
    assert x.shape == (2, 3, 2) and mask.tolist() == [[True, True, True], [True, True, False]]
    np.testing.assert_allclose(y[0], [0.0, math.log(1.5), RT.CLIP])
    np.testing.assert_allclose(y[1, :2], [math.log(2.0), 0.0])
    with pytest.raises(ValueError, match="two or more"):
        RT.pad_lists([(np.ones((1, 2)), np.array([1.0]))])
    with pytest.raises(ValueError, match="positive"):
        RT.pad_lists([(np.ones((2, 2)), np.array([1.0, 0.0]))])


def _loss(net: MLP, lists) -> float:
    x, y, mask = RT.pad_lists(lists)
    scores = net.log_efficiency(x.reshape(-1, x.shape[2])).reshape(mask.shape)
    return float(RT.rank_loss(torch.tensor(scores), torch.tensor(y), torch.tensor(mask)))


def test_training_lowers_the_loss_and_recovers_a_synthetic_ranking():
    rng = np.random.default_rng(3)
    train, test = _synthetic(rng, 60), _synthetic(rng, 30)
    start = RT.fit_net(train, steps=0, seed=0)
    fitted = RT.fit_net(train, steps=600, seed=0, weight_decay=1e-4)
    assert _loss(fitted, train) < 0.5 * _loss(start, train)
    before, after = RT.regrets(start.log_efficiency, test), RT.regrets(fitted.log_efficiency, test)
    # the lists' times span ~exp(+-1): a random pick is ~20-40 % off; the fitted one a few percent at most
    assert after["top1"].mean() < 0.03 and after["top3"].mean() < 0.01
    assert after["top1"].mean() < 0.3 * before["top1"].mean()
    # Kendall-like check on unseen lists: the score orders most pairs as the times do
    x, t = test[0]
    s = fitted.log_efficiency(x)
    i, j = np.triu_indices(len(t), 1)
    assert np.mean(np.sign(s[i] - s[j]) == np.sign(np.log(t[i]) - np.log(t[j]))) > 0.85


def test_fit_ranker_chooses_on_validation_and_is_reproducible(tmp_path):
    rng = np.random.default_rng(5)
    train, val = _synthetic(rng, 20, cands=12), _synthetic(rng, 6, cands=12)
    names = ("a", "b", "c", "d")
    kw = dict(members=2, weight_decays=(1e-4, 1.0), steps=150, meta={"shapes": [[1, 2, 3]]})
    ranker = RT.fit_ranker(train, val, names, **kw)
    assert ranker.names == names and len(ranker.net.members) == 2
    assert set(ranker.meta["validation"]) == {"0.0001", "1.0"} and ranker.meta["shapes"] == [[1, 2, 3]]
    chosen = ranker.meta["validation"][str(ranker.meta["weight_decay"])]["top1"][0]
    assert chosen == min(v["top1"][0] for v in ranker.meta["validation"].values())
    again = RT.fit_ranker(train, val, names, **kw)
    x = rng.normal(size=(5, 4))
    np.testing.assert_array_equal(ranker.net.log_efficiency(x), again.net.log_efficiency(x))
    ranker.save(tmp_path / "r.npz")
    back = R.Ranker.read(tmp_path / "r.npz")
    assert back.names == names and back.meta == ranker.meta
    np.testing.assert_allclose(back.net.log_efficiency(x), ranker.net.log_efficiency(x), rtol=1e-5)


def _hand_ranker() -> R.Ranker:
    """Two perf inputs and one configuration input, a 3-2-1 ReLU net and a second member (the mean of two)."""
    w0 = np.array([[1.0, -2.0, 0.5], [0.0, 1.0, 1.0]])
    b0 = np.array([0.1, -0.2])
    w1, b1 = np.array([[2.0, -1.0]]), np.array([0.3])
    a = MLP(np.array([1.0, 0.0, 4.0]), np.array([2.0, 1.0, 1.0]), (w0, w1), (b0, b1))
    b = MLP(np.zeros(3), np.ones(3), (np.array([[1.0, 1.0, 1.0]]),), (np.array([0.0]),))
    return R.Ranker(("log2_tasks", "wave_fill", "stages"), Ensemble((a, b)))


def test_inference_equals_a_hand_computation():
    ranker = _hand_ranker()
    perf = np.zeros((2, len(INPUTS)))
    perf[:, INPUTS.index("log2_tasks")] = [3.0, 1.0]
    perf[:, INPUTS.index("wave_fill")] = [0.5, 2.0]
    conf = np.stack(
        [
            R.config_inputs(
                (64, 128, 256), {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "NUM_STAGES": st, "GROUP_M": 8}, (2, 2)
            )
            for st in (4, 3)
        ]
    )
    expected = []
    for tasks, fill, st in ((3.0, 0.5, 4.0), (1.0, 2.0, 3.0)):
        z = np.array([(tasks - 1.0) / 2.0, fill, st - 4.0])
        h = np.maximum(np.array([z[0] - 2 * z[1] + 0.5 * z[2] + 0.1, z[1] + z[2] - 0.2]), 0.0)
        expected.append(((2 * h[0] - h[1] + 0.3) + (tasks + fill + st)) / 2)
    np.testing.assert_allclose(ranker.scores(perf, conf), expected, rtol=1e-12)
    assert ranker.order(perf, conf).tolist() == list(np.argsort(expected))


def test_config_inputs_and_inputs_by_name():
    subs = {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "NUM_STAGES": 3, "GROUP_M": 8}
    got = dict(zip(R.CONFIG_INPUTS, R.config_inputs((512, 1024, 4096), subs, (2, 4)), strict=True))
    assert got == {
        "log2_m": 9.0,
        "log2_n": 10.0,
        "log2_k": 12.0,
        "log2_block_m": 7.0,
        "log2_block_n": 6.0,
        "log2_block_k": 5.0,
        "stages": 3.0,
        "log2_group_m": 3.0,
        "log2_waves_m": 1.0,
        "log2_waves_n": 2.0,
        "wgmma": 0.0,
    }
    perf = np.arange(6.0).reshape(2, 3)
    conf = np.arange(22.0).reshape(2, 11)
    x = R.rank_inputs(perf, conf, ("p", "q", "r"), ("r", "stages", "p"))
    np.testing.assert_array_equal(x, [[2.0, 6.0, 0.0], [5.0, 17.0, 3.0]])
    with pytest.raises(OptionError, match="not given by the perf model"):
        R.rank_inputs(perf, conf, ("p", "q", "r"), ("gone",))


def test_shipped_rankers_load_and_name_their_training_shapes():
    have = R.shipped()
    assert {"h100", "h200", "all"} <= set(have)
    for key in have:
        ranker = R.load(key)
        assert ranker.meta["trained_on"] == key and ranker.meta["shapes"]
        assert set(ranker.names) <= set(INPUTS) | set(R.CONFIG_INPUTS)
        assert not set(map(tuple, ranker.meta["validation_shapes"])) - set(map(tuple, ranker.meta["shapes"]))
        scores = ranker.scores(np.zeros((3, len(INPUTS))), np.zeros((3, len(R.CONFIG_INPUTS))))
        assert scores.shape == (3,) and np.all(np.isfinite(scores))
    assert R.trained_for("h100") == "h100" and R.trained_for("a100") == "all"
    # wgmma was raced on the H200 only: its model covers the kind, and every GPU finds one that does
    assert R.load("h200").covers("wgmma") and "wgmma" in R.load("h200").names
    assert "tune_wg" in R.load("h200").meta["races"]
    for key in ("h100", "h200", "a100"):
        assert R.load(R.trained_for(key, "wgmma")).covers("wgmma")
    with pytest.raises(OptionError, match="no ranking model trained on nope"):
        R.load("nope")


def test_the_mma_kind_is_an_input():
    subs = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "NUM_STAGES": 4, "GROUP_M": 8}
    sync = R.config_inputs((2048, 4096, 4096), subs, (2, 1))
    wg = R.config_inputs((2048, 4096, 4096), subs, (2, 1), "wgmma")
    at = R.CONFIG_INPUTS.index("wgmma")
    assert sync[at] == 0.0 and wg[at] == 1.0
    np.testing.assert_array_equal(np.delete(sync, at), np.delete(wg, at))
    with pytest.raises(OptionError, match="MMA kind must be one of"):
        R.config_inputs((1, 1, 1), subs, (1, 1), "mma")


def test_weights_without_the_kind_rank_mma_sync_only():
    old = _hand_ranker()  # names without "wgmma": what the first shipped models were trained on
    assert old.covers("mma_sync") and not old.covers("wgmma")
    perf = np.zeros((2, len(INPUTS)))
    subs = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "NUM_STAGES": 3, "GROUP_M": 8}
    sync = np.stack([R.config_inputs((64, 64, 64), subs, (1, 1))] * 2)
    assert np.all(np.isfinite(old.scores(perf, sync)))
    wg = np.stack([R.config_inputs((64, 64, 64), subs, (1, 1), "wgmma")] * 2)
    with pytest.raises(OptionError, match="mma.sync races only"):
        old.scores(perf, wg)
    # with the input among its names the same weights read it: the kind moves the score
    a = MLP(np.zeros(2), np.ones(2), (np.array([[1.0, 3.0]]),), (np.array([0.0]),))
    new = R.Ranker(("stages", "wgmma"), Ensemble((a,)))
    assert new.covers("wgmma")
    np.testing.assert_allclose(new.scores(perf, wg) - new.scores(perf, sync), 3.0)


SMALL_WG = {  # a corner of WGMMA_SPACE: a dozen legal tiles, ~15 s of compiles on a CPU
    "BLOCK_M": [64, 128],
    "BLOCK_N": [64, 128],
    "BLOCK_K": [64],
    "NUM_STAGES": [3, 4],
    "GROUP_M": [8],
    "waves": [(1, 1), (2, 1)],
}


def test_matmul_rank_picks_the_models_best_wgmma_tile(monkeypatch):
    from rank_scores import hand_scores

    import wavec as wc
    from wavec.kernels import gemm as gm
    from wavec.perf.gpus import gpu
    from wavec.tuning import plan, rank_plan
    from wavec.tuning.gemm import FACTORY, _fixed
    from wavec.tuning.legality import legal
    from wavec.tuning.search import _source

    monkeypatch.setattr(plan, "WGMMA_SPACE", SMALL_WG)
    monkeypatch.setattr(rank_plan, "_CHOSEN", {})
    m, n, k = shape = (200, 384, 512)
    subs, waves = gm._ranked(m, n, k, wc.f16, plan.GemmRequest(mma="wgmma"))  # CPU: the H100's model key
    pool = rank_plan.ranked_candidates(wc.f16, "sm_90a", None, "wgmma")
    spec, model = gpu("h100"), R.load(R.trained_for("h100", "wgmma"))
    assert all("wgmma" in kernel.artifact.mlir for kernel in pool.values())
    scores = hand_scores(pool, shape, spec, model, "wgmma")
    assert len(scores) >= 8 and len(set(scores.values())) > 1
    best = min(scores, key=scores.__getitem__)
    assert dict(subs) == best.symbol_subs() and waves == tuple(best.kwargs_dict["waves"])
    source = _source(FACTORY, _fixed(wc.f16, "wgmma"))  # the pick is a legal wgmma tile of the space
    assert legal(source.build(best.kwargs), best.subs_dict, "sm_90a")[0]
    rank_plan._CHOSEN.clear()  # deterministic: a fresh choice is the same tile
    assert gm._ranked(m, n, k, wc.f16, plan.GemmRequest(mma="wgmma")) == (subs, waves)
    # int8 GEMMs were never raced: no model ranks them
    with pytest.raises(wc.WavecError, match="f16/bf16"):
        gm._ranked(m, n, k, wc.i8, plan.GemmRequest(mma="wgmma"))


def test_fit_ranker_member_seeds_offset():
    rng = np.random.default_rng(7)
    train, val = _synthetic(rng, 8, cands=6), _synthetic(rng, 3, cands=6)
    kw = dict(members=2, weight_decays=(1e-3,), steps=20)
    first = RT.fit_ranker(train, val, ("a", "b", "c", "d"), **kw)
    later = RT.fit_ranker(train, val, ("a", "b", "c", "d"), first_seed=1, **kw)
    assert first.meta["member_seeds"] == [0, 1] and later.meta["member_seeds"] == [1, 2]
    x = rng.normal(size=(4, 4))
    # seed 1 is the second member of one and the first of the other: the same network
    np.testing.assert_array_equal(first.net.members[1].log_efficiency(x), later.net.members[0].log_efficiency(x))
    assert not np.allclose(first.net.log_efficiency(x), later.net.log_efficiency(x))
