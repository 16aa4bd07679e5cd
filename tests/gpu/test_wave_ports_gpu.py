"""GPU tier of the Wave e2e ports (docs/wave_ports.md): the kernels that exposed the batch-dimension
bugs (``wc.broadcast`` and ``Register`` over batch dims), a run scatter and the implicit-GEMM conv2d, on
the device against torch in higher precision, fresh random inputs, NaN- or sentinel-filled outputs."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import wave_port_kernels as pk
from wavec.kernels import elementwise as ew

pytestmark = pytest.mark.gpu


def test_self_index_gpu() -> None:
    a = torch.randint(0, 3, (5, 6, 128), dtype=torch.int32, device="cuda")
    out = torch.full_like(a, -77)
    wc.compile(pk.make_self_index(), {ew.N: 128}, backend="cuda")(a, out)
    torch.cuda.synchronize()
    assert torch.equal(out, pk.reference_self_index(a))


@pytest.mark.parametrize("rows", [1, 2])
def test_toy_online_softmax_gpu(rows: int) -> None:
    a, b = torch.randn(37, 1000, device="cuda"), torch.randn(37, 1000, device="cuda")
    c = torch.full((37,), float("nan"), device="cuda")
    wc.compile(pk.make_toy_online_softmax(rows), {pk.TILE_N: 64}, backend="cuda")(a, b, c)
    torch.cuda.synchronize()
    torch.testing.assert_close(c.double(), pk.reference_toy_online_softmax(a, b), rtol=1e-4, atol=1e-6)


def test_offset_write_one_gpu() -> None:
    a, off = pk.offset_write_one_inputs((111, 816), torch.Generator().manual_seed(1))
    a, off = a.cuda(), off.cuda()
    b = torch.full_like(a, float("nan"))
    wc.compile(pk.make_offset_write_one(), {ew.BLOCK_M: 4, ew.BLOCK_N: 32}, backend="cuda")(a, off, b)
    torch.cuda.synchronize()
    assert torch.equal(b, pk.reference_offset_write_one(a, off))


@pytest.mark.parametrize("layout,stride", [("nchw_fchw", 1), ("nhwc_hwcf", 1), ("nhwc_hwcf", 2)])
def test_igemm_conv_gpu(layout: str, stride: int) -> None:
    x, wt, out, subs, ref = pk.igemm_problem(layout, stride, torch.Generator().manual_seed(stride), "cuda")
    wc.compile(pk.make_igemm(layout == "nchw_fchw"), subs, backend="cuda")(x, wt, out)
    torch.cuda.synchronize()
    assert not out.isnan().any(), "outputs never written"
    torch.testing.assert_close(out.double(), ref, rtol=2e-3, atol=2e-3)
