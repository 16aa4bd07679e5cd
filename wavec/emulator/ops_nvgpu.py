"""``nvgpu`` ops: ``mma.sync``, ``ldmatrix`` and ``device_async_copy`` with PTX ISA fragment layouts.

Warp = 32 consecutive linear thread ids.  Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k*"),
lane ``l``, ``g = l // 4``, ``t = l % 4``, ``p`` elements per 32-bit register (2 for f16/bf16, 1 for tf32,
4 for s8; the tensor core reads a tf32 operand's f32 register ignoring its low 13 bits, which ``_tf32``
truncates, so an operand rounded by ``cvt.rna.tf32.f32`` first passes unchanged):

- A with 4 registers: ``A[g + 8*(r % 2), p*t + 4p*(r // 2) + e]``; with 2 registers: ``A[g + 8*r, p*t + e]``.
- B: ``B[k = p*t + 4p*r + e, n = g]``.
- C/D (16x8): ``C[g + 8*r, 2*t + e]``.

``device_async_copy`` reads its source when issued and writes its shared destination only when the
``device_async_wait`` that retires its group runs (or at the end of the workgroup).
"""

from __future__ import annotations

import numpy as np
from iree.compiler import ir

from wavec.emulator.interp import Compiler, Instr, State, full_lanes, register, retire_groups
from wavec.emulator.memory import check_alignment, element_indices, load, store
from wavec.emulator.types import ElemType, value_type
from wavec.errors import EmulatorError

WARP = 32


def _lane_gt() -> tuple[np.ndarray, np.ndarray]:
    lane = np.arange(WARP)
    return lane // 4, lane % 4


def frag_a(regs: int, p: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of A for every (lane, reg, elem), shape (32, regs, p)."""
    g, t = (x[:, None, None] for x in _lane_gt())
    r, e = np.arange(regs)[None, :, None], np.arange(p)[None, None, :]
    if regs == 4:
        return g + 8 * (r % 2) + 0 * e, p * t + 4 * p * (r // 2) + e
    return g + 8 * r + 0 * e, p * t + e + 0 * r


def frag_b(regs: int, p: int) -> tuple[np.ndarray, np.ndarray]:
    """(k, n) of B for every (lane, reg, elem)."""
    g, t = (x[:, None, None] for x in _lane_gt())
    r, e = np.arange(regs)[None, :, None], np.arange(p)[None, None, :]
    return p * t + 4 * p * r + e, g + 0 * r + 0 * e


def frag_c() -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of C/D (16x8) for every (lane, reg, elem)."""
    g, t = (x[:, None, None] for x in _lane_gt())
    r, e = np.arange(2)[None, :, None], np.arange(2)[None, None, :]
    return g + 8 * r + 0 * e, 2 * t + e + 0 * r


def gather(frag: np.ndarray, rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int], dtype) -> np.ndarray:
    """Per-lane fragments (W*group, ...) -> matrices (W, *shape)."""
    n = rows.size
    w = frag.shape[0] * frag[0].size // n
    mat = np.zeros((w,) + shape, dtype)
    mat[:, rows.reshape(-1), cols.reshape(-1)] = frag.reshape(w, n)
    return mat


def scatter(mat: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Matrices (W, R, C) -> per-lane fragments (W*group, *frag_shape)."""
    lanes = rows.shape[0]
    return mat[:, rows.reshape(-1), cols.reshape(-1)].reshape((mat.shape[0] * lanes,) + rows.shape[1:])


def mma(
    frags: tuple, layouts: tuple, mnk: tuple[int, int, int], at: ElemType, ct: ElemType, saturate: bool = False
) -> np.ndarray:
    """D = A B + C of per-lane fragments laid out by ``layouts`` ((row, col) of A, B, C), computed in int64
    for integer operands, else in f32, then converted to the result type: integers wrap, or with
    ``saturate`` clamp to the accumulator's range (``.satfinite``)."""
    (m, n, k), calc = mnk, np.float32 if at.is_float else np.int64
    (fa, fb, fc), ((ar, ac), (bk, bn), (cr, cc)) = frags, layouts
    a, b = gather(fa, ar, ac, (m, k), calc), gather(fb, bk, bn, (k, n), calc)
    d = scatter(np.matmul(a, b) + gather(fc, cr, cc, (m, n), calc), cr, cc)
    if at.is_float:
        return ct.cast(d)
    if saturate:
        info = np.iinfo(ct.reg)
        d = np.clip(d, info.min, info.max)
    return d.astype(ct.reg)


def _tf32(x: np.ndarray) -> np.ndarray:
    return (np.ascontiguousarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


@register("nvgpu.mma.sync")
def _mma_sync(c: Compiler, op: ir.Operation) -> Instr:
    (a, b, acc), (o,) = c.ins(op), c.outs(op)
    m, n, k = (int(x) for x in op.attributes["mmaShape"])
    (ra, pa), at = value_type(op.operands[0].type)
    (rb, pb), _ = value_type(op.operands[1].type)
    _, ct = value_type(op.operands[2].type)
    if (m, n) != (16, 8) or ra * pa * WARP != m * k or rb * pb * WARP != n * k:
        raise EmulatorError(message=f"{c.loc(op)}: unsupported mma shape {m}x{n}x{k}")
    layouts = (frag_a(ra, pa), frag_b(rb, pb), frag_c())
    pre = _tf32 if at.name == "f32" else (lambda x: x)
    # nvgpu -> nvvm lowers every 8-bit mma.sync as ``.satfinite`` (s32 results clamp instead of wrapping)
    saturate = not at.is_float

    def run(st: State) -> None:
        if st.lanes % WARP:
            raise EmulatorError(message=f"{c.loc(op)}: workgroup of {st.lanes} threads is not whole warps")
        env, lanes = st.env, st.lanes
        frags = (pre(full_lanes(env[a], lanes)), pre(full_lanes(env[b], lanes)), full_lanes(env[acc], lanes))
        env[o] = mma(frags, layouts, (m, n, k), at, ct, saturate)

    return run


@register("nvgpu.ldmatrix")
def _ldmatrix(c: Compiler, op: ir.Operation) -> Instr:
    (mem, *idx), (o,) = c.ins(op), c.outs(op)
    tiles, trans = op.attributes["numTiles"].value, bool(op.attributes["transpose"])
    (nt, p), et = value_type(op.results[0].type)
    rowlen = 4 * p  # 16 bytes per row
    if nt != tiles or et.bits * p != 32 or (trans and p != 2):
        raise EmulatorError(message=f"{c.loc(op)}: unsupported ldmatrix result {op.results[0].type}")
    lane = np.arange(WARP)[:, None, None]
    j, e = np.arange(tiles)[None, :, None], np.arange(p)[None, None, :]
    if trans:
        row, col = p * (lane % 4) + e, lane // 4 + 0 * e
    else:
        row, col = lane // 4 + 0 * e, p * (lane % 4) + e
    tile = j + 0 * lane + 0 * e
    row, col = row + 0 * j, col + 0 * j
    mrank = op.operands[0].type.rank
    loc, oid = c.loc(op), c.op_id(op)

    def run(st: State) -> None:
        env, lanes = st.env, st.lanes
        supplies = (st.linear % WARP < 8 * tiles).reshape(-1, 1)
        eidx = element_indices([env[i] for i in idx], (rowlen,), [mrank - 1])
        vals = load(st, env[mem], eidx, loc, oid, emask=supplies)
        w = lanes // WARP
        rows = np.broadcast_to(vals, (lanes, rowlen)).reshape(w, WARP, rowlen)[:, : 8 * tiles]
        rows = rows.reshape(w, tiles, 8, rowlen)
        env[o] = rows[:, tile, row, col].reshape(lanes, tiles, p)

    return run


@register("nvgpu.device_async_copy")
def _async_copy(c: Compiler, op: ir.Operation) -> Instr:
    ins, (tok,) = c.ins(op), c.outs(op)
    seg = list(op.attributes["operandSegmentSizes"])
    dst, didx = ins[0], ins[1 : 1 + seg[1]]
    src, sidx = ins[1 + seg[1]], ins[2 + seg[1] : 2 + seg[1] + seg[3]]
    src_elems = ins[-1] if seg[4] else None
    n = op.attributes["dstElements"].value
    drank, srank = op.operands[0].type.rank, op.operands[1 + seg[1]].type.rank
    loc, rd, wr = c.loc(op), c.op_id(op), c.op_id(op)

    def run(st: State) -> None:
        env = st.env
        em = None
        if src_elems is not None:
            em = np.arange(n)[None, :] < np.asarray(env[src_elems]).reshape(-1, 1)
        seidx = element_indices([env[i] for i in sidx], (n,), [srank - 1])
        check_alignment(st, env[src], seidx, n * env[src].arr.itemsize, loc)  # cp.async: aligned to its size
        vals = load(st, env[src], seidx, loc, rd, em)
        if em is not None:
            vals = np.where(em, vals, np.zeros((), vals.dtype))
        dmem, deidx, mask = env[dst], element_indices([env[i] for i in didx], (n,), [drank - 1]), st.mask

        def complete(st: State) -> None:
            saved, st.mask = st.mask, mask
            try:
                store(st, dmem, deidx, vals, loc, wr)
            finally:
                st.mask = saved

        st.async_open.append(complete)
        env[tok] = None

    return run


@register("nvgpu.device_async_create_group", "nvgpu.device_async_wait")
def _async_group(c: Compiler, op: ir.Operation) -> Instr:
    """create_group: the copies issued since the last group form one; wait: retire all groups but the newest
    ``numGroups`` (default 0)."""
    outs, create = c.outs(op), op.name.endswith("create_group")
    keep = op.attributes["numGroups"].value if "numGroups" in op.attributes else 0

    def run(st: State) -> None:
        if create:
            st.async_groups.append(st.async_open)
            st.async_open = []
            st.env[outs[0]] = None
        else:
            retire_groups(st, st.async_groups, keep)

    return run
