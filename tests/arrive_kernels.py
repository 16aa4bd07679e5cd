"""Kernels of the ``wc.arrive`` tests (emulator, binary and GPU tiers): G groups of S workgroups; each
stores its share, arrives at its group's counter, and the last of the group sums the shares."""

from __future__ import annotations

import wavec as wc
from wavec import Memory, f32

G, S, T = wc.sym.G, wc.sym.S, wc.sym.T
MAX_SPLITS = 8  # T: the shares buffer's columns, bound in subs (a group sums all of them)


def make_last_sums(tpw: int = 32, waves: int = 1) -> wc.WaveKernel:
    """``last_sums(x [G, S], parts [G, T], counter [G] i32, out [G])``: workgroup (g, s) stores ``2 x[g, s]``
    to ``parts[g, s]``; the last of the S workgroups of group g writes ``out[g] = Σ_t parts[g, t]`` (the
    other workgroups exit before the sum: they write nothing to ``out``).  Compile with ``{T: MAX_SPLITS}``
    and zeroed ``parts`` columns past S."""
    wave_split = [wc.WaveConstraint(T, T / waves)] if waves > 1 else []
    constraints = [
        wc.WorkgroupConstraint(G, 1, 0),
        wc.WorkgroupConstraint(S, 1, 1),
        wc.WorkgroupConstraint(T, T, 2 if waves > 1 else None),
        *wave_split,
        wc.HardwareConstraint(threads_per_wave=tpw, vector_shapes={G: 1, S: 1, T: tpw}),
    ]

    @wc.wave(constraints)
    def last_sums(x: Memory[G, S, f32], parts: Memory[G, T, f32], counter: Memory[G, wc.i32], out: Memory[G, f32]):
        wc.write(wc.read(x) * 2.0, parts, mapping={T: wc.tile_start(S)})
        wc.exit_if(~wc.arrive(counter, expected=S))
        wc.write(wc.sum(wc.read(parts), T), out)

    return last_sums
