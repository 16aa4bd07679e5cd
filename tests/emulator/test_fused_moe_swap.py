"""``fused_experts`` with swap-AB configurations (``MoeConfig(swap=True)``: both GEMMs on sm_90a ``wgmma``
with the expert's weight rows as the 64-row M operand and the token block of 8, 16 or 32 rows as the N
operand) on the emulator, lane by lane, against the f32 torch reference: T = 1, 3, 7, 16, 33 tokens, top-k
1 and 2, f16 and bf16, both combines, the router weight on the input or the output, ``expert_map`` with
-1 entries, N and K edges that are not tile multiples (K tails of half a wgmma K step too); ``out``
NaN-filled (every element written).  Also a routing-aware table whose pool mixes swap-AB and mma.sync
configurations, and the configuration checks."""

from __future__ import annotations

import pytest
import torch

from tests.emulator.test_fused_moe import check, moe_inputs
from wavec.errors import ArgumentError
from wavec.kernels import fused_moe as fm
from wavec.kernels import moe_dispatch as md
from wavec.kernels.fused_moe import MoeConfig
from wavec.tuning import moe as tm

GE = 7  # global experts of the expert_map cases: 4 local, 3 on another rank

# t, k, dtype, (BLOCK_M, BLOCK_N, BLOCK_N_DOWN, BLOCK_K, stages), deterministic, weight on input, mapped, (H, I)
CASES = [
    (1, 1, torch.bfloat16, (8, 64, 64, 32, 2), True, False, False, (64, 64)),
    (3, 2, torch.float16, (8, 64, 128, 64, 3), False, False, True, (64, 64)),
    (7, 2, torch.bfloat16, (16, 64, 64, 32, 2), True, True, False, (64, 64)),
    (7, 1, torch.float16, (32, 64, 64, 32, 2), False, True, True, (64, 64)),
    (16, 1, torch.float16, (16, 128, 64, 32, 3), False, True, False, (64, 64)),
    (16, 2, torch.bfloat16, (8, 64, 64, 32, 2), True, False, True, (64, 64)),
    (33, 2, torch.bfloat16, (32, 64, 128, 32, 2), True, False, True, (64, 64)),
    (33, 2, torch.float16, (16, 64, 64, 32, 2), False, False, False, (64, 64)),
    # H = 80 and I = 96: masked weight rows of the last N tile (the M operand) and a K tail in both GEMMs
    (33, 2, torch.float16, (8, 64, 64, 32, 2), True, True, False, (80, 96)),
    (16, 1, torch.bfloat16, (32, 64, 64, 64, 2), False, False, True, (80, 96)),
    # H = 72, I = 40: K tails of 8 elements (half a wgmma K step, zero-filled) in both GEMMs
    (7, 2, torch.bfloat16, (16, 64, 64, 32, 2), False, True, False, (72, 40)),
    # two and four warpgroups (swap_warpgroups: 32 x 128 token tiles keep 16-byte copies for 512 threads)
    (33, 2, torch.bfloat16, (32, 128, 256, 128, 2), True, False, False, (128, 128)),
    (16, 2, torch.float16, (32, 128, 128, 64, 3), False, True, True, (128, 192)),
]


def _ids_and_map(t: int, k: int, mapped: bool, seed: int):
    """Global ids over GE experts and the map of 4 local ones (the rest -1), one token with every slot
    remote; or None for unmapped cases."""
    if not mapped:
        return None
    g = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randperm(GE, generator=g)[:k] for _ in range(t)]).to(torch.int32)
    emap = torch.full((GE,), -1, dtype=torch.int32)
    emap[torch.tensor([5, 0, 3, 6])] = torch.arange(4, dtype=torch.int32)
    ids[0] = torch.tensor([1, 2][:k], dtype=torch.int32)  # remote only: this token's output is zero
    return ids, emap


@pytest.mark.parametrize("t, k, dtype, tiles, deterministic, on_input, mapped, sizes", CASES)
def test_swap_matches_reference(t, k, dtype, tiles, deterministic, on_input, mapped, sizes) -> None:
    h, i = sizes
    x, w1, w2, wts, ids = moe_inputs(t, h, i, 4, k, dtype, "skewed" if t > 7 else "random", seed=t + k)
    wts = wts * 1.7  # far from a softmax's sum: a weight applied twice or not at all shows
    kw = {}
    if mapped:
        ids, emap = _ids_and_map(t, k, mapped, seed=t)
        kw = {"expert_map": emap, "global_num_experts": GE}
    cfg = MoeConfig(*tiles, swap=True)
    out = torch.full((t, h), float("nan"), dtype=dtype)
    got = fm.fused_experts(
        x, w1, w2, wts, ids, config=cfg, deterministic=deterministic, apply_router_weight_on_input=on_input,
        out=out, **kw,
    )  # fmt: skip
    assert got is out and md.dispatch_report()["last"] == cfg
    want = fm.reference(x, w1, w2, wts, ids, apply_router_weight_on_input=on_input, expert_map=kw.get("expert_map"))
    if mapped:
        assert torch.equal(got[0].float(), torch.zeros(h))
    check(got, want, dtype)
    _assert_wgmma(cfg)


def _assert_wgmma(cfg: MoeConfig) -> None:
    """Both GEMMs of ``cfg`` were compiled for sm_90a with m64 wgmmas whose N is the token block, on
    ``swap_warpgroups`` warpgroups."""
    gemms = [(key[0], kern) for key, kern in fm._COMPILED.items() if key[0] in ("up", "down") and cfg in key]
    assert len(gemms) >= 2
    for name, kern in gemms:
        assert f"<m = 64, n = {cfg.block_m}, k = 16>" in kern.mlir and "mma.sync" not in kern.mlir
        assert kern.metadata.block == (128 * cfg.swap_waves(name == "down"), 1, 1)


def test_swap_gelu_and_dict_config() -> None:
    """The dict form (``SWAP``) selects the same kernels; gelu's epilogue on the transposed tile."""
    x, w1, w2, wts, ids = moe_inputs(5, 64, 64, 4, 2, torch.float16, seed=9)
    cfg = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_N_DOWN": 64, "BLOCK_K": 32, "stages": 2, "SWAP": True}
    got = fm.fused_experts(x, w1, w2, wts, ids, config=cfg, activation="gelu")
    assert md.dispatch_report()["last"] == MoeConfig(16, 64, 64, 32, 2, swap=True)
    check(got, fm.reference(x, w1, w2, wts, ids, activation="gelu"), torch.float16)


def test_routing_aware_table_mixes_swap_and_mma_sync() -> None:
    """A pool of a swap-AB configuration (BM 8) and an mma.sync one (BM 64): few tokens per expert pick
    the swap-AB kernels, many the mma.sync ones, both correct; the table's JSON keeps ``swap``."""
    swap, dense = MoeConfig(8, 64, 64, 32, 2, swap=True), MoeConfig(64, 32, 64, 32, 2)
    shape = tm.MoeShape(4, 2, 64, 64, "bf16")
    pool = [tm.PoolConfig(swap, 132, 132), tm.PoolConfig(dense, 132, 132)]
    # swap: 1 us per block of 8 (at most 4 at T = 3, at least 10 at T = 40); dense: 5.5 us flat
    coef = [(0.0, 0.0, 1e-6, 0.0, 0.0, 0.0, 0.0), (5.5e-6, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)]
    table = tm.MoeTable(shape, "cpu", 132, pool, [1.0, 1.0], coef)
    assert tm.MoeTable.from_json(table.to_json()).pool[0].cfg == swap
    md.register_table(table)
    try:
        for t, want in ((3, swap), (40, dense)):  # 6 ids: <= 4 blocks of 8; 80 ids: >= 10 blocks
            x, w1, w2, wts, ids = moe_inputs(t, 64, 64, 4, 2, seed=t)
            got = fm.fused_experts(x, w1, w2, wts, ids)
            assert md.dispatch_report()["last"] == want, t
            check(got, fm.reference(x, w1, w2, wts, ids), torch.bfloat16)
    finally:
        md.forget_tables()


@pytest.mark.parametrize(
    "config, message",
    [
        (MoeConfig(64, 64, 64, 32, 2, swap=True), "BLOCK_M must be one of (8, 16, 32) with SWAP"),
        (MoeConfig(16, 32, 64, 32, 2, swap=True), "BLOCK_N must be one of (64, 128, 256) with SWAP"),
        (MoeConfig(16, 64, 96, 32, 2, swap=True), "BLOCK_N_DOWN must be one of (64, 128, 256) with SWAP"),
        (MoeConfig(8, 64, 64, 32, 2), "BLOCK_M must be one of (16, 32, 64, 128), got 8"),
        (MoeConfig(8, 64, 64, 16, 2, swap=True), "BLOCK_M x BLOCK_K must be at least 256 with SWAP"),
        ({"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 32, "SWAP": 1}, "SWAP must be True or False, got 1"),
    ],
)
def test_bad_swap_configs_name_the_argument(config, message: str) -> None:
    x, w1, w2, wts, ids = moe_inputs(3, 64, 64, 4, 2, seed=2)
    out = torch.full((3, 64), float("nan"), dtype=torch.bfloat16)
    with pytest.raises(ArgumentError, match="config") as info:
        fm.fused_experts(x, w1, w2, wts, ids, config=config, out=out)
    assert message in str(info.value)
    assert torch.isnan(out).all()


def test_swap_needs_a_hopper_gpu(monkeypatch) -> None:
    """On a CUDA device whose target is not sm_90a a swap-AB configuration is refused before any launch."""

    class Cuda:
        type = "cuda"

    monkeypatch.setattr(fm, "_target", lambda backend, device: None)
    with pytest.raises(ArgumentError, match="needs an sm_90a"):
        fm.check_swap_target(Cuda(), "cuda")
    monkeypatch.setattr(fm, "_target", lambda backend, device: "sm_90a")
    fm.check_swap_target(Cuda(), "cuda")
    fm.check_swap_target(torch.device("cpu"), None)  # the emulator runs the sm_90a module
