"""``fused_experts`` / ``fused_moe`` on the emulator against an f32 torch reference that loops over the
experts: ragged and skewed routing, an expert with no tokens, ``expert_map`` with -1, the router weight on
the input, both combines, 16-row token blocks, f16 and bf16; ``out`` pre-filled with NaN (every element
written); bad arguments raise a wavec error naming the argument before anything is written; the torch
operators (opcheck, ``torch.compile(fullgraph=True)``)."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from wavec.errors import ArgumentError
from wavec.kernels import fused_moe as fm

TOL = {torch.bfloat16: 2e-2, torch.float16: 4e-3}


def moe_inputs(t: int, h: int, i: int, e: int, k: int, dtype=torch.bfloat16, routing: str = "random", seed: int = 0):
    """(hidden, w1, w2, topk_weights, topk_ids) scaled so outputs are O(1); ``routing``: "random" (top-k
    of random logits), "skewed" (logits falling with the expert id: a few experts take most rows),
    "empty" (expert 1 gets no row)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, h, generator=g).to(dtype)
    w1 = (torch.randn(e, 2 * i, h, generator=g) / h**0.5).to(dtype)
    w2 = (torch.randn(e, h, i, generator=g) / i**0.5).to(dtype)
    logits = torch.randn(t, e, generator=g)
    if routing == "skewed":
        logits = logits - 2.5 * torch.arange(e)
    if routing == "empty":
        logits[:, 1] = -torch.inf
    weights, ids = torch.topk(torch.softmax(logits, -1), k)
    return x, w1, w2, weights, ids.to(torch.int32)


def check(got: torch.Tensor, want: torch.Tensor, dtype) -> None:
    assert torch.isfinite(got).all(), "an output element was not written"
    tol = TOL[dtype]
    torch.testing.assert_close(got.float(), want, rtol=tol, atol=tol)


CASES = [
    # t, h, i, e, k, dtype, routing
    (1, 32, 32, 4, 1, torch.bfloat16, "random"),
    (1, 64, 64, 8, 2, torch.float16, "random"),
    (7, 64, 32, 4, 2, torch.bfloat16, "empty"),
    (17, 32, 64, 8, 2, torch.float16, "skewed"),
    (40, 64, 64, 8, 2, torch.bfloat16, "skewed"),
    (40, 32, 32, 6, 1, torch.float16, "random"),
]


@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("t, h, i, e, k, dtype, routing", CASES)
def test_fused_experts_matches_reference(t, h, i, e, k, dtype, routing, deterministic: bool) -> None:
    x, w1, w2, wts, ids = moe_inputs(t, h, i, e, k, dtype, routing, seed=t + e)
    if routing == "empty":
        assert not (ids == 1).any()
    out = torch.full((t, h), float("nan"), dtype=dtype)
    got = fm.fused_experts(x, w1, w2, wts, ids, deterministic=deterministic, out=out)
    assert got is out
    check(out, fm.reference(x, w1, w2, wts, ids), dtype)


@pytest.mark.parametrize("block_m", [16, 32, 64])
def test_token_blocks(block_m: int) -> None:
    """Every token block, 16 rows included (1 x 4 waves of m16 tiles), with ragged expert segments."""
    x, w1, w2, wts, ids = moe_inputs(37, 64, 32, 4, 2, routing="skewed", seed=block_m)
    cfg = {"BLOCK_M": block_m, "BLOCK_N": 32, "BLOCK_N_DOWN": 64, "BLOCK_K": 32, "stages": 2}
    for det in (True, False):
        got = fm.fused_experts(x, w1, w2, wts, ids, config=cfg, deterministic=det)
        check(got, fm.reference(x, w1, w2, wts, ids), torch.bfloat16)


@pytest.mark.parametrize("deterministic", [True, False])
def test_expert_map_skips_other_ranks(deterministic: bool) -> None:
    """Global ids over 12 experts, 5 of them local (the rest -1): only local experts contribute; a token
    whose slots are all remote gets zeros."""
    t, k, ge = 21, 2, 12
    x, w1, w2, wts, _ = moe_inputs(t, 32, 32, 5, k, seed=3)
    g = torch.Generator().manual_seed(4)
    ids = torch.stack([torch.randperm(ge, generator=g)[:k] for _ in range(t)]).to(torch.int32)
    emap = torch.full((ge,), -1, dtype=torch.int32)
    emap[torch.tensor([9, 0, 4, 7, 2])] = torch.arange(5, dtype=torch.int32)
    ids[0] = torch.tensor([1, 3], dtype=torch.int32)  # both remote
    got = fm.fused_experts(
        x, w1, w2, wts, ids, expert_map=emap, global_num_experts=ge, deterministic=deterministic,
        out=torch.full((t, 32), float("nan"), dtype=torch.bfloat16),
    )  # fmt: skip
    want = fm.reference(x, w1, w2, wts, ids, expert_map=emap)
    assert torch.equal(want[0], torch.zeros(32)) and torch.equal(got[0].float(), torch.zeros(32))
    check(got, want, torch.bfloat16)


@pytest.mark.parametrize("k", [1, 2])
def test_router_weight_on_input(k: int) -> None:
    """``apply_router_weight_on_input``: the weight scales the token row before the up-projection (act of
    a scaled gate: not the same as weighting the output), and the down-projection does not weight again."""
    x, w1, w2, wts, ids = moe_inputs(19, 64, 32, 4, k, seed=5)
    wts = wts * 3.0  # far from 1: the two placements differ
    got = fm.fused_experts(x, w1, w2, wts, ids, apply_router_weight_on_input=True)
    want = fm.reference(x, w1, w2, wts, ids, apply_router_weight_on_input=True)
    check(got, want, torch.bfloat16)
    assert (want - fm.reference(x, w1, w2, wts, ids)).abs().max() > 0.1


def test_gelu_int64_ids_bf16_weights() -> None:
    x, w1, w2, wts, ids = moe_inputs(11, 32, 32, 4, 2, seed=6)
    got = fm.fused_experts(x, w1, w2, wts.bfloat16(), ids.long(), activation="gelu")
    check(got, fm.reference(x, w1, w2, wts.bfloat16(), ids, activation="gelu"), torch.bfloat16)


def test_deterministic_combine_sums_slots_in_order() -> None:
    """The deterministic combine adds each token's k rows in slot order in f32: with one expert per slot
    and integer-valued data it equals the reference bitwise (no atomics, nothing order-dependent)."""
    x, w1, w2, wts, ids = moe_inputs(9, 32, 32, 4, 2, seed=7)
    x, w1, w2 = (v.float().round().clamp(-2, 2).bfloat16() for v in (x, w1, w2))
    wts = torch.full_like(wts, 0.5)
    got = fm.fused_experts(x, w1, w2, wts, ids, deterministic=True)
    again = fm.fused_experts(x, w1, w2, wts, ids, deterministic=True)
    assert torch.equal(got, again)
    check(got, fm.reference(x, w1, w2, wts, ids), torch.bfloat16)


@pytest.mark.parametrize("renormalize", [False, True])
def test_fused_moe_routes_then_runs_experts(renormalize: bool) -> None:
    x, w1, w2, _, _ = moe_inputs(13, 32, 32, 8, 2, seed=8)
    logits = torch.randn(13, 8, generator=torch.Generator().manual_seed(9))
    got = fm.fused_moe(x, w1, w2, logits, 2, renormalize)
    wts, ids = torch.topk(torch.softmax(logits, -1), 2)
    if renormalize:
        wts = wts / wts.sum(-1, keepdim=True)
    check(got, fm.reference(x, w1, w2, wts, ids), torch.bfloat16)


def test_empty_batch() -> None:
    x, w1, w2, wts, ids = moe_inputs(0, 32, 32, 4, 2)
    assert fm.fused_experts(x, w1, w2, wts, ids).shape == (0, 32)


def test_static_config_rule() -> None:
    """BLOCK_M follows the tokens per expert at balanced routing: 16 for decode, 128 for prefill."""
    assert [fm.static_config(t, 8, 64).block_m for t in (1, 64, 128, 256, 512, 4096)] == [16, 16, 16, 32, 64, 128]
    assert fm.static_config(4096, 2, 8).block_k == 32
    assert fm.grid_rows(8, 64, 16) == 8 * 16  # T = 1, k = 8: at most 8 non-empty experts
    assert fm.grid_rows(4096 * 8, 64, 128) == (4096 * 8 + 64 * 127) // 128 * 128


def _bad_calls():
    x, w1, w2, wts, ids = moe_inputs(5, 32, 32, 4, 2)
    emap = torch.tensor([0, -1, 1, 2, 3, -1], dtype=torch.int32)
    yield "hidden", (x.float(), w1, w2, wts, ids), {}
    yield "w1", (x, w1[:, :, :16], w2, wts, ids), {}
    yield "w1", (x, w1[:, :63], w2, wts, ids), {}  # odd 2I
    yield "w2", (x, w1, w2[:, :, :16], wts, ids), {}  # I does not match w1's
    yield "w2", (x, w1, w2.half(), wts, ids), {}
    yield "w2", (x, w1, w2[:3], wts, ids), {}
    yield "topk_ids", (x, w1, w2, wts, ids[:4]), {}
    yield "topk_weights", (x, w1, w2, wts[:, :1], ids), {}  # k mismatch
    yield "topk_ids", (x, w1, w2, wts, ids.float()), {}
    yield "topk_ids", (x, w1, w2, wts, ids + 3), {}  # ids outside [0, E)
    yield "topk_ids", (x, w1, w2, wts, ids - 1), {}
    yield "activation", (x, w1, w2, wts, ids), {"activation": "relu"}
    yield "dispatch", (x, w1, w2, wts, ids), {"dispatch": "best"}
    yield "global_num_experts", (x, w1, w2, wts, ids), {"global_num_experts": 8}
    yield "expert_map", (x, w1, w2, wts, ids), {"expert_map": emap.long()}
    yield "expert_map", (x, w1, w2, wts, ids), {"expert_map": emap, "global_num_experts": 5}
    yield "expert_map", (x, w1, w2, wts, ids), {"expert_map": emap + 1}  # a local id >= E
    yield "topk_ids", (x, w1, w2, wts, ids + 4), {"expert_map": emap}  # a global id >= 6
    yield "config", (x, w1, w2, wts, ids), {"config": {"BLOCK_M": 8, "BLOCK_N": 64, "BLOCK_K": 32}}
    yield "deterministic", (x, w1, w2, wts, ids), {"deterministic": 1}
    yield "out", (x, w1, w2, wts, ids), {"out": torch.empty(5, 16, dtype=torch.bfloat16)}


@pytest.mark.parametrize("arg, args, kwargs", list(_bad_calls()))
def test_bad_arguments_name_the_argument(arg: str, args: tuple, kwargs: dict) -> None:
    out = kwargs.get("out", torch.full((5, 32), float("nan"), dtype=torch.bfloat16))
    before = out.clone()
    with pytest.raises(ArgumentError, match=f"argument '{arg}'"):
        fm.fused_experts(*args, **{**kwargs, "out": out})
    assert torch.equal(out.isnan(), before.isnan()) and torch.equal(out.nan_to_num(), before.nan_to_num())


def test_torch_operators_opcheck_and_compile() -> None:
    from wavec.kernels import torch_ops  # noqa: F401  (registers the operators)

    x, w1, w2, wts, ids = moe_inputs(6, 32, 32, 4, 2, seed=10)
    want = fm.reference(x, w1, w2, wts, ids)
    check(torch.ops.wavec.fused_experts(x, w1, w2, wts, ids), want, torch.bfloat16)
    torch.library.opcheck(torch.ops.wavec.fused_experts.default, (x, w1, w2, wts, ids))
    logits = torch.randn(6, 4, generator=torch.Generator().manual_seed(11))
    torch.library.opcheck(torch.ops.wavec.fused_moe.default, (x, w1, w2, logits, 2, True))

    def layer(x, logits):
        return torch.ops.wavec.fused_moe(x, w1, w2, logits, 2, True).float() * 2

    got = torch.compile(layer, fullgraph=True, backend="eager")(x, logits)
    torch.testing.assert_close(got, layer(x, logits), rtol=0, atol=0)
    with pytest.raises(wc.WavecError, match="argument 'w2'"):
        torch.ops.wavec.fused_experts(x, w1, w2[:, :16], wts, ids)


def test_remap_reads_the_map_with_a_bounds_check() -> None:
    """``moe_remap`` (the map, -1 to the skip expert) and the access the GPU's WAVEC_CHECK_BOUNDS check
    guards: an id past the map is an out-of-bounds read (the emulator always checks it)."""
    from wavec.errors import OutOfBoundsError
    from wavec.kernels import fused_moe_kernels as fk

    remap = wc.compile(fk.make_remap(), fk.remap_subs())
    table = torch.tensor([3, -1, 0, 2, -1, 1], dtype=torch.int32)
    ids = torch.randint(0, 6, (300,), dtype=torch.int32)
    local = torch.full_like(ids, -7)
    remap(ids, table, local, 4)
    assert torch.equal(local, torch.where(table[ids.long()] < 0, 4, table[ids.long()]))
    with pytest.raises(OutOfBoundsError, match=r"(?s)mapping=\{GE: wc.read\(topk_ids\)\}.*index 6 in dim 0 \(size 6\)"):
        remap(torch.tensor([0, 6, 1], dtype=torch.int32), table, local[:3], 4)
