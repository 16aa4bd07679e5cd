"""GPU tier, issue #20 item 1: odd sizes against torch on a CUDA device — GEMM (dynamic sizes: the narrow
variants; static sizes), ``matmul``, copies and transposes of odd f32 rows.  Outputs poisoned with NaN must
be written in full; references in float64."""

import pytest
import torch

import wavec as wc
from wavec import Memory, f32
from wavec.kernels import elementwise as ew
from wavec.kernels import gemm as gm

pytestmark = pytest.mark.gpu
ODD_GEMM = [(33, 47, 29), (1, 5, 16), (7, 9, 13), (130, 257, 4095), (64, 50257, 64), (600, 520, 1001)]
M, N = wc.sym.M, wc.sym.N


def _check(out, ref, tol: float, what: str) -> None:
    assert not out.float().isnan().any(), f"{what}: outputs never written"
    err = ((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()
    assert err < tol, f"{what}: relative error {err:.3e}"


@pytest.mark.parametrize("stages", [1, 3])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_gemm_odd_sizes(dtype, stages: int) -> None:
    wdt = {torch.float16: wc.f16, torch.bfloat16: wc.bf16}[dtype]
    mma = {wc.f16: wc.MMAType.NV_F32_16x8x16_F16, wc.bf16: wc.MMAType.NV_F32_16x8x16_BF16}[wdt]
    subs = {gm.BLOCK_M: 64, gm.BLOCK_N: 64, gm.BLOCK_K: 32, gm.NUM_STAGES: stages, gm.GROUP_M: 4}
    kernel = wc.compile(gm.make_gemm(wdt, 32, mma, (2, 2)), subs, backend="cuda")
    for m, n, k in [(128, 128, 128), *ODD_GEMM]:
        a, b = torch.randn(m, k, device="cuda", dtype=dtype), torch.randn(n, k, device="cuda", dtype=dtype)
        c = torch.full((m, n), float("nan"), device="cuda")
        kernel(a, b, c)
        torch.cuda.synchronize()
        _check(c, a.double() @ b.double().T, 1e-5, f"gemm {dtype} stages{stages} {m}x{n}x{k}")
        static = wc.compile(gm.make_gemm(wdt, 32, mma, (2, 2)), {**subs, gm.M: m, gm.N: n, gm.K: k}, backend="cuda")
        c2 = torch.full((m, n), float("nan"), device="cuda")
        static(a, b, c2)
        torch.cuda.synchronize()
        _check(c2, a.double() @ b.double().T, 1e-5, f"static gemm {dtype} stages{stages} {m}x{n}x{k}")


@pytest.mark.parametrize("mma", ["mma_sync", "wgmma"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_matmul_odd_sizes(dtype, mma: str) -> None:
    if mma == "wgmma" and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("wgmma needs sm_90a")
    for m, n, k in ODD_GEMM:
        a, b = torch.randn(m, k, device="cuda", dtype=dtype), torch.randn(n, k, device="cuda", dtype=dtype)
        c = gm.matmul(a, b, mma=mma, out_dtype=torch.float32)
        torch.cuda.synchronize()
        _check(c, a.double() @ b.double().T, 1e-5, f"matmul {mma} {dtype} {m}x{n}x{k}")


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
def test_copy_odd_rows(dtype) -> None:
    kernel = wc.compile(ew.make_copy({torch.float16: wc.f16, torch.float32: wc.f32}[dtype]), ew.DEFAULT_SUBS)
    for m, n in [(33, 47), (5, 1), (3, 1001), (64, 50257)]:
        src = torch.randn(m, n, device="cuda").to(dtype)
        dst = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
        kernel(src, dst)
        torch.cuda.synchronize()
        assert torch.equal(src, dst), f"copy {dtype} [{m}, {n}]"


def test_transpose_f32_odd_shapes() -> None:
    cons = [
        wc.WorkgroupConstraint(M, 4, 0),
        wc.WorkgroupConstraint(N, 128, 1),
        wc.WaveConstraint(M, 1),
        wc.HardwareConstraint(threads_per_wave=32, vector_shapes={M: 1, N: 128}),
    ]

    @wc.wave(cons)
    def transpose(x: Memory[M, N, f32], y: Memory[N, M, f32]):
        wc.write(wc.permute(wc.read(x), (N, M)), y)

    kernel = wc.compile(transpose, {}, backend="cuda")
    for m, n in [(33, 47), (1, 5), (7, 130), (8, 128), (1000, 1001)]:
        x = torch.randn(m, n, device="cuda")
        y = torch.full((n, m), float("nan"), device="cuda")
        kernel(x, y)
        torch.cuda.synchronize()
        assert torch.equal(y, x.T), f"transpose [{m}, {n}]"
