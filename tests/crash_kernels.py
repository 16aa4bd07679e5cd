"""The three kernels of issue #20 item 7 that crashed the compiler, shared by the emulator, binary, IR and GPU
tiers: each ``make_*`` takes a target (its threads per wave and MMA type follow) and ``reference_*``
computes its result with torch in float64.

- ``make_batch_last``: a memory whose innermost dimension N is a batch dimension
  (``WorkgroupConstraint(N, 1, 1)``): coarsen_loads asked the register layout for N
  (``ValueError: tuple.index(x): x not in tuple``; fixed with the gathered-access runs, d221466).
- ``make_alibi_attention``: a per-head ALiBi slope ``Memory[H, f32]`` (batch dims only) read inside the
  attention loop and broadcast over the score tile (``IndexError: tuple index out of range`` in
  ``access_runs``; fixed with the rank-0 batch-indexed reads, aab2d88).
- ``make_dv``: the dV product of attention backward, ``mma(permute(P, (K2, M)), permute(dO, (N, M)), acc)``:
  a transposed accumulator as the A operand, which on NVIDIA convert_layouts must move through shared
  memory (it chose registers and codegen raised).
"""

from __future__ import annotations

import math

import torch

import wavec as wc
from wavec import Memory, Register, f16, f32

M, N, H, B, D, K2 = wc.sym.M, wc.sym.N, wc.sym.H, wc.sym.B, wc.sym.D, wc.sym.K2
BM, BN = wc.sym.BLOCK_M, wc.sym.BLOCK_N
TARGETS = {
    "sm_80": (32, wc.MMAType.NV_F32_16x8x16_F16),
    "sm_90a": (32, wc.MMAType.NV_F32_16x8x16_F16),
    "gfx942": (64, wc.MMAType.F32_16x16x16_F16),
}
LOG2E = 1.0 / math.log(2.0)


def make_batch_last(target: str) -> wc.WaveKernel:
    """``out[m, n] = x[m, n] * scale[n] + 1``: each workgroup holds one column n (N is innermost)."""
    tpw, _mma = TARGETS[target]
    cons = [
        wc.WorkgroupConstraint(M, BM, 0),
        wc.WorkgroupConstraint(N, 1, 1),
        wc.WaveConstraint(M, BM / 2),
        wc.HardwareConstraint(threads_per_wave=tpw, vector_shapes={M: tpw}),
    ]

    @wc.wave(cons)
    def batch_last(x: Memory[M, N, f32], scale: Memory[N, f32], out: Memory[M, N, f32]):
        wc.write(wc.read(x) * wc.read(scale) + 1.0, out)

    return batch_last


def reference_batch_last(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x.double() * scale.double()[None, :] + 1


def make_alibi_attention(target: str) -> wc.WaveKernel:
    """Attention with an ALiBi bias: ``softmax(q kᵀ · scale + slope[h] · (n - m)) v`` (BHSD, f16)."""
    tpw, mma = TARGETS[target]
    cons = [
        wc.WorkgroupConstraint(M, BM, 0),
        wc.WorkgroupConstraint(H, 1, 1),
        wc.WorkgroupConstraint(B, 1, 2),
        wc.WorkgroupConstraint(D, D, None),
        wc.WaveConstraint(M, BM / 2),
        wc.TilingConstraint(N, BN),
        wc.HardwareConstraint(threads_per_wave=tpw, mma_type=mma),
    ]
    kv = Memory[B, H, N, D, f16]

    @wc.wave(cons)
    def alibi(
        q: Memory[B, H, M, D, f16],
        k: kv,
        v: kv,
        slope: Memory[H, f32],
        o: Memory[B, H, M, D, f16],
        scale: wc.Scalar[f32],
    ):
        qr = wc.read(q)
        init = [Register[M, f32](float("-inf")), Register[M, f32](0.0), Register[M, D, f32](0.0)]

        @wc.iterate(N, init_args=init)
        def body(m_i: Register[M, f32], l_i: Register[M, f32], acc: Register[M, D, f32]):
            s = wc.mma(qr, wc.read(k), Register[M, N, f32](0.0)) * scale
            rel = wc.cast(wc.arange(N)[None, :] - wc.arange(M)[:, None], f32)
            s = s + wc.read(slope) * rel  # the per-head slope, one value broadcast over the tile
            m_new = wc.maximum(m_i, wc.max(s, N))
            p = wc.exp2((s - m_new[:, None]) * LOG2E)
            alpha = wc.exp2((m_i - m_new) * LOG2E)
            vt = wc.permute(wc.read(v), (D, N))
            return m_new, l_i * alpha + wc.sum(p, N), wc.mma(wc.cast(p, f16), vt, acc * alpha[:, None])

        _m, l_final, acc_final = body
        wc.write(wc.cast(acc_final * wc.reciprocal(l_final)[:, None], f16), o)

    return alibi


def reference_alibi(q, k, v, slope, scale: float) -> torch.Tensor:
    sq, sk = q.shape[2], k.shape[2]
    rel = (torch.arange(sk)[None, :] - torch.arange(sq)[:, None]).double()
    s = q.double() @ k.double().transpose(-1, -2) * scale + slope.double()[None, :, None, None] * rel
    return torch.softmax(s, -1) @ v.double()


def make_dv(target: str) -> wc.WaveKernel:
    """``dv[K2, N] = Σ_m P[m, K2] dO[m, N]`` with ``P = f16(exp2(q kᵀ))``: P is an mma result in [M, K2]
    (queries x keys), permuted into the A operand [K2, M] of the second mma."""
    tpw, mma = TARGETS[target]
    cons = [
        wc.WorkgroupConstraint(K2, BN, 0),
        wc.WorkgroupConstraint(D, D, None),
        wc.WorkgroupConstraint(N, N, None),
        wc.WaveConstraint(K2, BN / 2),
        wc.TilingConstraint(M, BM),
        wc.HardwareConstraint(threads_per_wave=tpw, mma_type=mma),
    ]

    @wc.wave(cons)
    def dv_product(q: Memory[M, D, f16], k: Memory[K2, D, f16], do: Memory[M, N, f16], dv: Memory[K2, N, f32]):
        @wc.iterate(M, init_args=[Register[K2, N, f32](0.0)])
        def body(acc: Register[K2, N, f32]):
            p = wc.cast(wc.exp2(wc.mma(wc.read(q), wc.read(k), Register[M, K2, f32](0.0))), f16)
            return wc.mma(wc.permute(p, (K2, M)), wc.permute(wc.read(do), (N, M)), acc)

        wc.write(body, dv)

    return dv_product


DV_SUBS = {BM: 32, BN: 64, D: 64, N: 64}
ALIBI_SUBS = {BM: 32, BN: 32, D: 64}


def reference_dv(q, k, do) -> torch.Tensor:
    p = torch.exp2(q.float() @ k.float().T).half()  # P rounded to f16 as the kernel does
    return p.double().T @ do.double()
