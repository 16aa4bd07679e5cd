"""GPU tier for the large token blocks on wgmma (``MoeConfig(wgmma=True)``: sm_90a ``wgmma`` with the token
block of 64 or 128 rows on the M axis, one warpgroup per 64 tokens) at model-like sizes against an f32
torch reference on the device, every output element checked: T = 64, 200, 1000 (and a skewed 3000), top-k
1, 2 and 8, f16 and bf16, both combines, the router weight on the input or the output, ``expert_map`` with
-1 entries, outputs NaN-filled; CUDA-graph replay; the same outputs as the mma.sync kernels within the
tolerance.  Skips unless the GPU is an sm_90a (Hopper) one."""

from __future__ import annotations

import pytest
import torch

from tests import moe_gpu
from wavec.kernels import fused_moe as fm
from wavec.kernels.fused_moe import MoeConfig

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
        reason="these MoE kernels run on wgmma: needs an sm_90a (Hopper) GPU",
    ),
]

CONFIGS = [
    MoeConfig(64, 64, 128, 64, 4, wgmma=True),
    MoeConfig(64, 128, 128, 64, 4, wgmma=True),
    MoeConfig(128, 128, 128, 64, 4, wgmma=True),
    MoeConfig(128, 128, 256, 64, 4, wgmma=True),
]
SHAPES = [  # h, i, e, k
    (1024, 512, 8, 2),
    (2048, 768, 64, 8),
    (1000, 264, 16, 1),  # N and K edges: H = 1000 and I = 264 are no tile's multiple
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("t", [64, 200, 1000])
@pytest.mark.parametrize("h, i, e, k", SHAPES)
@pytest.mark.parametrize("cfg", CONFIGS, ids=MoeConfig.label)
def test_wgmma_model_sizes(cfg: MoeConfig, h: int, i: int, e: int, k: int, t: int, deterministic: bool, dtype) -> None:
    x, w1, w2, wts, ids = moe_gpu.inputs(t, h, i, e, k, dtype, seed=t + k)
    out = torch.full((t, h), float("nan"), dtype=dtype, device="cuda")
    fm.fused_experts(x, w1, w2, wts, ids, config=cfg, deterministic=deterministic, out=out)
    moe_gpu.check(out, fm.reference(x, w1, w2, wts, ids), dtype)


@pytest.mark.parametrize("cfg", CONFIGS, ids=MoeConfig.label)
def test_wgmma_skewed_routing_matches_mma_sync(cfg: MoeConfig) -> None:
    """Skewed routing (many blocks of one expert, experts without tokens): wgmma agrees with the
    reference and with the mma.sync kernels of the same token block."""
    x, w1, w2, wts, ids = moe_gpu.inputs(3000, 1024, 512, 64, 8, skew=2.0, seed=cfg.block_m)
    want = fm.reference(x, w1, w2, wts, ids)
    dense = fm.tiles_for_block(cfg.block_m)
    for det in (True, False):
        got = fm.fused_experts(x, w1, w2, wts, ids, config=cfg, deterministic=det)
        moe_gpu.check(got, want, torch.bfloat16)
        ref = fm.fused_experts(x, w1, w2, wts, ids, config=dense, deterministic=det)
        tol = moe_gpu.TOL[torch.bfloat16]
        torch.testing.assert_close(got.float(), ref.float(), rtol=tol, atol=tol)


@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("cfg", CONFIGS[::3], ids=MoeConfig.label)
def test_wgmma_expert_map_and_weight_on_input(cfg: MoeConfig, deterministic: bool) -> None:
    t, ge, local = 333, 64, 16
    x, w1, w2, wts, _ = moe_gpu.inputs(t, 1024, 512, local, 2, seed=2)
    ids = torch.stack([torch.randperm(ge, device="cuda")[:2] for _ in range(t)]).to(torch.int32)
    emap = torch.full((ge,), -1, dtype=torch.int32, device="cuda")
    emap[torch.randperm(ge, device="cuda")[:local]] = torch.arange(local, dtype=torch.int32, device="cuda")
    for on_input in (False, True):
        out = torch.full((t, 1024), float("nan"), dtype=torch.bfloat16, device="cuda")
        fm.fused_experts(x, w1, w2, wts * 2, ids, expert_map=emap, global_num_experts=ge, config=cfg,
                         apply_router_weight_on_input=on_input, deterministic=deterministic, out=out)  # fmt: skip
        want = fm.reference(x, w1, w2, wts * 2, ids, expert_map=emap, apply_router_weight_on_input=on_input)
        moe_gpu.check(out, want, torch.bfloat16)


def test_wgmma_cuda_graph_replay() -> None:
    """The operator with these kernels captures and replays; new routing in the captured buffers gives
    the new answer."""
    cfg = CONFIGS[-1]
    x, w1, w2, wts, ids = moe_gpu.inputs(700, 2048, 768, 64, 8, seed=4)
    out = torch.empty(700, 2048, dtype=torch.bfloat16, device="cuda")
    fm.fused_experts(x, w1, w2, wts, ids, config=cfg, out=out)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fm.fused_experts(x, w1, w2, wts, ids, config=cfg, out=out)
    x2, _, _, wts2, ids2 = moe_gpu.inputs(700, 2048, 768, 64, 8, skew=2.0, seed=5)
    x.copy_(x2), wts.copy_(wts2), ids.copy_(ids2)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    moe_gpu.check(out, fm.reference(x, w1, w2, wts, ids), torch.bfloat16)
