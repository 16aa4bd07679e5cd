"""GPU tier for the warp-specialized TMA GEMM (``SchedulingConstraint(warp_specialize=True)``, sm_90a): a
producer warpgroup issues the TMA fills, the consumer warpgroups multiply; numerics against torch in
float64 on fresh random inputs with NaN-prefilled outputs (every output written), f16 and bf16, 3 and 4
stages, masked M/N/K edges; bit-for-bit equal to the non-warp-specialized TMA kernel of the same tile (same
wgmmas in the same order); ``matmul(warp_specialize=True)``.
Needs a CUDA device of compute capability 9.0 (H100/H200); skipped elsewhere."""

import pytest
import torch

import wavec as wc
from wavec.kernels import gemm as gm

pytestmark = pytest.mark.gpu
TORCH_DT = {"f16": torch.float16, "bf16": torch.bfloat16}


def _sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


needs_sm90 = pytest.mark.skipif(not _sm90(), reason="warp specialization needs an sm_90 device (H100/H200)")


def _subs(bm: int, bn: int, bk: int, stages: int) -> dict:
    return {gm.BLOCK_M: bm, gm.BLOCK_N: bn, gm.BLOCK_K: bk, gm.NUM_STAGES: stages, gm.GROUP_M: 8}


CONFIGS = [
    ("256x128x64-s4", _subs(256, 128, 64, 4), (2, 1)),
    ("256x128x64-s3", _subs(256, 128, 64, 3), (2, 1)),
    ("64x256x64-s4", _subs(64, 256, 64, 4), (1, 1)),
    ("128x128x64-s4", _subs(128, 128, 64, 4), (2, 1)),
    ("64x128x64-s2", _subs(64, 128, 64, 2), (1, 1)),
]
SHAPES = [(256, 256, 256), (1024, 1024, 1024), (4096, 4096, 4096), (3072, 384, 512), (8192, 8192, 1024)]
MASKED = [(1, 4096, 4096), (3, 256, 520), (100, 200, 72), (4097, 1000, 264), (130, 136, 40)]


def _compile(dt: str, cfg, ws: bool):
    _name, subs, waves = cfg
    return wc.compile(gm.make_gemm(getattr(wc, dt), 32, gm.WGMMA_FOR_DTYPE[dt], waves, async_copy="tma-mbarrier",
                                   warp_specialize=ws), subs, backend="cuda", target="sm_90a")


def _inputs(m: int, n: int, k: int, dt: str):
    return (torch.randn(m, k, device="cuda").to(TORCH_DT[dt]), torch.randn(n, k, device="cuda").to(TORCH_DT[dt]))


def _run(kernel, a, b) -> torch.Tensor:
    c = torch.full((a.shape[0], b.shape[0]), float("nan"), device="cuda")
    kernel(a, b, c)
    torch.cuda.synchronize()
    return c


@needs_sm90
@pytest.mark.parametrize("cfg", CONFIGS, ids=[c[0] for c in CONFIGS])
@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_ws_matches_torch_and_the_tma_kernel(dt: str, cfg) -> None:
    ws, base = _compile(dt, cfg, True), _compile(dt, cfg, False)
    assert ws.metadata.block[0] == base.metadata.block[0] + 128
    for m, n, k in SHAPES + MASKED:
        a, b = _inputs(m, n, k, dt)
        c = _run(ws, a, b)
        assert not c.isnan().any(), f"M={m} N={n} K={k}: {int(c.isnan().sum())} outputs never written"
        ref = a.double() @ b.double().T
        err = ((c.double() - ref).norm() / ref.norm()).item()
        assert err < 1e-5, f"M={m} N={n} K={k} {dt}: relative error {err:.2e}"
        assert torch.equal(c, _run(base, a, b)), f"M={m} N={n} K={k}: WS differs from the TMA kernel"


@needs_sm90
def test_matmul_warp_specialize() -> None:
    a, b = _inputs(2048, 2048, 2048, "bf16")
    c = gm.matmul(a, b, mma="wgmma", warp_specialize=True)
    assert torch.equal(c, gm.matmul(a, b, mma="wgmma", async_copy="tma-mbarrier"))
