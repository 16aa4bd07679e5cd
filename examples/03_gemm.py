"""Example 3: GEMM ``C = A @ B.T`` on the matrix units; M, N, K stay dynamic (one binary, many shapes).

Retargeting to AMD CDNA3 changes only the HardwareConstraint:
``threads_per_wave=64, mma_type=wc.MMAType.F32_16x16x16_F16``.
"""

import sys

import torch
from _check import device_and_backend, report

import wavec as wc
from wavec import Memory, Register, f16, f32

M, N, K = wc.sym.M, wc.sym.N, wc.sym.K
BM, BN, BK = wc.sym.BLOCK_M, wc.sym.BLOCK_N, wc.sym.BLOCK_K

constraints = [
    wc.WorkgroupConstraint(M, BM, 0),
    wc.WorkgroupConstraint(N, BN, 1),
    wc.WaveConstraint(M, BM / 2),
    wc.WaveConstraint(N, BN / 2),
    wc.TilingConstraint(K, BK),
    wc.HardwareConstraint(threads_per_wave=32, mma_type=wc.MMAType.NV_F32_16x8x16_F16),
]


@wc.wave(constraints)
def gemm(a: Memory[M, K, f16], b: Memory[N, K, f16], c: Memory[M, N, f32]):
    acc = Register[M, N, f32](0.0)

    @wc.iterate(K, init_args=[acc])
    def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
        return wc.mma(wc.read(a), wc.read(b), acc)

    wc.write(body, c)


def main() -> bool:
    device, backend = device_and_backend()
    kernel = wc.compile(gemm, subs={BM: 64, BN: 64, BK: 32}, backend=backend)
    ok = True
    for m, n, k in ((128, 64, 96), (64, 128, 64)):  # two shapes, one compiled binary
        a = torch.randn(m, k, device=device, dtype=torch.float16)
        b = torch.randn(n, k, device=device, dtype=torch.float16)
        c = torch.full((m, n), float("nan"), device=device)
        kernel(a, b, c)
        ok &= report(f"gemm f16->f32 M={m} N={n} K={k}", c, a.double() @ b.double().T, 1e-5, backend)
    return ok


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
