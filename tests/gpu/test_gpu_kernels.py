"""GPU tier: the example kernels against torch on fresh random inputs, on a real CUDA device."""

import pytest
import torch

import wavec as wc
from wavec.kernels.elementwise import DEFAULT_SUBS as EW_SUBS
from wavec.kernels.elementwise import make_copy, make_scale_shift
from wavec.kernels.gemm import make_gemm
from wavec.tuning.plan import DEFAULT_SUBS, schedule

pytestmark = pytest.mark.gpu
TORCH_DT = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


def _poison(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


def _rel_err(out, ref) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16, wc.f32])
@pytest.mark.parametrize("shape", [(4, 512), (64, 4096), (12, 1536)])
def test_copy(dtype, shape):
    k = wc.compile(make_copy(dtype), EW_SUBS, backend="cuda")
    src = torch.randn(shape, device="cuda").to(TORCH_DT[dtype.name])
    dst = _poison(shape, src.dtype)
    k(src, dst)
    torch.cuda.synchronize()
    assert torch.equal(dst, src)


@pytest.mark.parametrize("dtype", [wc.f16, wc.f32])
@pytest.mark.parametrize("shape", [(8, 1024), (256, 2048)])
def test_scale_shift(dtype, shape):
    k = wc.compile(make_scale_shift(dtype), EW_SUBS, backend="cuda")
    tdt = TORCH_DT[dtype.name]
    a, b = (torch.randn(shape, device="cuda").to(tdt) for _ in range(2))
    bias = torch.randn(shape[1], device="cuda").to(tdt)
    out = _poison(shape, tdt)
    k(a, b, bias, out)
    torch.cuda.synchronize()
    ref = (a.double() * b.double()).to(tdt).double() + bias.double()[None, :]
    assert not out.isnan().any()
    tol = 2e-3 if dtype == wc.f16 else 1e-6
    assert _rel_err(out, ref) < tol


GEMM_SHAPES = [
    (256, 256, 256),
    (512, 512, 512),
    (1024, 1024, 1024),
    (2048, 2048, 2048),
    (4096, 4096, 4096),
    (128, 512, 1024),
    (1024, 256, 64),
    (64, 4096, 4096),
    (3072, 128, 512),
]


@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16])
@pytest.mark.parametrize("mnk", GEMM_SHAPES)
def test_gemm(dtype, mnk):
    mma = wc.MMAType.NV_F32_16x8x16_F16 if dtype == wc.f16 else wc.MMAType.NV_F32_16x8x16_BF16
    k = wc.compile(make_gemm(dtype, mma_type=mma), DEFAULT_SUBS, backend="cuda")
    m, n, kk = mnk
    tdt = TORCH_DT[dtype.name]
    a = torch.randn(m, kk, device="cuda").to(tdt)
    b = torch.randn(n, kk, device="cuda").to(tdt)
    c = _poison((m, n), torch.float32)
    k(a, b, c)
    torch.cuda.synchronize()
    ref = a.double() @ b.double().T
    assert not c.isnan().any(), "some output elements were never written"
    assert _rel_err(c, ref) < 1e-5


@pytest.mark.parametrize("mnk", [(1, 4096, 4096), (3, 256, 520), (16, 12288, 512), (100, 200, 72), (4097, 1000, 264)])
def test_gemm_masked_shapes(mnk):
    """Shapes the tiles do not divide are masked, never computed from the wrong addresses."""
    k = wc.compile(make_gemm(), DEFAULT_SUBS, backend="cuda")
    m, n, kk = mnk
    a = torch.randn(m, kk, device="cuda", dtype=torch.float16)
    b = torch.randn(n, kk, device="cuda", dtype=torch.float16)
    c = _poison((m, n), torch.float32)
    k(a, b, c)
    torch.cuda.synchronize()
    assert not c.isnan().any()
    assert _rel_err(c, a.double() @ b.double().T) < 1e-5


def test_gemm_one_binary_many_m():
    """Dynamic M: one compiled GEMM serves several M values without recompiling."""
    k = wc.compile(make_gemm(), DEFAULT_SUBS, backend="cuda")
    binary = k.artifact.binary
    for m in (1, 3, 16, 64, 128, 640, 4096):
        a = torch.randn(m, 512, device="cuda", dtype=torch.float16)
        b = torch.randn(256, 512, device="cuda", dtype=torch.float16)
        c = _poison((m, 256), torch.float32)
        k(a, b, c)
        torch.cuda.synchronize()
        assert _rel_err(c, a.double() @ b.double().T) < 1e-5
    assert k.artifact.binary is binary
    again = wc.compile(make_gemm(), DEFAULT_SUBS, backend="cuda")
    assert again.stats.cached


def test_bad_inputs_rejected_on_gpu():
    k = wc.compile(make_gemm(), DEFAULT_SUBS, backend="cuda")
    a = torch.randn(128, 64, device="cuda", dtype=torch.float16)
    b = torch.randn(128, 64, device="cuda", dtype=torch.float16)
    c = torch.empty(128, 128, device="cuda")
    with pytest.raises(wc.WavecError, match="'a'"):
        k(a.float(), b, c)
    with pytest.raises(wc.WavecError, match="'a'"):
        k(a.cpu(), b, c)
    at = torch.randn(64, 128, device="cuda", dtype=torch.float16).T  # transposed: the strided variant runs it
    k(at, b, c)
    torch.cuda.synchronize()
    assert _rel_err(c, at.double() @ b.double().T) < 1e-5
    with pytest.raises(wc.WavecError, match="'c'.*zero"):
        k(a, b, torch.empty(1, 128, device="cuda").expand(128, 128))
    with pytest.raises(wc.WavecError, match="'c'"):
        k(a, b, torch.empty(128, 64, device="cuda"))


PREFETCH_TILES = [((256, 128, 64, 3), (4, 2)), ((128, 128, 32, 4), (2, 2)), ((64, 128, 16, 2), (2, 2))]


@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16])
@pytest.mark.parametrize("tile", PREFETCH_TILES, ids=["x".join(map(str, t[0])) for t in PREFETCH_TILES])
def test_gemm_prefetch_fragments(dtype, tile):
    """mma.sync with the next iteration's first fragments read during the last K step: ragged M, N, K
    (one K tile, fewer tiles than stages, a partial last tile) and a large square."""
    from wavec.kernels import gemm as gm

    (bm, bn, bk, st), waves = tile
    mma = wc.MMAType.NV_F32_16x8x16_F16 if dtype == wc.f16 else wc.MMAType.NV_F32_16x8x16_BF16
    subs = {gm.BLOCK_M: bm, gm.BLOCK_N: bn, gm.BLOCK_K: bk, gm.NUM_STAGES: st, gm.GROUP_M: 8}
    k = wc.compile(
        make_gemm(dtype, mma_type=mma, waves=waves, sched=schedule(prefetch_fragments=True)), subs, backend="cuda"
    )
    assert k.metadata.spills == 0
    tdt = TORCH_DT[dtype.name]
    for m, n, kk in [(300, 200, 8), (130, 520, 40), (1000, 700, 328), (2048, 2048, 2048)]:
        a = torch.randn(m, kk, device="cuda").to(tdt)
        b = torch.randn(n, kk, device="cuda").to(tdt)
        c = _poison((m, n), torch.float32)
        k(a, b, c)
        torch.cuda.synchronize()
        assert not c.isnan().any(), "some output elements were never written"
        assert _rel_err(c, a.double() @ b.double().T) < 1e-5, (m, n, kk)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_matmul_c_in_input_dtype(dtype):
    """C in f16 / bf16 (``widen_stores``: 16-byte stores when N % 8 == 0, the narrow ones otherwise):
    the heuristic's tiles on ragged and aligned shapes, every element written, against float64."""
    from wavec.kernels.gemm import matmul

    for m, n, kk in [
        (300, 200, 64),
        (130, 522, 40),
        (1000, 4096, 328),
        (4096, 4096, 4096),
        (17, 258, 512),
        (2048, 1000, 1024),
    ]:
        a = torch.randn(m, kk, device="cuda", dtype=dtype)
        b = torch.randn(n, kk, device="cuda", dtype=dtype)
        c = matmul(a, b, out_dtype=dtype)
        torch.cuda.synchronize()
        assert c.dtype == dtype and not c.isnan().any()
        ref = a.double() @ b.double().T
        tol = 2e-3 if dtype == torch.float16 else 1.6e-2
        err = float((c.double() - ref).abs().max() / ref.abs().max())
        assert err < tol, (m, n, kk, err)


def test_matmul_defaults_follow_torch() -> None:
    """``matmul(a, b)``: C in a's dtype (as ``torch.matmul``) on the device's best path (wgmma on sm_90)."""
    from wavec.kernels import gemm as gm

    a, b = torch.randn(300, 256, device="cuda").half(), torch.randn(200, 256, device="cuda").half()
    c = gm.matmul(a, b)
    assert c.dtype == torch.float16
    ref = a.double() @ b.double().T
    assert ((c.double() - ref).norm() / ref.norm()).item() < 2e-3
    want = "wgmma" if torch.cuda.get_device_capability() == (9, 0) else "mma_sync"
    assert gm.auto_mma(a, None, gm.GemmRequest(mma="auto")) == want
