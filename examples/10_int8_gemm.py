"""Example 10: int8 GEMM with an exact int32 result, and a float32 GEMM on the tf32 matrix units.

The matrix instruction is the HardwareConstraint's ``mma_type``: ``NV_I32_16x8x32_I8`` is
``mma.sync.m16n8k32.s32.s8.s8.s32`` (sm_80+); ``I32_16x16x32_I8`` the gfx942 MFMA (64-wide waves) and
``NV_WGMMA_I32_64xNx32_I8`` Hopper's warpgroup MMA.  The accumulator is ``Register[M, N, i32]``.  For
float32 inputs, ``NV_F32_16x8x8_TF32`` (or ``wavec.kernels.gemm.matmul(a, b, allow_tf32=True)``)
multiplies the operands rounded to tf32 (10 mantissa bits): about 1e-3 relative error, as torch's
``allow_tf32``.
"""

import sys

import torch
from _check import device_and_backend, report

import wavec as wc
from wavec import Memory, Register, i8, i32
from wavec.kernels.gemm import matmul

M, N, K = wc.sym.M, wc.sym.N, wc.sym.K
BM, BN, BK = wc.sym.BLOCK_M, wc.sym.BLOCK_N, wc.sym.BLOCK_K

constraints = [
    wc.WorkgroupConstraint(M, BM, 0),
    wc.WorkgroupConstraint(N, BN, 1),
    wc.WaveConstraint(M, BM / 2),
    wc.WaveConstraint(N, BN / 2),
    wc.TilingConstraint(K, BK),  # a multiple of the instruction's K = 32
    wc.HardwareConstraint(threads_per_wave=32, mma_type=wc.MMAType.NV_I32_16x8x32_I8),
]


@wc.wave(constraints)
def gemm_i8(a: Memory[M, K, i8], b: Memory[N, K, i8], c: Memory[M, N, i32]):
    acc = Register[M, N, i32](0)

    @wc.iterate(K, init_args=[acc])
    def body(acc: Register[M, N, i32]) -> Register[M, N, i32]:
        return wc.mma(wc.read(a), wc.read(b), acc)

    wc.write(body, c)


def main() -> bool:
    device, backend = device_and_backend()
    kernel = wc.compile(gemm_i8, subs={BM: 64, BN: 64, BK: 64}, backend=backend)
    ok = True
    for m, n, k in ((128, 64, 128), (33, 47, 29)):  # the odd sizes launch the kernel's narrow variant
        a = torch.randint(-128, 128, (m, k), device=device, dtype=torch.int8)
        b = torch.randint(-128, 128, (n, k), device=device, dtype=torch.int8)
        c = torch.full((m, n), -(2**31), device=device, dtype=torch.int32)  # a sentinel no product gives here
        kernel(a, b, c)
        exact = (a.double() @ b.double().T).long()  # |sums| < K * 2**14 < 2**53 (CUDA has no int64 matmul)
        ok &= report(f"gemm i8->i32 M={m} N={n} K={k}", c, exact, 0.0, backend)
    x = torch.randn(96, 80, device=device)
    y = torch.randn(72, 80, device=device)
    z = matmul(x, y, allow_tf32=True, backend=backend)
    ok &= report("matmul f32 as tf32 96x72x80", z, x.double() @ y.double().T, 2e-3, backend)
    return ok


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
