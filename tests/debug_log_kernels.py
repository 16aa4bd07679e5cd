"""Kernels of the ``wc.debug_log`` tests (emulator, binary and GPU tiers): ports of Wave's
``tests/kernel/test_debug.py`` (docs/wave_ports.md)."""

from __future__ import annotations

import wavec as wc
from wavec import Memory, Register, f16, f32
from wavec.kernels import gemm as gm
from wavec.kernels.elementwise import M, N, rowwise_constraints

K = wc.sym.K
TARGETS = [  # (target, threads per wave, MMA type, waves): mma.sync, wgmma (a warpgroup), MFMA
    ("sm_80", 32, wc.MMAType.NV_F32_16x8x16_F16, (2, 2)),
    ("sm_90a", 32, wc.MMAType.NV_WGMMA_F32_64xNx16_F16, (1, 1)),
    ("gfx942", 64, wc.MMAType.F32_16x16x16_F16, (2, 2)),
]


def make_core(seen: dict, threads: int = 32) -> wc.WaveKernel:
    """Wave's test_debug_log_core: a row a workgroup (``BLOCK_M`` 1), four logs."""

    @wc.wave(rowwise_constraints(threads, 4))
    def add(a: Memory[M, N, f16], b: Memory[M, N, f16], c: Memory[M, N, f16]) -> None:
        lhs, rhs = wc.read(a), wc.read(b)
        wc.debug_log(lhs, printer=lambda label, t: seen.update(printer=(label, t)))
        wc.debug_log(rhs, label="rhslog")
        half = wc.read(a, mapping={M: wc.tile_start(M) // 2})  # row i holds a[i // 2]
        wc.debug_log(half, label="lhs_mapped", mapping={M: wc.tile_start(M) // 2})  # back to row i // 2
        res = lhs + rhs
        wc.debug_log(res, label="res", handler=lambda logs: seen.update(handler=logs))
        wc.write(res, c)

    return add


def make_gemm(threads: int, mma, iterations, waves=(2, 2), log_a: bool = True) -> wc.WaveKernel:
    """Wave's test_debug_log_iteration_dims: a GEMM logging its A operand (``log_a``) and its
    accumulator per K step."""
    cons = [c for c in gm.gemm_constraints(threads, mma, waves) if not isinstance(c, wc.SchedulingConstraint)]
    cons.append(wc.SchedulingConstraint(num_stages=gm.NUM_STAGES, group_size=gm.GROUP_M))

    @wc.wave(cons)
    def gemm(a: Memory[M, K, f16], b: Memory[N, K, f16], c: Memory[M, N, f32]) -> None:
        acc = Register[M, N, f32](0.0)

        @wc.iterate(K, init_args=[acc])
        def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
            a_reg = wc.read(a)
            if log_a:  # (not a wgmma operand: a matrix descriptor, which only the wgmma reads)
                wc.debug_log(a_reg, "a")
            acc = wc.mma(a_reg, wc.read(b), acc)
            wc.debug_log(acc, "acc", iterations=iterations)
            return acc

        wc.write(body, c)

    return gemm
