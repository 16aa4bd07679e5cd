"""GPU tier for the split-K MoE down-projection (``MoeConfig(split_k=S)``, both combines) at model-like
sizes against an f32 torch reference on the device, every output element checked: a Mixtral-like deep I
(E = 8, k = 2, I = 3584, 3592 with a K tail in the last slice, Mixtral's own H 4096 x I 14336), T = 1, 3,
8, 33 and a skewed 300, S = 2, 3, 4 and 7, f16 and bf16, the router weight on the input or the output,
``expert_map`` with -1 entries, outputs NaN-filled; the split result agrees with the unsplit one;
CUDA-graph replay; the swap-AB form on an sm_90a GPU.  Skips without a CUDA GPU."""

from __future__ import annotations

import pytest
import torch

from tests import moe_gpu
from wavec.kernels import fused_moe as fm
from wavec.kernels.fused_moe import MoeConfig

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]
HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)

CONFIGS = [
    MoeConfig(16, 32, 64, 64, 3, split_k=2),
    MoeConfig(16, 64, 128, 64, 3, split_k=3),
    MoeConfig(16, 64, 256, 64, 4, split_k=4),
    MoeConfig(32, 64, 256, 32, 3, split_k=7),
]
SWAPS = [MoeConfig(16, 64, 128, 64, 3, swap=True, split_k=2), MoeConfig(8, 64, 256, 128, 3, swap=True, split_k=4)]
SHAPES = [(1024, 3584, 8, 2), (512, 3592, 8, 2)]  # h, i, e, k


def inputs(t: int, h: int, i: int, e: int, k: int, dtype=torch.bfloat16, skew: float = 0.0, seed: int = 0):
    # 1.7: a weight applied per slice twice shows
    return moe_gpu.inputs(t, h, i, e, k, dtype, skew, seed, weight_scale=1.7)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("t", [1, 3, 8, 33])
@pytest.mark.parametrize("h, i, e, k", SHAPES)
@pytest.mark.parametrize("cfg", CONFIGS, ids=MoeConfig.label)
def test_split_model_sizes(cfg: MoeConfig, h: int, i: int, e: int, k: int, t: int, dtype) -> None:
    x, w1, w2, wts, ids = inputs(t, h, i, e, k, dtype, seed=t + cfg.split_k)
    for on_input in (False, True):
        out = torch.full((t, h), float("nan"), dtype=dtype, device="cuda")
        fm.fused_experts(x, w1, w2, wts, ids, config=cfg, deterministic=False, out=out,
                         apply_router_weight_on_input=on_input)  # fmt: skip
        moe_gpu.check(out, fm.reference(x, w1, w2, wts, ids, apply_router_weight_on_input=on_input), dtype)


@pytest.mark.parametrize("t", [1, 8])
@pytest.mark.parametrize("cfg", CONFIGS, ids=MoeConfig.label)
def test_split_mixtral_size(cfg: MoeConfig, t: int) -> None:
    """Mixtral-8x7B's H = 4096 and I = 14336 (the shape the region rule names), bf16."""
    x, w1, w2, wts, ids = inputs(t, 4096, 14336, 8, 2, seed=t)
    out = torch.full((t, 4096), float("nan"), dtype=torch.bfloat16, device="cuda")
    fm.fused_experts(x, w1, w2, wts, ids, config=cfg, deterministic=False, out=out)
    moe_gpu.check(out, fm.reference(x, w1, w2, wts, ids), torch.bfloat16)


@pytest.mark.parametrize("cfg", CONFIGS, ids=MoeConfig.label)
def test_split_skewed_matches_unsplit(cfg: MoeConfig) -> None:
    """Skewed routing (many blocks of one expert, experts without tokens): the split result agrees with
    the reference and with the same tiles unsplit."""
    x, w1, w2, wts, ids = inputs(300, 1024, 3584, 8, 2, skew=2.0, seed=cfg.split_k)
    got = fm.fused_experts(x, w1, w2, wts, ids, config=cfg, deterministic=False)
    moe_gpu.check(got, fm.reference(x, w1, w2, wts, ids), torch.bfloat16)
    one = fm.fused_experts(x, w1, w2, wts, ids, config=cfg.unsplit(), deterministic=False)
    tol = moe_gpu.TOL[torch.bfloat16]
    torch.testing.assert_close(got.float(), one.float(), rtol=tol, atol=tol)


def test_split_expert_map_both_combines() -> None:
    t, ge, local = 33, 32, 8
    x, w1, w2, wts, _ = inputs(t, 1024, 3584, local, 2, seed=2)
    ids = torch.stack([torch.randperm(ge, device="cuda")[:2] for _ in range(t)]).to(torch.int32)
    emap = torch.full((ge,), -1, dtype=torch.int32, device="cuda")
    emap[torch.randperm(ge, device="cuda")[:local]] = torch.arange(local, dtype=torch.int32, device="cuda")
    out = torch.full((t, 1024), float("nan"), dtype=torch.bfloat16, device="cuda")
    fm.fused_experts(x, w1, w2, wts, ids, expert_map=emap, global_num_experts=ge, config=CONFIGS[1],
                     deterministic=False, out=out)  # fmt: skip
    moe_gpu.check(out, fm.reference(x, w1, w2, wts, ids, expert_map=emap), torch.bfloat16)
    out.fill_(float("nan"))  # the deterministic split form: skipped slots' rows are never read
    fm.fused_experts(x, w1, w2, wts, ids, expert_map=emap, global_num_experts=ge, config=CONFIGS[1], out=out)
    moe_gpu.check(out, fm.reference(x, w1, w2, wts, ids, expert_map=emap), torch.bfloat16)


def test_split_cuda_graph_replay() -> None:
    """The operator with a split down-projection captures and replays (the accumulator's zeroing is in
    the graph); new routing in the captured buffers gives the new answer."""
    cfg = CONFIGS[2]
    x, w1, w2, wts, ids = inputs(4, 4096, 14336, 8, 2, seed=4)
    out = torch.empty(4, 4096, dtype=torch.bfloat16, device="cuda")
    fm.fused_experts(x, w1, w2, wts, ids, config=cfg, deterministic=False, out=out)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fm.fused_experts(x, w1, w2, wts, ids, config=cfg, deterministic=False, out=out)
    x2, _, _, wts2, ids2 = inputs(4, 4096, 14336, 8, 2, skew=2.0, seed=5)
    x.copy_(x2), wts.copy_(wts2), ids.copy_(ids2)
    out.fill_(float("nan"))
    for _ in range(2):  # twice: a replay must not add onto the previous one's accumulator
        graph.replay()
    torch.cuda.synchronize()
    moe_gpu.check(out, fm.reference(x, w1, w2, wts, ids), torch.bfloat16)


@pytest.mark.skipif(not HOPPER, reason="swap-AB runs on wgmma: needs an sm_90a (Hopper) GPU")
@pytest.mark.parametrize("t", [1, 8, 33])
@pytest.mark.parametrize("cfg", SWAPS, ids=MoeConfig.label)
def test_split_swap_ab(cfg: MoeConfig, t: int) -> None:
    for h, i in ((1024, 3584), (512, 3592)):
        x, w1, w2, wts, ids = inputs(t, h, i, 8, 2, torch.float16, seed=t)
        out = torch.full((t, h), float("nan"), dtype=torch.float16, device="cuda")
        fm.fused_experts(x, w1, w2, wts, ids, config=cfg, deterministic=False, out=out)
        moe_gpu.check(out, fm.reference(x, w1, w2, wts, ids), torch.float16)


@pytest.mark.parametrize("t", [1, 8])
@pytest.mark.parametrize("cfg", CONFIGS[1:3], ids=MoeConfig.label)
def test_deterministic_split_mixtral_size_repeats_bitwise(cfg: MoeConfig, t: int) -> None:
    """The deterministic split form (f32 rows per slot and slice, summed in order) at Mixtral's H and I:
    the reference, every element of a NaN-filled output, and the same bits on a second call."""
    x, w1, w2, wts, ids = inputs(t, 4096, 14336, 8, 2, seed=t + 5)
    outs = []
    for _ in range(2):
        out = torch.full((t, 4096), float("nan"), dtype=torch.bfloat16, device="cuda")
        outs.append(fm.fused_experts(x, w1, w2, wts, ids, config=cfg, out=out))
    moe_gpu.check(outs[0], fm.reference(x, w1, w2, wts, ids), torch.bfloat16)
    assert torch.equal(outs[0], outs[1])
