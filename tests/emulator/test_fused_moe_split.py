"""``fused_experts`` with a split-K down-projection (``MoeConfig(split_k=S)``: S K slices of I on a third
grid axis, each adding its weighted partial into the f32 accumulator) on the emulator against the f32
torch reference, every element checked: S = 1, 2, 3, 5 with ragged last slices (I a multiple of 8 but not
of BLOCK_K * S, K tails inside the last slice), T = 1, 5, 16, top-k 1 and 2, f16 and bf16, the router
weight on the input or the output, ``expert_map`` with -1 entries, mma.sync and swap-AB kernels, the
grouped workgroup order (GROUP_M 2); ``out`` NaN-filled.  Also the slice arithmetic, the grid of the
compiled kernel, the configuration's rule (at most one slice per K step), a routing-aware table's split
choice, and the deterministic split form (f32 partials per slot and slice, summed in order by the
combine: the same bits on every call)."""

from __future__ import annotations

import pytest
import torch

from tests.emulator.test_fused_moe import check, moe_inputs
from tests.emulator.test_fused_moe_swap import GE, _ids_and_map
from wavec.errors import ArgumentError
from wavec.kernels import fused_moe as fm
from wavec.kernels import fused_moe_kernels as fk
from wavec.kernels import moe_dispatch as md
from wavec.kernels.fused_moe import MoeConfig
from wavec.tuning import moe as tm

# t, k, dtype, (BLOCK_M, BLOCK_N, BLOCK_N_DOWN, BLOCK_K, stages), split, weight on input, mapped, (H, I), swap
CASES = [
    # I = 88 in steps of 16: 6 steps, the last one 8 wide; S = 5 slices of 1, 1, 1, 1, 2 steps
    (1, 1, torch.bfloat16, (16, 32, 32, 16, 2), 5, False, False, (32, 88), False),
    (5, 2, torch.float16, (16, 32, 32, 16, 2), 5, True, True, (32, 88), False),
    (16, 2, torch.bfloat16, (16, 32, 64, 16, 3), 3, False, True, (64, 88), False),
    (5, 1, torch.float16, (16, 32, 32, 16, 2), 2, True, False, (32, 88), False),
    (16, 1, torch.bfloat16, (32, 32, 32, 16, 2), 1, False, False, (32, 88), False),
    # I = 72 in steps of 32: 3 steps, the last 8 wide; S = 3 and 2
    (1, 2, torch.bfloat16, (16, 32, 32, 32, 2), 3, True, True, (32, 72), False),
    (16, 2, torch.float16, (32, 64, 64, 32, 3), 2, False, False, (64, 72), False),
    # swap-AB (wgmma, the token block on the N axis): I = 168 in steps of 32 (6 steps, the last 8 wide)
    (5, 2, torch.float16, (16, 64, 64, 32, 2), 5, False, True, (64, 168), True),
    (16, 1, torch.bfloat16, (8, 64, 64, 32, 2), 3, True, False, (64, 168), True),
]


@pytest.mark.parametrize("t, k, dtype, tiles, split, on_input, mapped, sizes, swap", CASES)
def test_split_matches_reference(t, k, dtype, tiles, split, on_input, mapped, sizes, swap) -> None:
    h, i = sizes
    x, w1, w2, wts, ids = moe_inputs(t, h, i, 4, k, dtype, "skewed" if t > 5 else "random", seed=t + k + split)
    wts = wts * 1.7  # far from a softmax's sum: a weight applied twice (or per slice twice) shows
    kw = {}
    if mapped:
        ids, emap = _ids_and_map(t, k, mapped, seed=t + split)
        kw = {"expert_map": emap, "global_num_experts": GE}
    cfg = MoeConfig(*tiles, swap=swap, split_k=split)
    out = torch.full((t, h), float("nan"), dtype=dtype)
    got = fm.fused_experts(
        x, w1, w2, wts, ids, config=cfg, deterministic=False, apply_router_weight_on_input=on_input, out=out, **kw
    )
    assert got is out and md.dispatch_report()["last"] == cfg
    want = fm.reference(x, w1, w2, wts, ids, apply_router_weight_on_input=on_input, expert_map=kw.get("expert_map"))
    if mapped:
        assert torch.equal(got[0].float(), torch.zeros(h))  # every slot of token 0 is on another rank
    check(got, want, dtype)
    downs = [kern for key, kern in fm._COMPILED.items() if key[0] == "down" and cfg in key]
    assert downs and all(kern.metadata.grid[2] == str(split) for kern in downs)


@pytest.mark.parametrize("k, block_k, split", [(88, 16, 5), (88, 16, 6), (72, 32, 3), (14336, 64, 8), (40, 16, 1)])
def test_slices_cover_the_k_steps_once(k: int, block_k: int, split: int) -> None:
    """``split_bounds``: consecutive slices of whole K steps, none empty while S <= steps, sizes within
    one step of each other, the last ending at the K steps' end (its tail masked by the kernel)."""
    start, end = fk.split_bounds()
    subs = {fk.K: k, fk.BLOCK_K: block_k, fk.SPLIT: split}
    (q,) = start.free_symbols - set(subs)  # this workgroup's coordinate along SPLIT (``tile_start``)
    bounds = [(int(start.subs({**subs, q: s})), int(end.subs({**subs, q: s}))) for s in range(split)]
    steps = -(-k // block_k)
    assert bounds[0][0] == 0 and bounds[-1][1] == steps * block_k
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    sizes = [(hi - lo) // block_k for lo, hi in bounds]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1 and all((hi - lo) % block_k == 0 for lo, hi in bounds)


def test_split_with_grouped_workgroup_order() -> None:
    """GROUP_M > 1 reorders grid axes 0 and 1; the SPLIT axis 2 is untouched: 64-row blocks of a skewed
    routing (several blocks per expert), S = 3."""
    x, w1, w2, wts, ids = moe_inputs(40, 32, 88, 4, 2, torch.bfloat16, "skewed", seed=12)
    cfg = MoeConfig(64, 32, 32, 16, 2, group_m=2, split_k=3)
    got = fm.fused_experts(x, w1, w2, wts, ids, config=cfg, deterministic=False)
    check(got, fm.reference(x, w1, w2, wts, ids), torch.bfloat16)
    downs = [kern for key, kern in fm._COMPILED.items() if key[0] == "down" and cfg in key]
    assert downs and all(k.metadata.grid[1:] == ("1", "3") for k in downs)  # grouped along x, slices along z


def test_split_dict_form_and_unsplit_equivalence() -> None:
    """The dict form (``SPLIT_K``) selects the split kernels; S = 2 and S = 1 agree to f32 rounding."""
    x, w1, w2, wts, ids = moe_inputs(5, 32, 88, 4, 2, torch.float16, seed=4)
    cfg = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_N_DOWN": 32, "BLOCK_K": 16, "stages": 2, "SPLIT_K": 2}
    got = fm.fused_experts(x, w1, w2, wts, ids, config=cfg, deterministic=False, activation="gelu")
    assert md.dispatch_report()["last"] == MoeConfig(16, 32, 32, 16, 2, split_k=2)
    check(got, fm.reference(x, w1, w2, wts, ids, activation="gelu"), torch.float16)
    one = fm.fused_experts(x, w1, w2, wts, ids, config={**cfg, "SPLIT_K": 1}, deterministic=False, activation="gelu")
    torch.testing.assert_close(got, one, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize(
    "config, deterministic, message",
    [
        (MoeConfig(16, 32, 32, 16, 2, split_k=7), False, "SPLIT_K 7 exceeds the down-projection's K steps"),
        (MoeConfig(16, 32, 32, 16, 2, split_k=0), False, "SPLIT_K must be an int >= 1, got 0"),
        ({"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "SPLIT_K": 2.0}, False, "SPLIT_K must be an int >= 1"),
        ({"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 16, "SPLIT_K": True}, False, "SPLIT_K must be an int >= 1"),
    ],
)
def test_bad_split_configs_name_the_argument(config, deterministic: bool, message: str) -> None:
    x, w1, w2, wts, ids = moe_inputs(3, 32, 88, 4, 2, seed=2)  # I = 88 at BLOCK_K 16: 6 K steps
    out = torch.full((3, 32), float("nan"), dtype=torch.bfloat16)
    with pytest.raises(ArgumentError, match="config") as info:
        fm.fused_experts(x, w1, w2, wts, ids, config=config, deterministic=deterministic, out=out)
    assert message in str(info.value)
    assert torch.isnan(out).all()


def test_table_split_choice_serves_both_combines() -> None:
    """A routing-aware table whose only configuration splits K: the atomic and the deterministic combine
    both run it split; both correct."""
    cfg = MoeConfig(16, 32, 32, 16, 2, split_k=3)
    shape = tm.MoeShape(4, 2, 32, 88, "bf16")
    table = tm.MoeTable(shape, "cpu", 132, [tm.PoolConfig(cfg, 132, 132)], [1.0], [(1e-6,) + (0.0,) * 6])
    assert tm.MoeTable.from_json(table.to_json()).pool[0].cfg == cfg
    md.register_table(table)
    try:
        x, w1, w2, wts, ids = moe_inputs(5, 32, 88, 4, 2, seed=8)
        want = fm.reference(x, w1, w2, wts, ids)
        for deterministic in (False, True):
            check(fm.fused_experts(x, w1, w2, wts, ids, deterministic=deterministic), want, torch.bfloat16)
            assert md.dispatch_report()["last"] == cfg
    finally:
        md.forget_tables()


@pytest.mark.parametrize("case", [CASES[1], CASES[2], CASES[7]], ids=["mapped", "skewed", "swap"])
def test_deterministic_split_matches_reference_bitwise_repeatably(case) -> None:
    """``deterministic=True`` with S slices: each slot's slices stored as f32 rows and summed in (slot,
    slice) order by the combine: against the f32 reference, every element of a NaN-filled ``out``; a second
    call gives the same bits; within f32 rounding of the atomic form."""
    t, k, dtype, tiles, split, on_input, mapped, (h, i), swap = case
    x, w1, w2, wts, ids = moe_inputs(t, h, i, 4, k, dtype, "skewed" if t > 5 else "random", seed=t + k + split)
    wts = wts * 1.7
    kw = {}
    if mapped:
        ids, emap = _ids_and_map(t, k, mapped, seed=t + split)
        kw = {"expert_map": emap, "global_num_experts": GE}
    cfg = MoeConfig(*tiles, swap=swap, split_k=split)
    outs = []
    for _ in range(2):
        out = torch.full((t, h), float("nan"), dtype=dtype)
        fm.fused_experts(x, w1, w2, wts, ids, config=cfg, apply_router_weight_on_input=on_input, out=out, **kw)
        outs.append(out)
    want = fm.reference(x, w1, w2, wts, ids, apply_router_weight_on_input=on_input, expert_map=kw.get("expert_map"))
    check(outs[0], want, dtype)
    assert torch.equal(outs[0], outs[1])
    combines = [kern for key, kern in fm._COMPILED.items() if key[0] == "combine" and key[3] == split]
    assert combines
    atomic = fm.fused_experts(
        x, w1, w2, wts, ids, config=cfg, deterministic=False, apply_router_weight_on_input=on_input, **kw
    )
    tol = 2e-3 if dtype == torch.float16 else 1.6e-2
    torch.testing.assert_close(outs[0], atomic, rtol=tol, atol=tol)
