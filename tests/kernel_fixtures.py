"""Kernels that many test files need, defined once.

``gemm_kernel`` is the GEMM body of DESIGN §1 (``C[M, N] f32 = A[M, K] B[N, K]^T``, one ``wc.mma`` per K
step) under the caller's constraints; tests that vary the body itself (epilogues, annotations, error
locations) still define their own.
"""

import wavec as wc
from wavec import Memory, Register, f16, f32
from wavec.frontend.dtypes import DType

M, N, K = wc.sym.M, wc.sym.N, wc.sym.K


def gemm_kernel(constraints: list, dtype: DType = f16, name: str = "gemm") -> wc.WaveKernel:
    """The GEMM of DESIGN §1 with ``dtype`` operands, an f32 output and the entry point ``name``."""

    def gemm(a: Memory[M, K, dtype], b: Memory[N, K, dtype], c: Memory[M, N, f32]) -> None:
        acc = Register[M, N, f32](0.0)

        @wc.iterate(K, init_args=[acc])
        def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
            return wc.mma(wc.read(a), wc.read(b), acc)

        wc.write(body, c)

    gemm.__name__ = gemm.__qualname__ = name  # the kernel's name: FileCheck lines match `func.func @gemm`
    return wc.wave(constraints)(gemm)
