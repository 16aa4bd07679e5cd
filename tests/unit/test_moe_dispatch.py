"""Routing-aware MoE dispatch without a GPU (``wavec/tuning/moe.py``, ``wavec/kernels/moe_dispatch.py``): the
model shapes agree with ``moe_shapes.csv``; the region rules and the configuration space per model (counts,
which knobs apply); the shared-memory estimate agrees with the pass pipeline's; CTA-count features from a
histogram against a hand count; the NNLS fit recovers known coefficients from synthetic timings; the
table's JSON round trip through the tuning cache; the device-side choice (torch, run here on the CPU)
equals the literal model's numpy argmin on random histograms; the CUDA-graph-mode helper; the CLI's usage
errors."""

from __future__ import annotations

import csv
import pathlib
import random

import numpy as np
import pytest
import torch

import wavec as wc
from wavec.__main__ import main
from wavec.errors import ArgumentError, TuningError
from wavec.kernels import fused_moe_kernels as fk
from wavec.kernels import moe_dispatch as md
from wavec.kernels.fused_moe import MoeConfig, static_config
from wavec.tuning import legality
from wavec.tuning import moe as tm
from wavec.tuning.plan import mma_type_for

SHAPES_CSV = pathlib.Path(__file__).parents[2] / "benchmarks" / "data" / "moe_shapes.csv"
H100 = (132, 50 << 20)
# candidates per model on the H100 before compiling (the region rules' space); the legal pool is counted
# on the GPU host by `python -m wavec tune moe` (it compiles every candidate)
COUNTS = {
    "OLMoE-1B-7B": 220, "Qwen3-30B-A3B": 220, "Mixtral-8x7B-TP1": 209, "Mixtral-8x7B-TP2": 209,
    "DeepSeek-V2-Lite": 146, "DeepSeek-V3-TP8": 178,
}  # fmt: skip


def test_models_match_the_shapes_file() -> None:
    with open(SHAPES_CSV) as f:
        rows = {r["model"]: r for r in csv.DictReader(f)}
    assert set(rows) == set(tm.MODELS)
    for name, s in tm.MODELS.items():
        r = rows[name]
        assert (s.experts, s.top_k, s.hidden, s.inter) == tuple(
            int(r[k]) for k in ("experts", "top_k", "hidden", "intermediate")
        )
    with pytest.raises(TuningError, match="unknown MoE model 'nope'"):
        tm.model("nope")


@pytest.mark.parametrize("name", list(tm.MODELS))
def test_space_per_model(name: str) -> None:
    shape = tm.MODELS[name]
    reg = tm.regions(shape, *H100)
    cands = tm.candidates(shape, reg)
    assert len(cands) == COUNTS[name]
    assert len(set(cands)) == len(cands)
    mixtral = name.startswith("Mixtral")
    assert reg.group_ms == ((1, 8) if mixtral else (1,))  # only Mixtral's experts exceed half the L2
    assert reg.split_k == mixtral  # deep I on a sub-wave decode down-projection grid
    assert any(c.group_m == 8 for c in cands) == mixtral
    assert all(c.group_m == 1 or c.block_m >= 64 for c in cands)
    assert all(c.block_k > 16 or max(2 * c.block_m * c.block_n, c.block_m * c.block_n_down) >= 64 * 128 for c in cands)
    shallow = min(shape.hidden, shape.inter)
    for c in cands:
        c.check()
        assert c.stages <= shallow // c.block_k
        assert max(2 * c.block_m * c.block_n, c.block_m * c.block_n_down) // tm.THREADS <= tm.MAX_ACC
    assert {c.block_m for c in cands} == set(tm.BLOCK_MS)
    assert (32 in reg.block_ns) == (reg.decode_up_ctas < 132)
    lines = reg.lines()
    assert len(lines) == 4 and "GROUP_M" in lines[1] and "split-K" in lines[3]


def test_region_rules_follow_the_device() -> None:
    """A small L2 turns L2 grouping on; many SMs put a decode grid under one wave (narrow tiles)."""
    olmoe = tm.MODELS["OLMoE-1B-7B"]
    assert tm.regions(olmoe, 132, 8 << 20).group_ms == (1, 8)
    assert tm.regions(tm.MODELS["DeepSeek-V2-Lite"], 304, 256 << 20).block_ns == tm.BLOCK_NS
    dense = tm.MoeShape(8, 1, 256, 256)  # 512 tokens per expert, shallow K: BK 128 leaves 2 steps
    reg = tm.regions(dense, *H100)
    assert reg.block_ks == (32, 64, 128) and reg.stages == (2, 3)
    assert all(c.stages <= 256 // c.block_k for c in tm.candidates(dense, reg))


@pytest.mark.parametrize(
    "cfg", [MoeConfig(64, 64, 128, 64, 3), MoeConfig(16, 32, 256, 128, 2), MoeConfig(128, 64, 128, 32, 3, 8)]
)
def test_shared_memory_estimate_matches_the_pipeline(cfg: MoeConfig) -> None:
    tpw, mma = mma_type_for("mma_sync", wc.bf16, "sm_90a")
    up = fk.make_up(wc.bf16, 8, "silu", False, tpw, mma, cfg.block_m)
    down = fk.make_down(wc.bf16, 8, True, True, tpw, mma, cfg.block_m)
    got = (legality.shared_bytes(up, cfg.subs(False), "sm_90a"), legality.shared_bytes(down, cfg.subs(True), "sm_90a"))
    assert got == tm.shared_bytes(cfg)
    assert legality.legal(up, cfg.subs(False), "sm_90a") == (True, "")


def test_trim_keeps_the_static_choices() -> None:
    shape = tm.MODELS["Qwen3-30B-A3B"]
    cands = tm.candidates(shape, tm.regions(shape, *H100))
    statics = tm.static_configs(shape)
    assert statics <= set(cands)
    kept = tm.trim(cands, 20, lambda c: c in statics)
    assert len(kept) == 20 and statics <= set(kept)
    assert {c.block_m for c in kept} == set(tm.BLOCK_MS)
    assert tm.trim(cands, None) == cands


SHAPE = tm.MoeShape(experts=4, top_k=2, hidden=256, inter=128)


def test_features_from_a_histogram_by_hand() -> None:
    hist = [5, 0, 17, 33]
    assert tm.block_count(hist, 16) == 1 + 0 + 2 + 3
    assert tm.block_count(hist, 64) == 3
    pc = tm.PoolConfig(MoeConfig(16, 64, 128, 64, 3), slots_up=4, slots_down=5)
    f = tm.terms(pc, SHAPE, tm.block_count(hist, 16), knee=0.5)
    # up: 6 blocks x 128/64 = 12 CTAs on 4 slots: 3 full waves; down: 6 x 256/128 = 12 CTAs on 5 slots:
    # 2 full waves and one of fill 2/5 (0.4 < the knee: costs 0.5)
    assert f.tolist() == [1.0, 3.0, 12.0, 3.0, 3.0, 12.0, 2.5]
    pc13 = tm.PoolConfig(MoeConfig(16, 64, 128, 64, 3), slots_up=4, slots_down=13)
    f = tm.terms(pc13, SHAPE, 13, knee=0.25)  # 26 up CTAs on 4 slots: 6 full + 2/4; 26 down on 13: 2
    assert f.tolist() == [1.0, 7.0, 26.0, 6.5, 2.0, 26.0, 2.0]
    assert tm.terms(pc13, SHAPE, np.array([13, 13]), 0.25).shape == (2, 7)


def test_balanced_histogram() -> None:
    assert tm.balanced(3, 2, 4) == [2, 2, 1, 1]
    assert sum(tm.balanced(4096, 8, 128)) == 4096 * 8


def _random_hist(rng: random.Random, tokens: int, experts: int, top_k: int, skew: float) -> list[int]:
    w = [rng.random() ** skew for _ in range(experts)]
    h = [0] * experts
    for _ in range(tokens):
        for e in rng.choices(range(experts), weights=w, k=top_k):
            h[e] += 1
    return h


def test_fit_recovers_known_coefficients() -> None:
    rng = random.Random(0)
    pc = tm.PoolConfig(MoeConfig(32, 64, 128, 64, 3), slots_up=8, slots_down=6)
    true = (4e-6, 2e-6, 3e-8, 0.0, 1e-6, 5e-8, 2e-6)
    hists = [_random_hist(rng, t, 4, 2, s) for t in (8, 64, 256, 1024, 4096) for s in (1, 2, 4, 8, 16)]
    samples = [
        (tm.block_count(h, 32), float(tm.terms(pc, SHAPE, tm.block_count(h, 32), 0.5) @ np.array(true))) for h in hists
    ]
    knee, coef, resid = tm.fit_config(pc, SHAPE, samples)
    assert resid < 1e-6
    for n in (1, 7, 50, 300, 1000):  # the fitted model predicts unseen block counts
        want = float(tm.terms(pc, SHAPE, n, 0.5) @ np.array(true))
        assert abs(float(tm.terms(pc, SHAPE, n, knee) @ np.array(coef)) - want) <= 1e-3 * want
    assert min(coef) >= 0.0


def make_table(rng: random.Random, shape: tm.MoeShape = SHAPE, n: int = 24, device: str = "cpu") -> tm.MoeTable:
    cands = tm.candidates(shape, tm.regions(shape, *H100))
    pool = [tm.PoolConfig(c, rng.choice((132, 264)), rng.choice((132, 264, 396))) for c in tm.trim(cands, n)]
    coef = [tuple(rng.random() * 10.0 ** rng.randint(-9, -5) for _ in tm.TERMS) for _ in pool]
    return tm.MoeTable(shape, device, 132, pool, [rng.choice((0.25, 0.5, 1.0)) for _ in pool], coef, {"note": 1})


def test_table_json_round_trip(tmp_path) -> None:
    table = make_table(random.Random(1))
    path = tm.save(table, tmp_path)
    assert pathlib.Path(path).is_file()
    back = tm.load(SHAPE, "cpu", tmp_path)
    assert back is not None and back.to_json() == table.to_json()
    assert back.pool == table.pool and back.coef == table.coef
    assert tm.load(SHAPE, "NVIDIA H100 80GB HBM3", tmp_path) is None  # keyed by device name
    assert tm.load(tm.MoeShape(4, 2, 256, 128, "f16"), "cpu", tmp_path) is None  # and by dtype
    bad = table.to_json() | {"terms": ["launch"]}
    with pytest.raises(TuningError, match="another format"):
        tm.MoeTable.from_json(bad)


@pytest.mark.parametrize("shape", [SHAPE, tm.MODELS["Qwen3-30B-A3B"]])
def test_device_choice_matches_numpy_argmin(shape: tm.MoeShape) -> None:
    """The tabulated, packed-key choice (torch, as on the GPU) picks a configuration of least predicted
    cost for random histograms at every balance, the literal model's numpy argmin."""
    rng = random.Random(2)
    table = make_table(rng, shape)
    for tokens in (1, 3, 40, 300):
        for skew in (0.0, 1.0, 4.0, 30.0):
            h = _random_hist(rng, tokens, shape.experts, shape.top_k, skew)
            ids = torch.repeat_interleave(torch.arange(shape.experts, dtype=torch.int32), torch.tensor(h))
            ids = ids[torch.randperm(ids.numel(), generator=torch.Generator().manual_seed(tokens))]
            chooser = md._Chooser(table, ids.numel(), shape.experts, shape.experts, ids.device)
            got = _index(table, chooser.index_of[chooser(ids)])
            cost = table.predict(h)
            assert cost[got] <= cost.min() + 1e-9, (tokens, skew, got, int(cost.argmin()))


class _FakeGraph:
    """Stands in for the CUDA graph on the CPU: a replay evaluates the chooser on its static ids buffer."""

    def __init__(self, chooser) -> None:
        self.chooser = chooser

    def replay(self) -> None:
        self.chooser.out = self.chooser.evaluate(self.chooser.static_ids)


def test_graph_input_padding() -> None:
    """The graph path's ids buffer: a call's ids, the rest the padding bin (a longer previous call's tail
    is reset), so calls of different sizes sharing one bucket choose as the eager path does."""
    assert [md.bucket(n) for n in (1, 16, 17, 300, 4096)] == [16, 16, 32, 512, 4096]
    rng = random.Random(5)
    table = make_table(rng)
    graphed = md._Chooser(table, 64, 4, 5, torch.device("cpu"))
    graphed.static_ids = torch.full((64,), graphed.bins, dtype=torch.int32)
    graphed.graph = _FakeGraph(graphed)
    for n in (64, 10, 50, 3, 64, 33):
        ids = torch.randint(0, 5, (n,), dtype=torch.int32, generator=torch.Generator().manual_seed(n))
        eager = md._Chooser(table, 64, 4, 5, torch.device("cpu"))
        assert graphed.index_of[graphed(ids)] == eager.index_of[eager(ids)], n
        assert (graphed.static_ids[n:] == graphed.bins).all() and graphed.filled == n


def test_skip_expert_does_not_count() -> None:
    """With ``expert_map`` the ids hold E for other ranks' experts: not part of the histogram's cost."""
    table = make_table(random.Random(3))
    ids = torch.tensor([4, 4, 4, 4, 0, 1], dtype=torch.int32)
    chooser = md._Chooser(table, ids.numel(), 4, 5, ids.device)
    cost = table.predict([1, 1, 0, 0])
    assert cost[_index(table, chooser.index_of[chooser(ids)])] <= cost.min() + 1e-9


def _index(table: tm.MoeTable, cfg: MoeConfig) -> int:
    return [p.cfg for p in table.pool].index(cfg)


def test_choose_for_graph_and_static_choice() -> None:
    table = make_table(random.Random(4))
    hists = [[10, 0, 0, 0], [9, 1, 0, 0]]
    total = table.predict(hists[0]) + table.predict(hists[1])
    assert md.choose_for_graph(table, hists) == table.pool[int(total.argmin())].cfg
    assert md.choose_for_graph(table, [torch.tensor(h) for h in hists]) == table.pool[int(total.argmin())].cfg
    with pytest.raises(ArgumentError, match="histograms"):
        md.choose_for_graph(table, [[1, 2]])
    assert table.static_index(40) == table.choose(tm.balanced(40, 2, 4))
    assert md.histogram(torch.tensor([[0, 3], [3, 1]], dtype=torch.int32), 4).tolist() == [1, 1, 0, 2]


def test_static_config_is_in_every_pool_space() -> None:
    for shape in tm.MODELS.values():
        cands = set(tm.candidates(shape, tm.regions(shape, *H100)))
        for t in (1, 64, 1024, 4096):
            assert static_config(t, shape.top_k, shape.experts) in cands


def test_moe_config_group_m_and_labels() -> None:
    cfg = MoeConfig.parse({"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8})
    assert cfg.group_m == 8 and cfg.label() == "m64n64d64k32s3g8"
    assert cfg.subs(True)[wc.sym.GROUP_M] == 8
    with pytest.raises(ArgumentError, match="GROUP_M"):
        MoeConfig.parse({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 3})


def test_cli_dry_run_prints_rules(capsys, monkeypatch) -> None:
    monkeypatch.setattr("wavec.tuning.devices.visible_name", lambda: None)
    from wavec.tuning.devices import device

    device.cache_clear()
    assert main(["tune", "moe", "--model", "Mixtral-8x7B-TP1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "on H100 SXM" in out and out.count("rule: ") == 4 and "GROUP_M [1, 8]" in out
    assert "split-K (down): applies (tune moe --split-k" in out and "209 candidates" in out


def test_cli_usage_errors(capsys) -> None:
    assert main(["tune", "moe"]) == 2
    assert "--model NAME is required" in capsys.readouterr().err
    assert main(["tune", "moe", "--model", "nope"]) == 2
    assert "unknown MoE model 'nope'" in capsys.readouterr().err
    assert main(["tune", "moe", "--model", "OLMoE-1B-7B", "--points", "0"]) == 2
    assert "must be positive" in capsys.readouterr().err
    assert main(["tune", "gemm"]) == 2
    assert "--shapes" in capsys.readouterr().err


def _points(table: tm.MoeTable, rng: random.Random, noise: float = 0.0) -> list:
    """Synthetic profiled points: each configuration's time is the table's prediction (times noise)."""
    from wavec.tuning import moe_profile as mp

    pts = []
    for i, (t, b) in enumerate(mp.fit_points()):
        h = _random_hist(rng, t, table.shape.experts, table.shape.top_k, 1.0 / b**4 - 1.0)
        secs = [float(x) * (1 + noise * rng.uniform(-1, 1)) for x in table.predict(h)]
        pts.append(mp.Point(t, b, i, b, h, secs))
    return pts


def test_fit_table_regret_and_report(capsys, monkeypatch) -> None:
    """``fit_table`` refits a known table from its own predictions (zero regret in sample), the regret
    summary, and the CLI's report around a stand-in ``tune`` (no GPU)."""
    from wavec.tuning import moe_profile as mp

    rng = random.Random(6)
    true = make_table(rng, tm.MODELS["OLMoE-1B-7B"], n=12, device="NVIDIA H100 80GB HBM3")
    pts = _points(true, rng)
    fitted = mp.fit_table(true.shape, true.device, 132, true.pool, pts, {"target": "sm_90a"})
    assert fitted.meta["rms_rel_residual_max"] < 1e-3 and len(fitted.meta["points"]) == 25
    rows = mp.regret_rows(fitted, pts)
    summ = mp.summary(rows)
    assert summ["points"] == 25 and summ["ra_regret"][2] < 1e-3 and summ["static_regret"][0] >= 0.0
    assert summ["speedup_skewed"] >= 1.0 - 1e-3
    text = mp.format_rows(rows, summ)
    assert text.count("\n") == 26 and "regret over 25 points" in text
    assert mp.summary([r | {"beta": 1.0} for r in rows])["speedup_skewed"] != summ["speedup_skewed"]  # nan: no skew
    pool = mp.Pool(tm.regions(true.shape, *H100), 186, 20, 12, true.pool, {"m128n128d128k64s3": "up: spills"}, 1.0)
    result = mp.TuneResult(
        fitted, pool, pts, "/tmp/x.json", {"pool": 60.0, "profile": 300.0, "fit": 0.5, "total": 360.5}
    )
    monkeypatch.setattr(mp, "tune", lambda *a, **k: result)
    monkeypatch.setattr("wavec.compiler.gpu_visible", lambda: True)
    assert main(["tune", "moe", "--model", "OLMoE-1B-7B", "--max-configs", "12", "--points", "25"]) == 0
    out = capsys.readouterr().out
    assert "186 candidates, 20 compiled, 12 legal, pool 12" in out and "total 6.0 min" in out
    assert out.count("rule: ") == 4 and "regret over 25 points" in out


def test_routing_generator_reaches_the_balance() -> None:
    from wavec.tuning import moe_profile as mp

    for beta in (1.0, 0.8, 0.6):
        w, ids, got = mp.routing(256, 64, 8, beta, True, seed=1, device="cpu")
        assert ids.shape == (256, 8) and ids.dtype == torch.int32 and abs(got - beta) <= 0.02, (beta, got)
        assert torch.allclose(w.sum(-1), torch.ones(256)) and got == mp.balance(ids, 64)
    assert mp.fit_points(3) == [(8, 0.6), (256, 0.8), (4096, 1.0)]


def test_swap_config_parse_label_and_json() -> None:
    """``SWAP`` in the dict form, the ``w`` label, the warpgroup rule, a table entry round trip (old entries
    without ``swap`` load as mma.sync configurations), and the static rule never picks swap-AB."""
    cfg = MoeConfig.parse({"BLOCK_M": 8, "BLOCK_N": 64, "BLOCK_N_DOWN": 256, "BLOCK_K": 128, "SWAP": True})
    assert cfg.swap and cfg.label() == "m8n64d256k128s3w" and cfg.swap_waves(False) == 1
    assert cfg.swap_waves(True) == 1  # 8 x 128 tokens: 128 16-byte runs, one warpgroup
    assert MoeConfig(32, 128, 256, 128, 2, swap=True).swap_waves(True) == 4
    assert MoeConfig(32, 128, 256, 64, 2, swap=True).swap_waves(True) == 2
    assert MoeConfig(16, 64, 64, 64, 2).swap_waves(True) is None
    assert not MoeConfig.parse({"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 32}).swap
    old = {"block_m": 16, "block_n": 32, "block_n_down": 64, "block_k": 32, "stages": 2, "group_m": 1}
    assert MoeConfig(**old).swap is False  # a table written before swap-AB
    assert MoeConfig(**tm.vars_of(cfg)) == cfg
    for t in (1, 4, 16, 64, 4096):
        assert not static_config(t, 8, 64).swap


def test_static_rule_takes_swap_ab_on_hopper() -> None:
    """On sm_90a up to 8 tokens per expert at balanced routing take the swap-AB tiles when the
    up-projection has 64 tiles or more (DeepSeek-V3-TP8 at T = 1: 8 x 4 does not), more tokens the
    mma.sync rule; elsewhere never swap-AB."""
    from wavec.kernels.fused_moe import SWAP_STATIC
    from wavec.kernels.indexing import hopper_target

    assert SWAP_STATIC.swap and SWAP_STATIC.swap_waves(True) is not None
    assert [static_config(t, 8, 64, wgmma=True, inter=1024) == SWAP_STATIC for t in (1, 32, 64, 65, 4096)] == [
        True, True, True, False, False,
    ]  # fmt: skip
    assert static_config(65, 8, 64, wgmma=True, inter=1024) == static_config(65, 8, 64)
    assert static_config(1, 8, 256, wgmma=True, inter=256) == static_config(1, 8, 256)  # 32 tiles
    assert static_config(8, 8, 256, wgmma=True, inter=256) == SWAP_STATIC  # T = 8: 64 experts x 4
    assert static_config(1, 2, 8, wgmma=True, inter=7168) == SWAP_STATIC  # Mixtral-TP2: 2 x 112
    assert hopper_target(None, torch.device("cpu")) is None  # (the picker's test for the swap-AB rule)


def test_static_rule_takes_wgmma_blocks_on_hopper() -> None:
    """On sm_90a 32 tokens per expert or more (balanced) take the wgmma token blocks, 96 or more the
    128-token one; fewer keep the mma.sync or swap-AB choice; elsewhere never wgmma."""
    from wavec.kernels.fused_moe import WGMMA_LARGE, WGMMA_STATIC

    assert WGMMA_STATIC.wgmma and WGMMA_LARGE.wgmma and WGMMA_LARGE.block_m == 128
    olmoe = {
        t: static_config(t, 8, 64, wgmma=True, inter=1024, hidden=2048, sms=132) for t in (128, 255, 256, 767, 768)
    }
    assert [olmoe[t] for t in (128, 255)] == [static_config(t, 8, 64) for t in (128, 255)]  # 16, 31.9 tokens
    assert olmoe[256] == olmoe[767] == WGMMA_STATIC and olmoe[768] == WGMMA_LARGE  # 32, 95.9, 96
    assert static_config(4096, 2, 8, wgmma=True, inter=14336, hidden=4096, sms=132) == WGMMA_LARGE  # Mixtral
    for t in (256, 4096):
        assert not static_config(t, 8, 64).wgmma


def test_static_rule_splits_sub_wave_down_grids_on_hopper() -> None:
    """On sm_90a the static rule takes ``SPLIT_STATIC`` exactly where the split-K region rule holds at this
    T: Mixtral (H 4096, I 7168 / 14336) at T = 1 (2 experts x 32 down tiles < half of 132 SMs), not at T = 2
    (128 tiles), not for a shallow I (OLMoE's 1024), not off Hopper, not without the SM count."""
    from wavec.kernels.fused_moe import SPLIT_STATIC, SWAP_STATIC
    from wavec.tuning import moe as tm

    assert SPLIT_STATIC.split_k == 4 and not SPLIT_STATIC.swap
    for inter in (7168, 14336):
        rule = {t: static_config(t, 2, 8, wgmma=True, inter=inter, hidden=4096, sms=132) for t in (1, 2, 4)}
        assert rule == {1: SPLIT_STATIC, 2: SWAP_STATIC, 4: SWAP_STATIC}
        shape = tm.MoeShape(8, 2, 4096, inter, "bf16", "mixtral")
        assert tm.regions(shape, 132, 50 << 20).split_k  # the same rule the tuner's split candidates follow
    assert static_config(1, 8, 64, wgmma=True, inter=1024, hidden=2048, sms=132) == SWAP_STATIC  # OLMoE
    assert static_config(1, 2, 8, inter=14336, hidden=4096, sms=132).split_k == 1  # no wgmma
    assert static_config(1, 2, 8, wgmma=True, inter=14336, hidden=4096) == SWAP_STATIC  # SMs unknown


def test_swap_candidates_and_cli_flag(capsys, monkeypatch) -> None:
    """``tune moe --swap`` adds the swap-AB candidates (token blocks 8-32, legal tiles only) to the space;
    without it the space is unchanged; a non-sm_90a target refuses them."""
    from wavec.tuning import moe_profile as mp

    shape = tm.MODELS["OLMoE-1B-7B"]
    reg = tm.regions(shape, *H100)
    swaps = tm.swap_candidates(shape, reg)
    assert swaps and all(c.swap and c.block_m in (8, 16, 32) and c.group_m == 1 for c in swaps)
    assert all(c.block_m * c.block_k >= 256 and c.stages <= min(shape.hidden, shape.inter) // c.block_k for c in swaps)
    for c in swaps:
        c.check()
    assert not any(c.swap for c in tm.candidates(shape, reg))
    both = mp.all_candidates(shape, reg, "sm_90a", True)
    assert both[: len(both) - len(swaps)] == tm.candidates(shape, reg) and both[-len(swaps) :] == swaps
    with pytest.raises(TuningError, match="swap-AB configurations run on wgmma"):
        mp.all_candidates(shape, reg, "sm_80", True)
    monkeypatch.setattr("wavec.tuning.devices.visible_name", lambda: None)
    from wavec.tuning.devices import device

    device.cache_clear()
    assert main(["tune", "moe", "--model", "OLMoE-1B-7B", "--dry-run"]) == 0
    plain = capsys.readouterr().out
    assert main(["tune", "moe", "--model", "OLMoE-1B-7B", "--dry-run", "--swap"]) == 0
    out = capsys.readouterr().out
    n = len(tm.candidates(shape, reg))
    assert f"{n} candidates" in plain and f"{n + len(swaps)} candidates" in out and "8: " in out


def test_wgmma_candidates_and_cli_flag(capsys, monkeypatch) -> None:
    """``tune moe --wgmma`` adds the wgmma token blocks (64 and 128 tokens, accumulators within
    ``MAX_ACC``, stages within the shallower K) to the space; a non-sm_90a target refuses them."""
    from wavec.tuning import moe_profile as mp

    shape = tm.MODELS["Qwen3-30B-A3B"]
    reg = tm.regions(shape, *H100)
    wg = tm.wgmma_candidates(shape, reg)
    assert wg and all(c.wgmma and c.block_m in (64, 128) and max(c.block_n, c.block_n_down // 2) <= 128 for c in wg)
    assert all(c.stages <= min(shape.hidden, shape.inter) // c.block_k for c in wg)
    assert len({c.label() for c in wg}) == len(wg) and all(c.label().endswith("h") for c in wg)
    for c in wg:
        c.check()
    both = mp.all_candidates(shape, reg, "sm_90a", False, False, True)
    assert both == tm.candidates(shape, reg) + wg
    with pytest.raises(TuningError, match="wgmma token-block configurations run on wgmma"):
        mp.all_candidates(shape, reg, "sm_80", False, False, True)
    monkeypatch.setattr("wavec.tuning.devices.visible_name", lambda: None)
    from wavec.tuning.devices import device

    device.cache_clear()
    assert main(["tune", "moe", "--model", "Qwen3-30B-A3B", "--dry-run", "--wgmma"]) == 0
    n = len(tm.candidates(shape, reg))
    assert f"{n + len(wg)} candidates" in capsys.readouterr().out
