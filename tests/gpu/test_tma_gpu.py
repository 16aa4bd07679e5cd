"""GPU tier for the TMA pipeline of the Hopper GEMM (``cp.async.bulk.tensor`` + mbarriers, sm_90a): numerics
against torch in float64 on fresh random inputs, every output written, f16 and bf16, several stages, one
and two boxes per tile, masked M/N/K edges (zero-filled out-of-bounds boxes); TMA against the cp.async
baseline of the same tile; stage reuse through empty mbarriers and through the workgroup barrier; tensor maps
cached per tensors; tensors TMA cannot describe are rejected.
Needs a CUDA device of compute capability 9.0 (H100/H200); skipped elsewhere."""

import pytest
import torch

import wavec as wc
from wavec.kernels import gemm as gm
from wavec.tuning.plan import WGMMA_FOR_DTYPE, schedule

pytestmark = pytest.mark.gpu
TORCH_DT = {"f16": torch.float16, "bf16": torch.bfloat16}


def _sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


needs_sm90 = pytest.mark.skipif(not _sm90(), reason="TMA and wgmma need an sm_90 device (H100/H200)")


def _subs(bm: int, bn: int, bk: int, stages: int) -> dict:
    return {gm.BLOCK_M: bm, gm.BLOCK_N: bn, gm.BLOCK_K: bk, gm.NUM_STAGES: stages, gm.GROUP_M: 8}


# (id, subs, warpgroups): the benchmark tile at 4 and 3 stages, 128x128, a 2-stage one-warpgroup tile
# (wgmma_wait 0 every iteration) and BLOCK_K = 128 (two 64-element boxes per tile and stage)
CONFIGS = [
    ("128x256x64-s4", _subs(128, 256, 64, 4), (2, 1)),
    ("128x256x64-s3", _subs(128, 256, 64, 3), (2, 1)),
    ("128x128x64-s4", _subs(128, 128, 64, 4), (2, 1)),
    ("64x128x64-s2", _subs(64, 128, 64, 2), (1, 1)),
    ("128x128x128-s3", _subs(128, 128, 128, 3), (2, 1)),
]
SHAPES = [(256, 256, 256), (1024, 1024, 1024), (4096, 4096, 4096), (128, 512, 1024), (3072, 384, 512)]
MASKED = [(1, 4096, 4096), (3, 256, 520), (100, 200, 72), (4097, 1000, 264), (1000, 1000, 1000), (130, 136, 40)]


def _compile(dt: str, cfg, async_copy: str = "tma-mbarrier"):
    _name, subs, waves = cfg
    return wc.compile(
        gm.make_gemm(
            getattr(wc, dt),
            32,
            WGMMA_FOR_DTYPE[dt],
            waves,
            sched=schedule(prefetch_fragments=True, async_copy=async_copy),
        ),
        subs,
        backend="cuda",
        target="sm_90a",
    )


def _run(kernel, m: int, n: int, k: int, dt: str) -> torch.Tensor:
    a = torch.randn(m, k, device="cuda").to(TORCH_DT[dt])
    b = torch.randn(n, k, device="cuda").to(TORCH_DT[dt])
    c = torch.full((m, n), float("nan"), device="cuda")
    kernel(a, b, c)
    torch.cuda.synchronize()
    assert not c.isnan().any(), f"M={m} N={n} K={k}: {int(c.isnan().sum())} of {c.numel()} outputs never written"
    ref = a.double() @ b.double().T
    err = ((c.double() - ref).norm() / ref.norm()).item()
    assert err < 1e-5, f"M={m} N={n} K={k} {dt}: relative error {err:.2e}"
    return c


@needs_sm90
@pytest.mark.parametrize("cfg", CONFIGS, ids=[c[0] for c in CONFIGS])
@pytest.mark.parametrize("war", ["tma-mbarrier", "tma-barrier"])  # stage reuse: empty mbarriers / workgroup barrier
@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_tma_gemm(dt: str, war: str, cfg) -> None:
    kernel = _compile(dt, cfg, war)
    assert kernel.metadata.tensor_maps and kernel.metadata.spills == 0
    for m, n, k in SHAPES + MASKED:
        _run(kernel, m, n, k, dt)


@needs_sm90
def test_tma_matches_cp_async_and_caches_maps() -> None:
    """Same tile, same inputs: TMA and cp.async give the same sums (the same wgmma order); a second call
    on the same tensors reuses the encoded maps, other tensors get their own."""
    tma, cp = _compile("f16", CONFIGS[0]), _compile("f16", CONFIGS[0], "cp.async")
    assert not cp.metadata.tensor_maps
    a, b = torch.randn(512, 320, device="cuda").half(), torch.randn(384, 320, device="cuda").half()
    c1, c2 = torch.empty(512, 384, device="cuda"), torch.empty(512, 384, device="cuda")
    tma(a, b, c1)
    cp(a, b, c2)
    tma(a, b, c1)
    torch.cuda.synchronize()
    assert torch.equal(c1, c2)
    maps = tma._impl._maps
    assert len(maps._cache) == 1
    tma(a.clone(), b, c1)
    assert len(maps._cache) == 2


@needs_sm90
def test_tma_rejects_what_it_cannot_describe() -> None:
    kernel = _compile("f16", CONFIGS[2])
    c = torch.empty(128, 128, device="cuda")
    b = torch.randn(128, 64, device="cuda").half()
    with pytest.raises(wc.WavecError, match="multiple of 8"):  # K = 60: rows of 120 bytes
        kernel(torch.randn(128, 60, device="cuda").half(), torch.randn(128, 60, device="cuda").half(), c)
    # a view 2 bytes into its storage: TMA cannot read it, so the launch takes the variant that reads
    # that argument without TMA (issue 20's any-stride rule), and the result is still the product
    a = torch.randn(128 * 64 + 1, device="cuda").half()[1:].view(128, 64)
    c.fill_(float("nan"))
    kernel(a, b, c)
    torch.cuda.synchronize()
    torch.testing.assert_close(c, a.float() @ b.float().T, rtol=2e-3, atol=2e-3)
