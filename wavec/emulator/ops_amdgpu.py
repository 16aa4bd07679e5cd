"""``amdgpu.mfma`` on a wave of 64 lanes, with the CDNA3 register layouts (single block, M = N).

Layouts, lane ``l`` of the wave, ``G = 64 // M`` lane groups, ``KL = K // G`` A/B elements per lane:

- A (``vector<KLxT>``): lane ``l`` element ``j`` holds ``A[i = l % M, k = KL*(l // M) + j]``.
- B (``vector<KLxT>``): lane ``l`` element ``j`` holds ``B[k = KL*(l // M) + j, n = l % M]``.
- C/D (``vector<M*M/64 x f32>``): lane ``l`` element ``j`` holds
  ``C[m = 4*G*(j // 4) + 4*(l // M) + j % 4, n = l % M]``.

So for 16x16x16 f16: A[l % 16, 4*(l // 16) + j], C[4*(l // 16) + j, l % 16]; for 32x32x8 f16:
A[l % 32, 4*(l // 32) + j], C[8*(j // 4) + 4*(l // 32) + j % 4, l % 32].  Source: the output of AMD's
matrix instruction calculator (github.com/ROCm/amd_matrix_instruction_calculator,
``matrix_calculator.py -a CDNA3 -i v_mfma_f32_16x16x16_f16 / v_mfma_f32_32x32x8_f16 -A/-B/-D -d``),
which gives "A[i][k]: lane = i + M*(k // KL), item k % KL" and for 32x32 outputs "D[i][j]: lane
j + 32*((i // 4) % 2), item 4*(i // 8) + i % 4"; rocWMMA's MFMA layouts agree.  Products are exact in
f32 for f16/bf16 inputs and accumulation is in f32.
"""

from __future__ import annotations

import numpy as np
from iree.compiler import ir

from wavec.emulator.interp import Compiler, Instr, State, full_lanes, register
from wavec.emulator.ops_nvgpu import mma
from wavec.emulator.types import value_type
from wavec.errors import EmulatorError

WAVE = 64


def mfma_layouts(m: int, k: int) -> tuple[tuple, tuple, tuple]:
    """((a_row, a_col), (b_k, b_n), (c_row, c_col)) index arrays of shape (64, elems)."""
    g, kl = WAVE // m, k // (WAVE // m)
    lane = np.arange(WAVE)[:, None]
    j = np.arange(kl)[None, :]
    a = (lane % m + 0 * j, kl * (lane // m) + j)
    b = (kl * (lane // m) + j, lane % m + 0 * j)
    jc = np.arange(m * m // WAVE)[None, :]
    cr = 4 * g * (jc // 4) + 4 * (lane // m) + jc % 4
    return a, b, (cr, lane % m + 0 * jc)


@register("amdgpu.mfma")
def _mfma(c: Compiler, op: ir.Operation) -> Instr:
    (a, b, acc), (o,) = c.ins(op), c.outs(op)
    m, n, k, blocks = (op.attributes[x].value for x in ("m", "n", "k", "blocks"))
    mods = [op.attributes[x].value for x in ("cbsz", "abid") if x in op.attributes]
    blgp = str(op.attributes["blgp"]) if "blgp" in op.attributes else "none"
    (shape_a, at), (shape_c, ct) = value_type(op.operands[0].type), value_type(op.operands[2].type)
    kl = int(np.prod(shape_a)) if shape_a else 1
    if m != n or m not in (16, 32) or blocks != 1 or any(mods) or "none" not in blgp or kl != k * m // WAVE:
        raise EmulatorError(message=f"{c.loc(op)}: unsupported mfma {m}x{n}x{k} (blocks={blocks})")
    layouts, a_shape, c_shape = mfma_layouts(m, k), tuple(shape_a) or (1,), tuple(shape_c)

    def run(st: State) -> None:
        if st.lanes % WAVE:
            raise EmulatorError(message=f"{c.loc(op)}: workgroup of {st.lanes} threads is not whole waves")
        env, lanes = st.env, st.lanes
        fa = full_lanes(np.asarray(env[a]).reshape((-1,) + a_shape), lanes).reshape(lanes, -1)
        fb = full_lanes(np.asarray(env[b]).reshape((-1,) + a_shape), lanes).reshape(lanes, -1)
        fc = full_lanes(env[acc], lanes).reshape(lanes, -1)
        env[o] = mma((fa, fb, fc), layouts, (m, n, k), at, ct).reshape((lanes,) + c_shape)

    return run
