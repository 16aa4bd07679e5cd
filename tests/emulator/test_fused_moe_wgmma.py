"""``fused_experts`` with the large token blocks on wgmma (``MoeConfig(wgmma=True)``: both GEMMs on sm_90a
``wgmma`` with the token block of 64 or 128 rows on the instruction's M axis, one warpgroup per 64 tokens,
the expert's weight rows on N, gathered ``cp.async`` operands) on the emulator, lane by lane, against the
f32 torch reference: tokens spread over several blocks of an expert, top-k 1 and 2, f16 and bf16, both
combines, the router weight on the input or the output, ``expert_map`` with -1 entries, N and K edges that
are not tile multiples; ``out`` NaN-filled (every element written).  Also the dict form and the checks."""

from __future__ import annotations

import pytest
import torch

from tests.emulator.test_fused_moe import check, moe_inputs
from tests.emulator.test_fused_moe_swap import GE, _ids_and_map
from wavec.errors import ArgumentError
from wavec.kernels import fused_moe as fm
from wavec.kernels import moe_dispatch as md
from wavec.kernels.fused_moe import MoeConfig

# t, k, dtype, (BLOCK_M, BLOCK_N, BLOCK_N_DOWN, BLOCK_K, stages), deterministic, weight on input, mapped, (H, I)
CASES = [
    (40, 2, torch.bfloat16, (64, 64, 64, 32, 2), True, False, False, (64, 64)),
    (70, 2, torch.float16, (64, 64, 128, 64, 3), False, False, True, (64, 64)),
    (130, 1, torch.bfloat16, (128, 64, 64, 32, 2), True, True, False, (64, 64)),
    (100, 2, torch.float16, (128, 128, 256, 32, 3), False, True, False, (128, 128)),
    # H = 80 and I = 96: masked weight rows of the last N tile and a K tail in both GEMMs
    (90, 2, torch.bfloat16, (64, 64, 64, 32, 2), True, False, True, (80, 96)),
    # H = 72, I = 40: K tails of 8 elements (half a wgmma K step, zero-filled)
    (50, 2, torch.float16, (128, 64, 64, 32, 2), False, False, False, (72, 40)),
]


@pytest.mark.parametrize("t, k, dtype, tiles, deterministic, on_input, mapped, sizes", CASES)
def test_wgmma_matches_reference(t, k, dtype, tiles, deterministic, on_input, mapped, sizes) -> None:
    h, i = sizes
    x, w1, w2, wts, ids = moe_inputs(t, h, i, 4, k, dtype, "skewed", seed=t + k)
    wts = wts * 1.7  # far from a softmax's sum: a weight applied twice or not at all shows
    kw = {}
    if mapped:
        ids, emap = _ids_and_map(t, k, mapped, seed=t)
        kw = {"expert_map": emap, "global_num_experts": GE}
    cfg = MoeConfig(*tiles, wgmma=True)
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
    """Both GEMMs of ``cfg`` were compiled for sm_90a with m64 wgmmas whose N is the weight tile, one
    warpgroup per 64 tokens."""
    gemms = [(key[0], kern) for key, kern in fm._COMPILED.items() if key[0] in ("up", "down") and cfg in key]
    assert len(gemms) >= 2
    for name, kern in gemms:
        n = cfg.block_n_down if name == "down" else cfg.block_n
        assert f"<m = 64, n = {n}, k = 16>" in kern.mlir and "mma.sync" not in kern.mlir
        assert kern.metadata.block == (128 * (cfg.block_m // 64), 1, 1)


def test_wgmma_gelu_and_dict_config() -> None:
    """The dict form (``WGMMA``) selects the same kernels; gelu's epilogue."""
    x, w1, w2, wts, ids = moe_inputs(60, 64, 64, 4, 2, torch.float16, seed=9)
    cfg = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_N_DOWN": 64, "BLOCK_K": 32, "stages": 2, "WGMMA": True}
    got = fm.fused_experts(x, w1, w2, wts, ids, config=cfg, activation="gelu")
    assert md.dispatch_report()["last"] == MoeConfig(64, 64, 64, 32, 2, wgmma=True)
    check(got, fm.reference(x, w1, w2, wts, ids, activation="gelu"), torch.float16)


@pytest.mark.parametrize(
    "cfg, match",
    [
        (
            {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32, "WGMMA": True},
            "BLOCK_M must be one of \\(64, 128\\) with WGMMA",
        ),
        ({"BLOCK_M": 64, "BLOCK_N": 256, "BLOCK_K": 32, "WGMMA": True}, "BLOCK_N must be one of \\(64, 128\\) with"),
        ({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "WGMMA": 1}, "WGMMA must be True or False"),
        ({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "WGMMA": True, "SWAP": True}, "exclude each other"),
    ],
)
def test_wgmma_config_errors(cfg, match) -> None:
    x, w1, w2, wts, ids = moe_inputs(4, 64, 64, 4, 2, seed=1)
    with pytest.raises(ArgumentError, match=match):
        fm.fused_experts(x, w1, w2, wts, ids, config=cfg)


def test_wgmma_label() -> None:
    assert MoeConfig(128, 128, 256, 64, 3, wgmma=True).label() == "m128n128d256k64s3h"


@pytest.mark.parametrize("deterministic", [False, True])
def test_wgmma_split_down_projection(deterministic: bool) -> None:
    """A wgmma configuration with the down-projection split over 3 K slices (I = 200: ragged slices, a K
    tail) on both combines."""
    x, w1, w2, wts, ids = moe_inputs(70, 64, 200, 4, 2, torch.bfloat16, "skewed", seed=3)
    cfg = MoeConfig(64, 64, 64, 32, 2, split_k=3, wgmma=True)
    out = torch.full((70, 64), float("nan"), dtype=torch.bfloat16)
    fm.fused_experts(x, w1, w2, wts, ids, config=cfg, deterministic=deterministic, out=out)
    assert md.dispatch_report()["last"] == cfg
    check(out, fm.reference(x, w1, w2, wts, ids), torch.bfloat16)
