"""Ports of Wave's ``tests/kernel/e2e/test_conv.py`` (docs/wave_ports.md): an im2col of an NCHW image
by a read map, and 2-D convolutions as implicit GEMMs (the im2col map on the MMA's A operand, NCHW/FCHW
and NHWC/HWCF layouts, strides 1 and 2) against torch's unfold / conv2d in float64, every element
checked."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import wave_port_kernels as pk
from tests.wave_port_kernels import HF, HOWO, NB, ST, WF, WO, C, H, W
from wavec import Memory
from wavec.kernels import elementwise as ew


def test_im2col() -> None:
    @wc.wave(ew.rowwise_constraints(32, 1))
    def im2col(a: Memory[NB, C, H, W, wc.f16], b: Memory[ew.M, ew.N, wc.f16]):
        wc.write(wc.read(a, mapping=pk.window(wc.index(ew.M), wc.index(ew.N), True)), b)

    n, c, h, w, hf, wf = 2, 3, 9, 8, 2, 3
    ho, wo = h - hf + 1, w - wf + 1
    a = torch.randn(n, c, h, w, generator=torch.Generator().manual_seed(1)).half()
    b = torch.full((n * ho * wo, c * hf * wf), float("nan"), dtype=torch.float16)
    subs = {ew.BLOCK_M: 4, ew.BLOCK_N: 32, HF: hf, WF: wf, WO: wo, HOWO: ho * wo, ST: 1}
    wc.compile(im2col, subs, backend="emulator", cache=False)(a, b)
    want = torch.nn.functional.unfold(a.float(), (hf, wf)).transpose(1, 2).reshape(n * ho * wo, -1).half()
    assert torch.equal(b, want)


@pytest.mark.parametrize("layout,stride", [("nchw_fchw", 1), ("nhwc_hwcf", 1), ("nhwc_hwcf", 2)])
def test_igemm_conv_and_im2col_mma(layout: str, stride: int) -> None:
    """Wave's test_im2col_mma (im2col feeding an MMA) and test_igemm_conv (both layouts)."""
    x, wt, out, subs, ref = pk.igemm_problem(layout, stride, torch.Generator().manual_seed(stride))
    wc.compile(pk.make_igemm(layout == "nchw_fchw"), subs, backend="emulator", cache=False)(x, wt, out)
    torch.testing.assert_close(out.double(), ref, rtol=2e-3, atol=2e-3)
