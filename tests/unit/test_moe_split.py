"""Split-K of the MoE down-projection without a GPU: ``MoeConfig.split_k`` (dict form, label, subs, table
JSON, old entries), the split candidates of ``tune moe --split-k`` (only where the region rule applies,
one wave at T = 1, at most one slice per K step, the default pools unchanged), the cost model's
down-projection CTAs, the combine a pool is timed on, and the CLI flag."""

from __future__ import annotations

import pytest

from wavec.__main__ import main
from wavec.errors import ArgumentError
from wavec.kernels import fused_moe_kernels as fk
from wavec.kernels.fused_moe import MoeConfig, static_config
from wavec.tuning import moe as tm
from wavec.tuning import moe_profile as mp

H100 = (132, 50 << 20)
MIXTRAL = tm.MODELS["Mixtral-8x7B-TP1"]


def test_split_config_parse_label_subs_and_json() -> None:
    cfg = MoeConfig.parse({"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_N_DOWN": 128, "BLOCK_K": 64, "SPLIT_K": 4})
    assert cfg.split_k == 4 and cfg.label() == "m16n64d128k64s3x4"
    assert cfg.subs(True)[fk.SPLIT] == 4 and fk.SPLIT not in cfg.subs(False)  # the up-projection never splits
    assert fk.SPLIT not in MoeConfig(16, 64, 128, 64, 3).subs(True)
    assert cfg.unsplit() == MoeConfig(16, 64, 128, 64, 3) and cfg.unsplit().label() == "m16n64d128k64s3"
    assert MoeConfig.parse({"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 32}).split_k == 1
    assert MoeConfig(8, 64, 64, 32, 2, swap=True, split_k=2).label() == "m8n64d64k32s2wx2"
    old = {"block_m": 16, "block_n": 32, "block_n_down": 64, "block_k": 32, "stages": 2, "group_m": 1, "swap": False}
    assert MoeConfig(**old).split_k == 1  # a table written before split-K
    assert MoeConfig(**tm.vars_of(cfg)) == cfg
    for bad in (0, -1, 2.0, True, "2"):
        with pytest.raises(ArgumentError, match="SPLIT_K must be an int >= 1"):
            MoeConfig(16, 64, 128, 64, 3, split_k=bad).check()
    for t in (1, 4, 16, 64, 4096):
        assert static_config(t, 2, 8).split_k == 1


def test_split_rules_need_the_call() -> None:
    cfg = MoeConfig(16, 64, 128, 64, 3, split_k=4)
    cfg.check_split(14336, False)
    cfg.check_split(4 * 64 - 63, False)  # 4 steps, the last one element wide
    with pytest.raises(ArgumentError, match="SPLIT_K 4 exceeds the down-projection's K steps"):
        cfg.check_split(3 * 64, False)
    cfg.check_split(14336, True)  # the deterministic combine sums the slices' f32 rows in order
    cfg.unsplit().check_split(14336, True)


@pytest.mark.parametrize("swap", [False, True])
def test_split_candidates_where_the_rule_applies(swap: bool) -> None:
    reg = tm.regions(MIXTRAL, *H100)
    assert reg.split_k
    base = tm.candidates(MIXTRAL, reg) + (tm.swap_candidates(MIXTRAL, reg) if swap else [])
    splits = tm.split_candidates(MIXTRAL, reg, base)
    assert splits and len(set(splits)) == len(splits) and not set(splits) & set(base)
    active = min(MIXTRAL.experts, MIXTRAL.top_k)
    for c in splits:
        c.check()
        c.check_split(MIXTRAL.inter, False)
        assert c.split_k in tm.SPLITS and c.block_m <= tm.SPLIT_BLOCK_M and c.unsplit() in base
        assert active * -(-MIXTRAL.hidden // c.block_n_down) * c.split_k <= reg.sms  # one wave at T = 1
    assert {c.split_k for c in splits} == set(tm.SPLITS)  # BLOCK_N_DOWN 256: 32 CTAs x 4 within 132
    assert any(c.swap for c in splits) == swap
    assert not any(c.split_k > 1 for c in tm.candidates(MIXTRAL, reg))  # the default pool is unchanged
    both = mp.all_candidates(MIXTRAL, reg, "sm_90a", swap, True)
    assert both == base + splits and mp.all_candidates(MIXTRAL, reg, "sm_90a", swap) == base


@pytest.mark.parametrize("name", [n for n in tm.MODELS if not n.startswith("Mixtral")])
def test_no_split_candidates_elsewhere(name: str) -> None:
    shape = tm.MODELS[name]
    reg = tm.regions(shape, *H100)
    assert not reg.split_k and tm.split_candidates(shape, reg, tm.candidates(shape, reg)) == []


def test_cost_model_counts_the_split_ctas() -> None:
    """The down-projection's CTA terms scale with the slices; the up-projection's do not."""
    cfg = MoeConfig(16, 64, 128, 64, 3)
    one, four = tm.PoolConfig(cfg, 132, 132), tm.PoolConfig(MoeConfig(16, 64, 128, 64, 3, split_k=4), 132, 132)
    a, b = tm.terms(one, MIXTRAL, 2, 1.0), tm.terms(four, MIXTRAL, 2, 1.0)
    assert list(a[:4]) == list(b[:4])  # launch and the up-projection's terms
    assert a[5] == 2 * 32 and b[5] == 4 * 2 * 32 and (a[4], b[4]) == (1, 2)  # CTAs, waves


@pytest.mark.parametrize("deterministic", [True, False])
def test_pool_compiles_the_down_projection_of_the_timed_combine(deterministic: bool, monkeypatch) -> None:
    """A split configuration's down kernel is built for the combine the pool is timed on (its f32 rows for
    the deterministic one, atomic adds otherwise), as ``fused_moe.plan_kernels`` builds it for serving."""
    from wavec.kernels import fused_moe_kernels as fk

    seen: list[tuple] = []
    real = fk.make_down

    def spy(*args, **kw):
        seen.append(args)
        return real(*args, **kw)

    monkeypatch.setattr(fk, "make_down", spy)
    cfg = MoeConfig(16, 64, 128, 64, 3, split_k=2)
    meta = mp._compile_gemm("down", "bf16", 2, mp._astuple(cfg), "sm_80", deterministic)
    assert "error" not in meta, meta
    (args,) = seen
    # (dtype, top_k, weighted, deterministic, ..., split, wgmma_waves)
    assert args[3] is deterministic and args[-2] is True and args[-1] is None
    assert mp._astuple(cfg)[7] == 2


def test_cli_split_k_flag(capsys, monkeypatch) -> None:
    monkeypatch.setattr("wavec.tuning.devices.visible_name", lambda: None)
    from wavec.tuning.devices import device

    device.cache_clear()
    reg = tm.regions(MIXTRAL, *H100)
    n = len(tm.candidates(MIXTRAL, reg))
    s = len(tm.split_candidates(MIXTRAL, reg, tm.candidates(MIXTRAL, reg)))
    assert main(["tune", "moe", "--model", "Mixtral-8x7B-TP1", "--dry-run"]) == 0
    plain = capsys.readouterr().out
    assert f"{n} candidates" in plain and "split-K:" not in plain
    assert main(["tune", "moe", "--model", "Mixtral-8x7B-TP1", "--dry-run", "--split-k"]) == 0
    out = capsys.readouterr().out
    assert f"{n + s} candidates" in out and f"split-K: {s} of them split" in out
    assert main(["tune", "moe", "--model", "OLMoE-1B-7B", "--dry-run", "--split-k"]) == 0
    assert "split-K: 0 of them" in capsys.readouterr().out
