"""``fused_experts`` through its prepared steps on the emulator: results stay right when the tokens,
dtypes, id and weight types, combine, ``expert_map`` and the routing change from call to call (a step per
key, workspaces reused), including a routing-aware table switching configurations inside one step; every
output element written (``out`` pre-filled with NaN) and checked against the f32 reference."""

from __future__ import annotations

import warnings

import pytest
import torch

from tests.emulator.test_fused_moe import check, moe_inputs
from tests.emulator.test_moe_dispatch_emulated import LARGE, SMALL, routed, table  # noqa: F401 (fixture)
from wavec.kernels import fused_moe as fm
from wavec.kernels import moe_dispatch as md
from wavec.kernels.fastpath import Decisions


@pytest.fixture
def steps(monkeypatch):
    monkeypatch.setattr(fm, "_DECIDED", Decisions("fused_experts"))
    return fm._DECIDED


def _run(t: int, dtype, seed: int, **kw) -> None:
    routing = "skewed" if seed % 2 else "random"
    x, w1, w2, wts, ids = moe_inputs(t, 32, 32, 4, 2, dtype=dtype, routing=routing, seed=seed)
    if kw.pop("int64", False):
        ids = ids.long()
    if kw.pop("bf16_weights", False):
        wts = wts.bfloat16()
    out = torch.full((t, 32), float("nan"), dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no table: the static rule, warned about once per shape
        got = fm.fused_experts(x, w1, w2, wts, ids, out=out, **kw)
    assert got is out
    check(out, fm.reference(x, w1, w2, wts, ids), dtype)


def test_calls_that_change_between_steps(steps) -> None:
    bf, f16 = torch.bfloat16, torch.float16
    sequence = [
        (7, bf, 1, {}), (7, bf, 2, {}), (12, bf, 3, {}), (7, f16, 4, {}), (7, bf, 5, {"int64": True}),
        (7, bf, 6, {"bf16_weights": True}), (7, bf, 7, {"deterministic": False}), (12, bf, 8, {}),
        (7, bf, 9, {"deterministic": False}), (7, bf, 10, {}),
    ]  # fmt: skip
    for t, dtype, seed, kw in sequence:
        _run(t, dtype, seed, **kw)
    assert len(steps) == 6  # one step per distinct key: the repeats reused theirs


def test_expert_map_and_plain_calls_alternate(steps) -> None:
    x, w1, w2, wts, _ = moe_inputs(9, 32, 32, 4, 2, seed=11)
    emap = torch.tensor([2, -1, 0, -1, 3, 1], dtype=torch.int32)
    g = torch.Generator().manual_seed(12)
    for _ in range(2):
        ids = torch.stack([torch.randperm(6, generator=g)[:2] for _t in range(9)]).to(torch.int32)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mapped = fm.fused_experts(x, w1, w2, wts, ids, expert_map=emap, global_num_experts=6)
            local = ids % 4
            plain = fm.fused_experts(x, w1, w2, wts, local)
        check(mapped, fm.reference(x, w1, w2, wts, ids, expert_map=emap), torch.bfloat16)
        check(plain, fm.reference(x, w1, w2, wts, local), torch.bfloat16)
    assert len(steps) == 2


def test_routing_aware_switches_configuration_inside_one_step(table, steps) -> None:  # noqa: F811
    """Same tensor keys, routing balanced -> skewed -> balanced: the table's choice follows the histogram
    on every call (LARGE, SMALL, LARGE), one step holding both configurations' launches."""
    for kind, want in (("balanced", LARGE), ("skewed", SMALL), ("balanced", LARGE), ("skewed", SMALL)):
        x, w1, w2, wts, ids = routed(kind)
        out = torch.full(x.shape, float("nan"), dtype=torch.bfloat16)
        fm.fused_experts(x, w1, w2, wts, ids, out=out)
        assert md.dispatch_report()["last"] == want
        check(out, fm.reference(x, w1, w2, wts, ids), torch.bfloat16)
    assert len(steps) == 1 and md.dispatch_report()["routing_aware"] == 4
    (step,) = steps.table.values()
    assert set(step.lanes) == {LARGE, SMALL}


def test_bad_ids_are_caught_on_a_repeated_call(steps) -> None:
    """The emulator's range check runs on every call, not only when the step is built."""
    x, w1, w2, wts, ids = moe_inputs(5, 32, 32, 4, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fm.fused_experts(x, w1, w2, wts, ids, out=torch.empty(5, 32, dtype=torch.bfloat16))
    out = torch.full((5, 32), float("nan"), dtype=torch.bfloat16)
    for bad, shown in ((ids + 4, r"\d"), (ids - 4, "-")):
        with pytest.raises(fm.ArgumentError, match=rf"argument 'topk_ids': holds {shown}\d*, outside \[0, 4\)"):
            fm.fused_experts(x, w1, w2, wts, bad, out=out)
    assert out.isnan().all() and len(steps) == 1
