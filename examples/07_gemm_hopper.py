"""Example 6: the GEMM of example 3 on Hopper's warpgroup MMA (``wgmma``, target sm_90a).

The kernel body is example 3's, unchanged.  Retargeting is the constraint list: a warpgroup MMA type in
the HardwareConstraint (still ``threads_per_wave=32``: a warpgroup is 4 waves), and wave tiles that are
warpgroup tiles (multiples of 64 rows).  Operands go through shared memory and reach the tensor cores
through matrix descriptors; the fences and commit/wait groups are placed by the compiler.  Runs on an
sm_90 GPU, else on the CPU emulator (which executes the same wgmma MLIR lane by lane).
"""

import sys

import torch
from _check import report

import wavec as wc
from wavec import Memory, Register, f16, f32
from wavec.compiler import default_backend

M, N, K = wc.sym.M, wc.sym.N, wc.sym.K
BM, BN, BK = wc.sym.BLOCK_M, wc.sym.BLOCK_N, wc.sym.BLOCK_K

constraints = [
    wc.WorkgroupConstraint(M, BM, 0),
    wc.WorkgroupConstraint(N, BN, 1),
    wc.WaveConstraint(M, BM / 2),  # two warpgroups along M, 64 rows each at BM = 128
    wc.WaveConstraint(N, BN),  # each spans the tile's N: one m64nNk16 per K step with N = BN
    wc.TilingConstraint(K, BK),
    wc.HardwareConstraint(threads_per_wave=32, mma_type=wc.MMAType.NV_WGMMA_F32_64xNx16_F16),
    wc.SchedulingConstraint(num_stages=3),  # 3 stages: one wgmma group stays in flight
]


@wc.wave(constraints)
def gemm(a: Memory[M, K, f16], b: Memory[N, K, f16], c: Memory[M, N, f32]):
    acc = Register[M, N, f32](0.0)

    @wc.iterate(K, init_args=[acc])
    def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
        return wc.mma(wc.read(a), wc.read(b), acc)

    wc.write(body, c)


def main() -> bool:
    backend = default_backend()
    if backend == "cuda" and torch.cuda.get_device_capability() != (9, 0):
        backend = "emulator"  # wgmma needs an sm_90 GPU; elsewhere the emulator runs it
    device = "cuda" if backend == "cuda" else "cpu"
    kernel = wc.compile(gemm, subs={BM: 128, BN: 64, BK: 64}, backend=backend, target="sm_90a")
    ok = True
    for m, n, k in ((128, 128, 256), (100, 72, 136)):  # one binary; the second shape is masked
        a = torch.randn(m, k, device=device, dtype=torch.float16)
        b = torch.randn(n, k, device=device, dtype=torch.float16)
        c = torch.full((m, n), float("nan"), device=device)
        kernel(a, b, c)
        ok &= report(f"wgmma gemm f16->f32 M={m} N={n} K={k}", c, a.double() @ b.double().T, 1e-5, backend)
    return ok


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
