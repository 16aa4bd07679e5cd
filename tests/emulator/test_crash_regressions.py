"""Issue #20 item 7: the three kernels that crashed the compiler compile and compute what torch does on the
emulator, for an NVIDIA (32-lane, mma.sync) and an AMD (64-lane, MFMA) target.  Outputs start as NaN so
every element must be written."""

import pytest
import torch

import wavec as wc
from tests import crash_kernels as ck

TARGETS = ["sm_80", "gfx942"]


def _rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    assert not out.isnan().any(), "outputs never written"
    return ((out.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("m,n", [(100, 5), (64, 3)])
def test_innermost_batch_dim(target: str, m: int, n: int) -> None:
    """N innermost and a batch dim (one column per workgroup); M and N dynamic, M masked at 100 (128-row tiles)."""
    kernel = wc.compile(ck.make_batch_last(target), {ck.BM: 128}, target=target, backend="emulator", cache=False)
    x, scale = torch.randn(m, n), torch.randn(n)
    out = torch.full((m, n), float("nan"))
    kernel(x, scale, out)
    assert _rel(out, ck.reference_batch_last(x, scale)) < 1e-7


@pytest.mark.parametrize("target", TARGETS)
def test_alibi_slope_read_inside_attention(target: str) -> None:
    """``Memory[H, f32]`` (batch dims only) read in the loop body: one value per head, broadcast."""
    kernel = wc.compile(ck.make_alibi_attention(target), ck.ALIBI_SUBS, target=target, backend="emulator", cache=False)
    b, h, sq, sk = 1, 2, 40, 64
    q, k, v = (torch.randn(b, h, s, 64).half() for s in (sq, sk, sk))
    # fresh slopes at least 0.7 apart (torch.rand(h) + 0.25 once drew 0.868 and 0.869): a per-head mix-up shows
    slope = torch.tensor([0.25, 1.25]) + 0.3 * torch.rand(h)
    o = torch.full_like(q, float("nan"))
    kernel(q, k, v, slope, o, 0.125)
    ref = ck.reference_alibi(q, k, v, slope, 0.125)
    assert _rel(o, ref) < 2e-3  # f16 P and output
    assert _rel(o, ck.reference_alibi(q, k, v, slope.flip(0), 0.125)) > 1e-2  # the slopes matter


@pytest.mark.parametrize("target", TARGETS)
def test_dv_product_of_transposed_accumulator(target: str) -> None:
    """``mma(permute(P, (K2, M)), permute(dO, (N, M)), acc)``: sm_80 used to pick a register conversion."""
    kernel = wc.compile(ck.make_dv(target), ck.DV_SUBS, target=target, backend="emulator", cache=False)
    m, k2 = 96, 128
    q, k, do = torch.randn(m, 64).half() * 0.2, torch.randn(k2, 64).half() * 0.2, torch.randn(m, 64).half()
    dv = torch.full((k2, 64), float("nan"))
    kernel(q, k, do, dv)
    # P rounds to f16 on both sides but mma and torch sum q·k in different orders: one-ulp P differences
    assert _rel(dv, ck.reference_dv(q, k, do)) < 1e-3
