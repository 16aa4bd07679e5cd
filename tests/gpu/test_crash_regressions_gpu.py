"""GPU tier, issue #20 item 7: the three kernels that crashed the compiler, against torch in float64 on a
CUDA device (mma.sync, the sm_80 kernels).  Outputs start as NaN so every element must be written."""

import pytest
import torch

import wavec as wc
from tests import crash_kernels as ck

pytestmark = pytest.mark.gpu


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    assert not out.isnan().any(), "outputs never written"
    return ((out.double() - ref.double()).norm() / ref.double().norm()).item()


@pytest.mark.parametrize("m,n", [(100, 5), (4097, 33)])
def test_innermost_batch_dim_gpu(m: int, n: int) -> None:
    kernel = wc.compile(ck.make_batch_last("sm_80"), {ck.BM: 128}, backend="cuda")
    x, scale = torch.randn(m, n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.full((m, n), float("nan"), device="cuda")
    kernel(x, scale, out)
    torch.cuda.synchronize()
    assert _rel(out, ck.reference_batch_last(x, scale)) < 1e-7


def test_alibi_attention_gpu() -> None:
    kernel = wc.compile(ck.make_alibi_attention("sm_80"), ck.ALIBI_SUBS, backend="cuda")
    b, h, sq, sk = 2, 4, 200, 256
    q, k, v = (torch.randn(b, h, s, 64, device="cuda").half() for s in (sq, sk, sk))
    slope = torch.rand(h, device="cuda") * 0.1 + 0.01
    o = torch.full_like(q, float("nan"))
    kernel(q, k, v, slope, o, 0.125)
    torch.cuda.synchronize()
    assert _rel(o, ck.reference_alibi(q.cpu(), k.cpu(), v.cpu(), slope.cpu(), 0.125).cuda()) < 2e-3


def test_dv_product_gpu() -> None:
    kernel = wc.compile(ck.make_dv("sm_80"), ck.DV_SUBS, backend="cuda")
    m, k2 = 512, 256
    q, k = (torch.randn(r, 64, device="cuda").half() * 0.2 for r in (m, k2))
    do = torch.randn(m, 64, device="cuda").half()
    dv = torch.full((k2, 64), float("nan"), device="cuda")
    kernel(q, k, do, dv)
    torch.cuda.synchronize()
    assert _rel(dv, ck.reference_dv(q.cpu(), k.cpu(), do.cpu()).cuda()) < 1e-3
