"""GPU tier for the warp-specialized TMA GEMM (``SchedulingConstraint(warp_specialize=True)``, sm_90a): a
producer warpgroup issues the TMA fills, the consumer warpgroups multiply; numerics against torch in
float64 on fresh random inputs with NaN-prefilled outputs (every output written), f16 and bf16, 3 and 4
stages, masked M/N/K edges; bit-for-bit equal to the non-warp-specialized TMA kernel of the same tile (same
wgmmas in the same order); ``matmul(warp_specialize=True)``.
Needs a CUDA device of compute capability 9.0 (H100/H200); skipped elsewhere."""

import pytest
import torch
from hopper_gemm import check_matches_torch_and, inputs, subs
from hopper_gemm import needs_sm90 as needs_sm90_for

import wavec as wc
from wavec.kernels import gemm as gm
from wavec.tuning.plan import WGMMA_FOR_DTYPE, schedule

pytestmark = pytest.mark.gpu

needs_sm90 = needs_sm90_for("warp specialization")


CONFIGS = [
    ("128x256x64-s4", subs(128, 256, 64, 4), (2, 1)),
    ("128x256x64-s3", subs(128, 256, 64, 3), (2, 1)),
    ("128x192x64-s4", subs(128, 192, 64, 4), (2, 1)),
    ("256x128x64-s4", subs(256, 128, 64, 4), (2, 1)),
    ("256x128x64-s3", subs(256, 128, 64, 3), (2, 1)),
    ("64x256x64-s4", subs(64, 256, 64, 4), (1, 1)),
    ("128x128x64-s4", subs(128, 128, 64, 4), (2, 1)),
    ("64x128x64-s2", subs(64, 128, 64, 2), (1, 1)),
]


def _compile(dt: str, cfg, ws: bool):
    _name, tile, waves = cfg
    return wc.compile(
        gm.make_gemm(
            getattr(wc, dt),
            32,
            WGMMA_FOR_DTYPE[dt],
            waves,
            sched=schedule(prefetch_fragments=True, async_copy="tma-mbarrier", warp_specialize=ws),
        ),
        tile,
        backend="cuda",
        target="sm_90a",
    )


@needs_sm90
@pytest.mark.parametrize("cfg", CONFIGS, ids=[c[0] for c in CONFIGS])
@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_ws_matches_torch_and_the_tma_kernel(dt: str, cfg) -> None:
    ws, base = _compile(dt, cfg, True), _compile(dt, cfg, False)
    assert ws.metadata.block[0] == base.metadata.block[0] + 128
    check_matches_torch_and(ws, base, dt, "WS differs from the TMA kernel")


@needs_sm90
def test_matmul_warp_specialize() -> None:
    a, b = inputs(2048, 2048, 2048, "bf16")
    c = gm.matmul(a, b, mma="wgmma", warp_specialize=True)
    assert torch.equal(c, gm.matmul(a, b, mma="wgmma", async_copy="tma-mbarrier"))
