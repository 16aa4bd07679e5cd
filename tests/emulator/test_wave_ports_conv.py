"""Ports of Wave's ``tests/kernel/e2e/test_conv.py`` (docs/wave_ports.md): an im2col of an NCHW image
by a read map, and 2-D convolutions as implicit GEMMs (the im2col map on the MMA's A operand, NCHW/FCHW
and NHWC/HWCF layouts, strides 1 and 2) against torch's unfold / conv2d in float64, every element
checked."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from wavec import Memory, Register
from wavec.kernels import elementwise as ew
from wavec.kernels.gemm import BLOCK_K, BLOCK_M, BLOCK_N, K, M, N, gemm_constraints
from wavec.tuning.plan import GROUP_M, NUM_STAGES

NB, C, H, W = wc.sym.NB, wc.sym.C, wc.sym.H, wc.sym.W
HF, WF, WO, ST = wc.sym.HF, wc.sym.WF, wc.sym.WO, wc.sym.ST  # filter size, output width, stride
HOWO = wc.sym.HOWO  # output positions per image


def _window(m, k, hw_last: bool) -> dict:
    """Coordinates of the image element at row ``m`` (image, output y, output x) and column ``k`` of the
    im2col matrix; columns are (c, fy, fx) for NCHW and (fy, fx, c) for NHWC, as the filters flatten."""
    p = m % HOWO
    if hw_last:  # NCHW image, FCHW filters
        c, f = k // (HF * WF), k % (HF * WF)
    else:  # NHWC image, HWCF filters
        c, f = k % C, k // C
    return {NB: m // HOWO, C: c, H: p // WO * ST + f // WF, W: p % WO * ST + f % WF}


def test_im2col() -> None:
    @wc.wave(ew.rowwise_constraints(32, 1))
    def im2col(a: Memory[NB, C, H, W, wc.f16], b: Memory[ew.M, ew.N, wc.f16]):
        wc.write(wc.read(a, mapping=_window(wc.index(ew.M), wc.index(ew.N), True)), b)

    n, c, h, w, hf, wf = 2, 3, 9, 8, 2, 3
    ho, wo = h - hf + 1, w - wf + 1
    a = torch.randn(n, c, h, w, generator=torch.Generator().manual_seed(1)).half()
    b = torch.full((n * ho * wo, c * hf * wf), float("nan"), dtype=torch.float16)
    subs = {ew.BLOCK_M: 4, ew.BLOCK_N: 32, HF: hf, WF: wf, WO: wo, HOWO: ho * wo, ST: 1}
    wc.compile(im2col, subs, backend="emulator", cache=False)(a, b)
    want = torch.nn.functional.unfold(a.float(), (hf, wf)).transpose(1, 2).reshape(n * ho * wo, -1).half()
    assert torch.equal(b, want)


def _igemm(hw_last: bool) -> wc.WaveKernel:
    """``out[m, f] = sum_k im2col(x)[m, k] * wt[f, k]``: the conv's output rows m = (image, y, x)."""
    image = Memory[NB, C, H, W, wc.f16] if hw_last else Memory[NB, H, W, C, wc.f16]

    @wc.wave(gemm_constraints(32, wc.MMAType.NV_F32_16x8x16_F16, (2, 1)))
    def igemm(x: image, wt: Memory[N, K, wc.f16], out: Memory[M, N, wc.f32]):
        @wc.iterate(K, init_args=[Register[M, N, wc.f32](0)])
        def body(acc: Register[M, N, wc.f32]) -> Register[M, N, wc.f32]:
            a = wc.read(x, mapping=_window(wc.index(M), wc.index(K), hw_last))
            return wc.mma(a, wc.read(wt), acc)

        wc.write(body, out)

    return igemm


@pytest.mark.parametrize("layout,stride", [("nchw_fchw", 1), ("nhwc_hwcf", 1), ("nhwc_hwcf", 2)])
def test_igemm_conv_and_im2col_mma(layout: str, stride: int) -> None:
    """Wave's test_im2col_mma (im2col feeding an MMA) and test_igemm_conv (both layouts)."""
    n, c, h, w, hf, wf, nf = 2, 5, 10, 9, 3, 3, 20
    ho, wo = (h - hf) // stride + 1, (w - wf) // stride + 1
    g = torch.Generator().manual_seed(stride)
    x, f = torch.randn(n, c, h, w, generator=g).half(), torch.randn(nf, c, hf, wf, generator=g).half()
    hw_last = layout == "nchw_fchw"
    xin = x if hw_last else x.permute(0, 2, 3, 1).contiguous()
    wt = f.reshape(nf, -1) if hw_last else f.permute(0, 2, 3, 1).reshape(nf, -1).contiguous()
    out = torch.full((n * ho * wo, nf), float("nan"))
    subs = {BLOCK_M: 32, BLOCK_N: 16, BLOCK_K: 16, NUM_STAGES: 2, GROUP_M: 1, WF: wf, WO: wo, HOWO: ho * wo, ST: stride}
    if hw_last:  # the NHWC map names C, not HF
        subs[HF] = hf
    wc.compile(_igemm(hw_last), subs, backend="emulator", cache=False)(xin, wt, out)
    ref = torch.nn.functional.conv2d(x.double(), f.double(), stride=stride)  # [n, nf, ho, wo]
    torch.testing.assert_close(out.double(), ref.permute(0, 2, 3, 1).reshape(-1, nf), rtol=2e-3, atol=2e-3)
