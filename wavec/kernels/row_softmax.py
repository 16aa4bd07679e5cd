"""Row softmax ``out = softmax(x, dim=-1)`` for rows that fit one workgroup tile (N bound in ``subs``).

One wave per row (or ``waves_per_row``); each lane holds ``N / 32`` elements of its row (16-byte runs); the
row max and sum are reduced in-thread, then across the wave's lanes (then across waves through shared
memory).  Computed in f32, stored in the input dtype.
"""

import math

import wavec as wc
from wavec import Memory

M, N = wc.sym.M, wc.sym.N
BLOCK_M = wc.sym.BLOCK_M
LOG2E = 1.0 / math.log(2.0)


def row_constraints(dtype=wc.f16, threads_per_wave: int = 32, waves_per_row: int = 1) -> list:
    """Rows of length N (bound in subs) in BLOCK_M-row workgroups, one wave per row or ``waves_per_row``
    sharing it (partial reductions meet in shared memory).  Shared by softmax and the norms."""
    split = [wc.WaveConstraint(N, N / waves_per_row)] if waves_per_row > 1 else []
    return [
        wc.WorkgroupConstraint(M, BLOCK_M, 0),
        wc.WorkgroupConstraint(N, N, 1),  # a whole row per workgroup: N must be bound in subs
        wc.WaveConstraint(M, 1),
        *split,
        wc.HardwareConstraint(
            threads_per_wave=threads_per_wave, vector_shapes={M: 1, N: threads_per_wave * (16 // dtype.bytes)}
        ),
    ]


def make_softmax(dtype=wc.f16, threads_per_wave: int = 32, waves_per_row: int = 1) -> wc.WaveKernel:
    """Row softmax kernel; ``waves_per_row`` as in ``row_constraints``."""

    @wc.wave(row_constraints(dtype, threads_per_wave, waves_per_row))
    def softmax(x: Memory[M, N, dtype], out: Memory[M, N, dtype]):
        v = wc.cast(wc.read(x), wc.f32)
        e = wc.exp2((v - wc.max(v, N)[:, None]) * LOG2E)
        wc.write(wc.cast(e * (1.0 / wc.sum(e, N))[:, None], dtype), out)

    return softmax
