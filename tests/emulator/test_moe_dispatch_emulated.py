"""``fused_experts`` with routing-aware dispatch on the emulator: a hand-made fitted table picks the
configuration its model predicts for the call's histogram (a different one for balanced and skewed
routing) and the output still matches the f32 reference; ``dispatch="static"`` takes the table's
balanced-routing choice; without a table both dispatches fall back to the static rule, counted and warned
about; ``expert_map``'s skipped slots do not count; GROUP_M > 1 (grouped workgroup order) is correct."""

from __future__ import annotations

import re

import pytest
import torch

from tests.emulator.test_fused_moe import check, moe_inputs
from wavec.kernels import fused_moe as fm
from wavec.kernels import moe_dispatch as md
from wavec.kernels.fused_moe import MoeConfig
from wavec.tuning import moe as tm

T, H, INTER, E, K = 40, 64, 32, 4, 2
SHAPE = tm.MoeShape(E, K, H, INTER, "bf16")
SMALL = MoeConfig(16, 32, 64, 32, 2)
LARGE = MoeConfig(64, 32, 64, 32, 2)


@pytest.fixture
def table():
    """SMALL costs 1 us per up-projection CTA (one per 16-row block: I = 32 = BLOCK_N), LARGE 6.5 us
    flat: balanced routing (4 x 20 ids: 8 blocks of 16) picks LARGE, two experts of 40 (6 blocks) SMALL."""
    pool = [tm.PoolConfig(SMALL, 132, 132), tm.PoolConfig(LARGE, 132, 132)]
    coef = [(0.0, 0.0, 1e-6, 0.0, 0.0, 0.0, 0.0), (6.5e-6, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)]
    t = tm.MoeTable(SHAPE, "cpu", 132, pool, [1.0, 1.0], coef)
    md.register_table(t)
    md.reset_report()
    yield t
    md.forget_tables()
    md.reset_report()


def routed(kind: str):
    x, w1, w2, _w, _i = moe_inputs(T, H, INTER, E, K, seed=5)
    tok = torch.arange(T)
    if kind == "balanced":  # every expert 20 ids
        ids = torch.stack([tok % E, (tok + 1) % E], 1)
    else:  # experts 0 and 1 take every token
        ids = torch.stack([torch.zeros_like(tok), torch.ones_like(tok)], 1)
    wts = torch.softmax(torch.randn(T, K, generator=torch.Generator().manual_seed(1)), -1)
    return x, w1, w2, wts, ids.to(torch.int32)


@pytest.mark.parametrize("kind, want", [("balanced", LARGE), ("skewed", SMALL)])
def test_routing_aware_follows_the_histogram(table, kind: str, want: MoeConfig) -> None:
    x, w1, w2, wts, ids = routed(kind)
    hist = torch.bincount(ids.flatten().long(), minlength=E).tolist()
    assert table.pool[table.choose(hist)].cfg == want  # the literal model agrees with the hand count
    out = torch.full((T, H), float("nan"), dtype=torch.bfloat16)
    fm.fused_experts(x, w1, w2, wts, ids, out=out)
    report = md.dispatch_report()
    assert report["last"] == want and report["routing_aware"] == 1 and report["fallback_no_table"] == 0
    check(out, fm.reference(x, w1, w2, wts, ids), torch.bfloat16)


def test_static_dispatch_takes_the_tables_balanced_choice(table) -> None:
    x, w1, w2, wts, ids = routed("skewed")
    fm.fused_experts(x, w1, w2, wts, ids, dispatch="static", deterministic=False)
    report = md.dispatch_report()
    assert report["last"] == LARGE == table.pool[table.static_index(T)].cfg and report["static_table"] == 1


def test_expert_map_skipped_slots_do_not_count(table) -> None:
    """Global ids over 8 experts, the last 4 on another rank: the skip expert's 40 ids are not blocks;
    the local histogram is 40 ids of expert 0 (3 blocks of 16: SMALL)."""
    x, w1, w2, wts, _ = routed("skewed")
    ids = torch.stack([torch.zeros(T, dtype=torch.int32), torch.full((T,), 5, dtype=torch.int32)], 1)
    emap = torch.tensor([0, 1, 2, 3, -1, -1, -1, -1], dtype=torch.int32)
    out = fm.fused_experts(x, w1, w2, wts, ids, expert_map=emap, global_num_experts=8)
    assert md.dispatch_report()["last"] == SMALL
    check(out, fm.reference(x, w1, w2, wts, ids, expert_map=emap), torch.bfloat16)


def test_fallback_without_a_table_is_reported() -> None:
    md.forget_tables()
    md.reset_report()
    x, w1, w2, wts, ids = moe_inputs(9, 32, 32, 4, 1, seed=2)
    with pytest.warns(UserWarning, match=re.escape("no routing-aware table for E=4,k=1,H=32,I=32,bf16 | cpu")):
        out = fm.fused_experts(x, w1, w2, wts, ids)
    fm.fused_experts(x, w1, w2, wts, ids, dispatch="static")
    report = fm.dispatch_report()
    assert report == md.dispatch_report()
    assert report["fallback_no_table"] == 2 and report["static_rule"] == 2 and report["routing_aware"] == 0
    assert report["missing"] == {"E=4,k=1,H=32,I=32,bf16 | cpu": 2}
    assert report["last"] == fm.static_config(9, 1, 4)
    check(out, fm.reference(x, w1, w2, wts, ids), torch.bfloat16)


@pytest.mark.parametrize(
    "deterministic, cfg",
    [(True, MoeConfig(16, 32, 32, 32, 2, group_m=2)), (False, MoeConfig(16, 32, 32, 32, 2, group_m=2)),
     (True, MoeConfig(32, 32, 64, 16, 3, group_m=4))],
)  # fmt: skip
def test_group_m_grouped_order_is_correct(deterministic: bool, cfg: MoeConfig) -> None:
    """GROUP_M = 2 and 4 over the token blocks of a skewed routing (several blocks per expert, a ragged last
    group), the latter with the pool's narrow K step of 16 (4 steps in 3 stages)."""
    x, w1, w2, wts, ids = moe_inputs(37, 64, 64, 4, 2, routing="skewed", seed=11)
    out = torch.full((37, 64), float("nan"), dtype=torch.bfloat16)
    fm.fused_experts(x, w1, w2, wts, ids, config=cfg, deterministic=deterministic, out=out)
    check(out, fm.reference(x, w1, w2, wts, ids), torch.bfloat16)
