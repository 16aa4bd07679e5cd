"""Memory-bound kernels: a 2-D copy and ``out = a * b + bias[None, :]`` (broadcast along rows)."""

import wavec as wc
from wavec import Memory

M, N = wc.sym.M, wc.sym.N
BLOCK_M, BLOCK_N = wc.sym.BLOCK_M, wc.sym.BLOCK_N


def rowwise_constraints(threads_per_wave: int = 32, elems_per_thread: int = 8) -> list:
    """One wave per row of the workgroup tile; each lane moves ``elems_per_thread`` contiguous elements."""
    return [
        wc.WorkgroupConstraint(M, BLOCK_M, 0),
        wc.WorkgroupConstraint(N, BLOCK_N, 1),
        wc.WaveConstraint(M, 1),
        wc.HardwareConstraint(
            threads_per_wave=threads_per_wave, vector_shapes={M: 1, N: threads_per_wave * elems_per_thread}
        ),
    ]


def make_copy(dtype=wc.f16, threads_per_wave: int = 32) -> wc.WaveKernel:
    @wc.wave(rowwise_constraints(threads_per_wave, 16 // dtype.bytes))
    def copy(src: Memory[M, N, dtype], dst: Memory[M, N, dtype]):
        wc.write(wc.read(src), dst)

    return copy


def make_scale_shift(dtype=wc.f16, threads_per_wave: int = 32) -> wc.WaveKernel:
    @wc.wave(rowwise_constraints(threads_per_wave, 16 // dtype.bytes))
    def scale_shift(a: Memory[M, N, dtype], b: Memory[M, N, dtype], bias: Memory[N, dtype], out: Memory[M, N, dtype]):
        wc.write(wc.read(a) * wc.read(b) + wc.read(bias)[None, :], out)

    return scale_shift


DEFAULT_SUBS = {BLOCK_M: 4, BLOCK_N: 512}
