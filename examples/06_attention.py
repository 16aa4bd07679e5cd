"""Example 6: flash attention forward — two chained mmas with an online softmax carried by iterate.

The kernel body is the whole algorithm: S = Q·Kᵀ on the matrix units, masks to -inf, running max and sum,
P = exp2(S - m) converted in registers to the next mma's A operand, O += P·V with V read transposed by
ldmatrix.trans.  Batch and head are batch dimensions (one per workgroup); the kv head of a query head is
an index mapping on the read (grouped-query attention); the softmax scale is a launch argument.

Retargeting to Hopper's warpgroup MMA (``wgmma``, sm_90a) is the constraint list only (``hopper``):
warpgroups of 64 query rows and the wgmma type.  The same body then runs Q·Kᵀ with Q and P·V with P as
register operands of wgmma, K and V through shared-memory descriptors (V transposed: imm-trans-b), with the
fences and waits around the softmax placed by the compiler.  It runs on an sm_90 GPU, else on the emulator.
"""

import math
import sys

import torch
from _check import device_and_backend, report

import wavec as wc
from wavec import Memory, Register, f16, f32

B, H, KVH, M, N, D = wc.sym.B, wc.sym.H, wc.sym.KVH, wc.sym.M, wc.sym.N, wc.sym.D
BLOCK_M, BLOCK_N = wc.sym.BLOCK_M, wc.sym.BLOCK_N
NEG_INF = float("-inf")

constraints = [
    wc.WorkgroupConstraint(M, BLOCK_M, 0),  # query tiles
    wc.WorkgroupConstraint(H, 1, 1),  # one head per workgroup (a batch dimension)
    wc.WorkgroupConstraint(B, 1, 2),  # one batch entry per workgroup
    wc.WorkgroupConstraint(D, D, None),  # the whole head dim in every workgroup
    wc.WaveConstraint(M, BLOCK_M / 4),  # four waves, 16 query rows each at BLOCK_M = 64
    wc.TilingConstraint(N, BLOCK_N),  # the loop over keys
    wc.HardwareConstraint(threads_per_wave=32, mma_type=wc.MMAType.NV_F32_16x8x16_F16),
]
hopper = constraints[:4] + [
    wc.WaveConstraint(M, 64),  # one warpgroup (4 waves) per 64 query rows
    wc.TilingConstraint(N, BLOCK_N),
    wc.HardwareConstraint(threads_per_wave=32, mma_type=wc.MMAType.NV_WGMMA_F32_64xNx16_F16),
]


def attention(
    q: Memory[B, H, M, D, f16],
    k: Memory[B, KVH, N, D, f16],
    v: Memory[B, KVH, N, D, f16],
    o: Memory[B, H, M, D, f16],
    scale: wc.Scalar[f32],
):
    qr = wc.read(q)  # read once, kept in registers
    c = scale * (1.0 / math.log(2.0))
    kv_head = {KVH: wc.tile_start(H) // (H // KVH)}  # grouped-query heads

    @wc.iterate(N, init_args=[Register[M, f32](NEG_INF), Register[M, f32](0.0), Register[M, D, f32](0.0)])
    def body(m_i: Register[M, f32], l_i: Register[M, f32], acc: Register[M, D, f32]):
        s = wc.mma(qr, wc.read(k, mapping=kv_head), Register[M, N, f32](0.0)) * c
        s = wc.where(wc.arange(N)[None, :] < N, s, NEG_INF)  # keys past the end contribute exp2(-inf) = 0
        m_new = wc.maximum(m_i, wc.max(s, N))
        p = wc.exp2(s - m_new[:, None])
        alpha = wc.exp2(m_i - m_new)
        vt = wc.permute(wc.read(v, mapping=kv_head), (D, N))  # V as the B operand: [D, N]
        return m_new, l_i * alpha + wc.sum(p, N), wc.mma(wc.cast(p, f16), vt, acc * alpha[:, None])

    _m, l_final, acc = body
    wc.write(wc.cast(acc * wc.reciprocal(l_final)[:, None], f16), o)


def run(kernel, device: str, backend: str, what: str) -> bool:
    b, h, kvh, sq, skv, d = 1, 4, 2, 100, 150, 64  # neither length is a multiple of the tiles
    q = torch.randn(b, h, sq, d, device=device, dtype=torch.float16)
    k = torch.randn(b, kvh, skv, d, device=device, dtype=torch.float16)
    v = torch.randn(b, kvh, skv, d, device=device, dtype=torch.float16)
    out = torch.full_like(q, float("nan"))
    kernel(q, k, v, out, 1.0 / math.sqrt(d))
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float().repeat_interleave(h // kvh, 1), v.float().repeat_interleave(h // kvh, 1)
    )
    return report(f"attention f16 GQA [1, 4, 100, 64] {what}", out, ref, 2e-3, backend)


def main() -> bool:
    device, backend = device_and_backend()
    ok = run(
        wc.compile(wc.wave(constraints)(attention), {BLOCK_M: 64, BLOCK_N: 64, D: 64}, backend=backend),
        device,
        backend,
        "mma.sync",
    )
    if backend == "cuda" and torch.cuda.get_device_capability() != (9, 0):
        device, backend = "cpu", "emulator"  # wgmma needs an sm_90 GPU; elsewhere the emulator runs it
    kernel = wc.compile(wc.wave(hopper)(attention), {BLOCK_M: 64, BLOCK_N: 64, D: 64}, backend=backend, target="sm_90a")
    return run(kernel, device, backend, "wgmma") and ok


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
