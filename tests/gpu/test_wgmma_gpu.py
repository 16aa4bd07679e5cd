"""GPU tier for the Hopper GEMM (``wgmma``, sm_90a): numerics against torch in float64 on fresh random
inputs at real sizes, non-square and masked shapes, f16 and bf16, every output element written.  Needs a
CUDA device of compute capability 9.0 (H100/H200); skipped elsewhere."""

import pytest
import torch

import wavec as wc
from wavec.kernels import gemm as gm
from wavec.tuning.plan import WGMMA_FOR_DTYPE, schedule

pytestmark = pytest.mark.gpu
TORCH_DT = {"f16": torch.float16, "bf16": torch.bfloat16}


def _sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


needs_sm90 = pytest.mark.skipif(not _sm90(), reason="wgmma needs an sm_90 device (H100/H200)")


def _subs(bm: int, bn: int, bk: int, stages: int) -> dict:
    return {gm.BLOCK_M: bm, gm.BLOCK_N: bn, gm.BLOCK_K: bk, gm.NUM_STAGES: stages, gm.GROUP_M: 8}


# (id, subs, waves = warpgroups, operand_swizzle): the benchmark's two tiles with the 128-byte swizzle
# ("auto" at BLOCK_K = 64) and with core matrices, a small one-warpgroup core-matrix tile, and the
# 64-byte swizzle (BLOCK_K = 32)
CONFIGS = [
    ("128x128x64-s4-swz", _subs(128, 128, 64, 4), (2, 1), "auto"),
    ("128x256x64-s4-swz", _subs(128, 256, 64, 4), (2, 1), "auto"),
    ("128x256x64-s3-core", _subs(128, 256, 64, 3), (2, 1), "none"),
    ("128x128x64-s4-core", _subs(128, 128, 64, 4), (2, 1), "none"),
    ("64x64x32-s2-core", _subs(64, 64, 32, 2), (1, 1), "none"),  # 2 stages: wait_group 0 every iteration
    ("128x256x32-s4-swz64", _subs(128, 256, 32, 4), (2, 1), "auto"),  # 64-byte swizzle (descriptor bit 63)
]
SHAPES = [
    (256, 256, 256),
    (512, 512, 512),
    (1024, 1024, 1024),
    (2048, 2048, 2048),
    (4096, 4096, 4096),
    (128, 512, 1024),
    (1024, 256, 64),
    (64, 4096, 4096),
    (3072, 384, 512),
]
MASKED = [(1, 4096, 4096), (3, 256, 520), (100, 200, 72), (4097, 1000, 264), (1000, 1000, 1000)]


def _run(kernel, m: int, n: int, k: int, dt: str) -> None:
    a = torch.randn(m, k, device="cuda").to(TORCH_DT[dt])
    b = torch.randn(n, k, device="cuda").to(TORCH_DT[dt])
    c = torch.full((m, n), float("nan"), device="cuda")
    kernel(a, b, c)
    torch.cuda.synchronize()
    assert not c.isnan().any(), f"{int(c.isnan().sum())} of {c.numel()} outputs never written"
    ref = a.double() @ b.double().T
    err = ((c.double() - ref).norm() / ref.norm()).item()
    assert err < 1e-5, f"M={m} N={n} K={k} {dt}: relative error {err:.2e}"


def _compile(dt: str, cfg):
    _name, subs, waves, swizzle = cfg
    return wc.compile(
        gm.make_gemm(
            getattr(wc, dt),
            32,
            WGMMA_FOR_DTYPE[dt],
            waves,
            sched=schedule(prefetch_fragments=True, operand_swizzle=swizzle),
        ),
        subs,
        backend="cuda",
        target="sm_90a",
    )


@needs_sm90
@pytest.mark.parametrize("cfg", CONFIGS, ids=[c[0] for c in CONFIGS])
@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_wgmma_gemm(dt: str, cfg) -> None:
    kernel = _compile(dt, cfg)
    assert kernel.artifact.metadata.spills == 0
    for m, n, k in SHAPES:
        _run(kernel, m, n, k, dt)


@needs_sm90
@pytest.mark.parametrize("cfg", CONFIGS[:3], ids=[c[0] for c in CONFIGS[:3]])
@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_wgmma_gemm_masked(dt: str, cfg) -> None:
    kernel = _compile(dt, cfg)
    for m, n, k in MASKED:
        _run(kernel, m, n, k, dt)


@needs_sm90
@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_matmul_wgmma(dt: str) -> None:
    # wgmma_config's tiles: 128x256 (4096^3, 8192x8192), 128x128 (512x4096), 64x128 (1024^3), 64x64 (130x72)
    for m, n, k in [(4096, 4096, 4096), (8192, 8192, 1024), (512, 4096, 1024), (1024, 1024, 1024), (130, 72, 64)]:
        a = torch.randn(m, k, device="cuda").to(TORCH_DT[dt])
        b = torch.randn(n, k, device="cuda").to(TORCH_DT[dt])
        c = gm.matmul(a, b, mma="wgmma", out_dtype=torch.float32)
        ref = a.double() @ b.double().T
        assert ((c.double() - ref).norm() / ref.norm()).item() < 1e-5
