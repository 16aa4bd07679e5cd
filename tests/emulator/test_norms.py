"""RMSNorm and LayerNorm on the emulator (NVIDIA and AMD waves) against torch in float64."""

import pytest
import torch
import torch.nn.functional as F

import wavec as wc
from wavec.kernels.norms import BLOCK_M, N, make_layernorm, make_rmsnorm

TORCH = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
TOL = {"f16": 2e-3, "bf16": 1e-2, "f32": 1e-6}


def _rel(out, ref) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16, wc.f32])
@pytest.mark.parametrize("target,tpw", [("sm_90", 32), ("gfx942", 64)])
@pytest.mark.parametrize("rows,n", [(9, 512), (1, 1024)])
def test_rmsnorm(dtype, target, tpw, rows, n) -> None:
    k = wc.compile(
        make_rmsnorm(n, dtype, threads_per_wave=tpw), {BLOCK_M: 4, N: n}, target=target, backend="emulator", cache=False
    )
    t = TORCH[dtype.name]
    x, w = torch.randn(rows, n).to(t), torch.randn(n).to(t)
    out = torch.full_like(x, float("nan"))
    k(x, w, out)
    xd = x.double()
    ref = xd * torch.rsqrt((xd * xd).mean(-1, keepdim=True) + 1e-6) * w.double()
    assert not out.isnan().any() and _rel(out, ref) < TOL[dtype.name]


@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16, wc.f32])
@pytest.mark.parametrize("target,tpw", [("sm_90", 32), ("gfx942", 64)])
def test_layernorm(dtype, target, tpw) -> None:
    n = 512
    k = wc.compile(
        make_layernorm(n, dtype, threads_per_wave=tpw),
        {BLOCK_M: 4, N: n},
        target=target,
        backend="emulator",
        cache=False,
    )
    t = TORCH[dtype.name]
    x, w, b = (torch.randn(6, n) * 2 + 1).to(t), torch.randn(n).to(t), torch.randn(n).to(t)
    out = torch.full_like(x, float("nan"))
    k(x, w, b, out)
    ref = F.layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5)
    assert not out.isnan().any() and _rel(out, ref) < TOL[dtype.name]


@pytest.mark.parametrize("waves_per_row", [2, 4])
@pytest.mark.parametrize("target,tpw", [("sm_90", 32), ("gfx942", 64)])
def test_norms_with_several_waves_per_row(waves_per_row, target, tpw) -> None:
    """Rows split over waves: both statistics of LayerNorm meet in shared memory (race checker on)."""
    n = tpw * 8 * waves_per_row * 2  # two 16-byte runs per lane
    x, w, b = (torch.randn(5, n) * 2 + 1).half(), torch.randn(n).half(), torch.randn(n).half()
    for make, args, ref in (
        (make_rmsnorm, (w,), x.double() * torch.rsqrt((x.double() ** 2).mean(-1, keepdim=True) + 1e-6) * w.double()),
        (make_layernorm, (w, b), F.layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5)),
    ):
        k = wc.compile(
            make(n, wc.f16, threads_per_wave=tpw, waves_per_row=waves_per_row),
            {BLOCK_M: 2, N: n},
            target=target,
            backend="emulator",
            cache=False,
        )
        assert "#gpu.address_space<workgroup>" in k.mlir
        out = torch.full_like(x, float("nan"))
        k(x, *args, out)
        assert not out.isnan().any() and _rel(out, ref) < TOL["f16"], make.__name__
