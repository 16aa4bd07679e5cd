"""Kernels of values smaller than a wave (issue #20 item 2), shared by the emulator, binary and GPU tiers."""

from __future__ import annotations

import wavec as wc
from wavec import Memory

M, N = wc.sym.M, wc.sym.N
# (wave tile of M, vector_shapes M, vector_shapes N, waves): 4 elements per wave, 1 element, 8 rows of 2,
# wave tiles of 1 and 2 rows under vector_shapes of 4 and 8 rows
CASES = [(1, 1, 4, 1), (1, 1, 4, 2), (2, 2, 4, 1), (1, 1, 1, 1), (4, 4, 2, 2), (1, 4, 4, 2), (2, 8, 8, 2)]


def rows_kernel(wm: int, vm: int, vn: int, waves: int, threads: int) -> wc.WaveKernel:
    """``o = x * v + 1`` (x [M, N], v [N]), its row sums ``s`` and row maxima ``mx``; N = ``vn`` at compile
    time, ``waves`` waves of ``wm`` rows per workgroup, ``vector_shapes`` {M: vm, N: vn}."""
    cons = [
        wc.WorkgroupConstraint(M, wm * waves, 0),
        wc.WorkgroupConstraint(N, vn, None),
        wc.WaveConstraint(M, wm),
        wc.HardwareConstraint(threads_per_wave=threads, vector_shapes={M: vm, N: vn}),
    ]

    @wc.wave(cons)
    def rows(x: Memory[M, N, wc.f32], v: Memory[N, wc.f32], o: Memory[M, N, wc.f32], s: Memory[M, wc.f32],
             mx: Memory[M, wc.f32]):  # fmt: skip
        y = wc.read(x) * wc.read(v) + 1.0
        wc.write(y, o)
        wc.write(wc.sum(y, N), s)
        wc.write(wc.max(y, N), mx)

    return rows
