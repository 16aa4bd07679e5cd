"""Kernels of the Wave e2e ports (docs/wave_ports.md) shared by the emulator and GPU tiers, with their
torch references: the two that exposed compiler bugs (batch dimensions in ``wc.broadcast`` and
``Register``), a run scatter and the implicit-GEMM convolution."""

from __future__ import annotations

import torch

import wavec as wc
from wavec import Memory, Register
from wavec.kernels import elementwise as ew
from wavec.kernels.gemm import BLOCK_K, BLOCK_M, BLOCK_N, K, M, N, gemm_constraints
from wavec.tuning.plan import GROUP_M, NUM_STAGES

KB, N1, TILE_N = wc.sym.KB, wc.sym.N1, wc.sym.TILE_N
NB, C, H, W = wc.sym.NB, wc.sym.C, wc.sym.H, wc.sym.W
HF, WF, WO, ST = wc.sym.HF, wc.sym.WF, wc.sym.WO, wc.sym.ST  # filter size, output width, stride
HOWO = wc.sym.HOWO  # output positions per image
RUN = 4  # elements that share one offset (Wave's ELEMS_PER_THREAD)


def make_self_index(tpw: int = 32) -> wc.WaveKernel:
    """``out = where(sum(a) >= cumsum(a), index(N), sum(a))`` along N of [M, KB, N]; M and KB are batch
    dimensions (tiles of 1), which ``wc.broadcast`` drops from its target shape."""
    cons = [
        wc.WorkgroupConstraint(M, 1, 0),
        wc.WorkgroupConstraint(KB, 1, 1),
        wc.WorkgroupConstraint(N, N, 2),
        wc.WaveConstraint(M, 1),
        wc.HardwareConstraint(threads_per_wave=tpw, vector_shapes={M: 1, KB: 1, N: 128}),
    ]

    @wc.wave(cons)
    def self_index(a: Memory[M, KB, N, wc.i32], out: Memory[M, KB, N, wc.i32]):
        x = wc.read(a)
        total = wc.broadcast(wc.sum(x, N), (M, KB, N))
        idx = wc.broadcast(wc.index(N), (M, KB, N))
        wc.write(wc.where(total >= wc.cumsum(x, N), idx, total), out)

    return self_index


def reference_self_index(a: torch.Tensor) -> torch.Tensor:
    total = a.sum(-1, keepdim=True).expand_as(a)
    idx = torch.arange(a.shape[-1], device=a.device).int().expand_as(a)
    return torch.where(total >= a.cumsum(-1), idx, total).int()


def loop_constraints(rows: int, tpw: int = 32) -> list:
    """``rows`` rows per workgroup, one per wave; N walked in loop tiles of TILE_N."""
    return [
        wc.WorkgroupConstraint(M, rows, 0),
        wc.WaveConstraint(M, 1),
        wc.TilingConstraint(N, TILE_N),
        wc.HardwareConstraint(threads_per_wave=tpw, vector_shapes={M: 1, N: 64}),
    ]


def make_toy_online_softmax(rows: int = 1, tpw: int = 32) -> wc.WaveKernel:
    """``c[m] = max_n(a * b)[m] / sum_n(a * b)[m]``, the max and the sum carried over loop tiles of N;
    with ``rows`` = 1, M is a batch dimension, which the carried ``Register[M, f32]`` values drop."""

    @wc.wave(loop_constraints(rows, tpw))
    def toy(a: Memory[M, N, wc.f32], b: Memory[M, N, wc.f32], c: Memory[M, wc.f32]):
        @wc.iterate(N, init_args=[Register[M, wc.f32](-1e6), Register[M, wc.f32](0.0)])
        def loop(mx: Register[M, wc.f32], total: Register[M, wc.f32]):
            p = wc.read(a) * wc.read(b)
            return wc.maximum(mx, wc.max(p, N)), total + wc.sum(p, N)

        mx, total = loop
        wc.write(mx / total, c)

    return toy


def reference_toy_online_softmax(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    p = a.double() * b.double()
    return p.amax(-1) / p.sum(-1)


def make_offset_write_one(tpw: int = 32) -> wc.WaveKernel:
    """``b[m, off[m, n // RUN] + n % RUN] = a[m, n]``: runs of RUN elements moved to offsets."""

    @wc.wave(ew.rowwise_constraints(tpw, 1))
    def offset_write_one(a: Memory[ew.M, ew.N, wc.f16], off: Memory[ew.M, N1, wc.i32], b: Memory[ew.M, ew.N, wc.f16]):
        cols = wc.read(off, mapping={N1: wc.index(ew.N) // RUN}) + wc.index(ew.N) % RUN
        wc.write(wc.read(a), b, mapping={ew.N: cols})

    return offset_write_one


def offset_write_one_inputs(shape: tuple, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(a, off): each row of ``off`` a permutation of the row's runs, times RUN (one writer per element)."""
    runs = shape[1] // RUN
    off = torch.stack([torch.randperm(runs, generator=g) for _ in range(shape[0])]).int() * RUN
    return torch.randn(shape, generator=g).half(), off


def reference_offset_write_one(a: torch.Tensor, off: torch.Tensor) -> torch.Tensor:
    runs = off.shape[1]
    cols = off.repeat_interleave(RUN, dim=1) + torch.arange(RUN, device=off.device).repeat(runs)
    return torch.zeros_like(a).scatter(1, cols.long(), a)


def window(m, k, hw_last: bool) -> dict:
    """Coordinates of the image element at row ``m`` (image, output y, output x) and column ``k`` of the
    im2col matrix; columns are (c, fy, fx) for NCHW and (fy, fx, c) for NHWC, as the filters flatten."""
    p = m % HOWO
    if hw_last:  # NCHW image, FCHW filters
        c, f = k // (HF * WF), k % (HF * WF)
    else:  # NHWC image, HWCF filters
        c, f = k % C, k // C
    return {NB: m // HOWO, C: c, H: p // WO * ST + f // WF, W: p % WO * ST + f % WF}


def make_igemm(hw_last: bool, tpw: int = 32, mma=wc.MMAType.NV_F32_16x8x16_F16) -> wc.WaveKernel:
    """``out[m, f] = sum_k im2col(x)[m, k] * wt[f, k]``: a conv2d whose output rows are m = (image, y, x)."""
    image = Memory[NB, C, H, W, wc.f16] if hw_last else Memory[NB, H, W, C, wc.f16]

    @wc.wave(gemm_constraints(tpw, mma, (2, 1)))
    def igemm(x: image, wt: Memory[N, K, wc.f16], out: Memory[M, N, wc.f32]):
        @wc.iterate(K, init_args=[Register[M, N, wc.f32](0)])
        def body(acc: Register[M, N, wc.f32]) -> Register[M, N, wc.f32]:
            a = wc.read(x, mapping=window(wc.index(M), wc.index(K), hw_last))
            return wc.mma(a, wc.read(wt), acc)

        wc.write(body, out)

    return igemm


def igemm_problem(layout: str, stride: int, g: torch.Generator, device: str = "cpu") -> tuple:
    """(x, wt, out, subs, reference) of a conv2d of 2 images 5 x 10 x 9 by 20 filters of 3 x 3."""
    n, c, h, w, hf, wf, nf = 2, 5, 10, 9, 3, 3, 20
    ho, wo = (h - hf) // stride + 1, (w - wf) // stride + 1
    x, f = torch.randn(n, c, h, w, generator=g).half(), torch.randn(nf, c, hf, wf, generator=g).half()
    hw_last = layout == "nchw_fchw"
    xin = x if hw_last else x.permute(0, 2, 3, 1).contiguous()
    wt = f.reshape(nf, -1) if hw_last else f.permute(0, 2, 3, 1).reshape(nf, -1).contiguous()
    out = torch.full((n * ho * wo, nf), float("nan"))
    subs = {BLOCK_M: 32, BLOCK_N: 16, BLOCK_K: 16, NUM_STAGES: 2, GROUP_M: 1, WF: wf, WO: wo, HOWO: ho * wo}
    subs[ST] = stride
    if hw_last:  # the NHWC map names C, not HF
        subs[HF] = hf
    ref = torch.nn.functional.conv2d(x.double(), f.double(), stride=stride).permute(0, 2, 3, 1).reshape(-1, nf)
    return xin.to(device), wt.to(device), out.to(device), subs, ref.to(device)
