"""GPU tier for the persistent grid of the Hopper TMA GEMM (``SchedulingConstraint(persistent=True)``,
sm_90a): min(tiles, SMs x workgroups per SM) workgroups loop over the output tiles, mbarrier phases
continuing across tiles; numerics against torch in float64 on fresh random inputs with NaN-prefilled
outputs (every output written), f16 and bf16, 2-4 stages, both stage releases and warp specialization,
masked M/N/K edges;
bit-for-bit equal to the non-persistent kernel of the same tile (same wgmmas in the same order);
``matmul(persistent=True)``.  Needs a CUDA device of compute capability 9.0 (H100/H200); skipped elsewhere."""

import pytest
import torch
from hopper_gemm import check_matches_torch_and, inputs, subs
from hopper_gemm import needs_sm90 as needs_sm90_for

import wavec as wc
from wavec.kernels import gemm as gm
from wavec.tuning.plan import WGMMA_FOR_DTYPE, schedule

pytestmark = pytest.mark.gpu

needs_sm90 = needs_sm90_for("the persistent TMA GEMM")


def _subs(bm: int, bn: int, stages: int) -> dict:
    return subs(bm, bn, 64, stages)


CONFIGS = [  # (id, subs, waves, async copy)
    ("128x256x64-s4-barrier", _subs(128, 256, 4), (2, 1), "tma-barrier"),
    ("128x256x64-s4-mbarrier", _subs(128, 256, 4), (2, 1), "tma-mbarrier"),
    ("128x256x64-s3-mbarrier", _subs(128, 256, 3), (2, 1), "tma-mbarrier"),
    ("128x128x64-s4-barrier", _subs(128, 128, 4), (2, 1), "tma-barrier"),
    ("128x160x64-s4-barrier", _subs(128, 160, 4), (2, 1), "tma-barrier"),  # wgmma_plan's N = 1280 tile
    ("128x128x64-s4-ws", _subs(128, 128, 4), (2, 1), "ws"),  # wgmma_plan's mid-size tile
    ("64x128x64-s2-mbarrier", _subs(64, 128, 2), (1, 1), "tma-mbarrier"),
    ("256x128x64-s4-ws", _subs(256, 128, 4), (2, 1), "ws"),  # warp-specialized: against the plain WS kernel
    ("64x256x64-s4-ws", _subs(64, 256, 4), (1, 1), "ws"),
]
# 4096^2 with 128x256 tiles: 512 tiles over 132 workgroups (H100 SXM) = 3-4 tiles each


def _compile(dt: str, cfg, persistent: bool):
    _name, tile, waves, copy = cfg
    ws = copy == "ws"
    return wc.compile(
        gm.make_gemm(
            getattr(wc, dt),
            32,
            WGMMA_FOR_DTYPE[dt],
            waves,
            sched=schedule(
                prefetch_fragments=True,
                async_copy="tma-mbarrier" if ws else copy,
                warp_specialize=ws,
                persistent=persistent,
            ),
        ),
        tile,
        backend="cuda",
        target="sm_90a",
    )


@needs_sm90
@pytest.mark.parametrize("cfg", CONFIGS, ids=[c[0] for c in CONFIGS])
@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_persistent_matches_torch_and_the_plain_kernel(dt: str, cfg) -> None:
    pers, base = _compile(dt, cfg, True), _compile(dt, cfg, False)
    assert "WAVEC_SMS" in pers.metadata.grid[0]
    check_matches_torch_and(pers, base, dt, "persistent differs from the plain kernel")


@needs_sm90
def test_matmul_persistent() -> None:
    a, b = inputs(2048, 2048, 2048, "bf16")
    c = gm.matmul(a, b, mma="wgmma", persistent=True)
    assert torch.equal(c, gm.matmul(a, b, mma="wgmma"))
