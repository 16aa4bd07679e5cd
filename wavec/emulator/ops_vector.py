"""``vector`` dialect ops on (lanes, *vector_shape) arrays, and vector memory accesses.

``vector.load``/``store`` access consecutive elements along the trailing memref dims; ``transfer_read``
follows its permutation map (identity, minor identity, transposes, broadcast dims) and ``in_bounds``:
out-of-bounds elements of a not-in-bounds dim read the padding value.  Reductions fold sequentially from
the accumulator, as LLVM's ordered ``vector.reduce.*`` does without reassociation flags.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from iree.compiler import ir

from wavec.emulator.interp import KDYN, Compiler, Instr, State, elementwise, full_lanes, register
from wavec.emulator.memory import check_alignment, element_indices, load, store
from wavec.emulator.ops_arith import reduction
from wavec.emulator.types import value_type
from wavec.errors import EmulatorError


def _vshape(t: ir.Type) -> tuple[int, ...]:
    return value_type(t)[0]


def _ints(attr: ir.Attribute) -> list[int]:
    return [a.value if isinstance(a, ir.IntegerAttr) else int(a) for a in attr]


def _minor(mrank: int, vshape: tuple[int, ...]) -> list[int | None]:
    return [mrank - len(vshape) + i for i in range(len(vshape))]


def _alignment(op: ir.Operation) -> int:
    """A vector access's ``alignment`` attribute in bytes where it promises more than one element's."""
    if op.name != "vector.load" and op.name != "vector.store" or "alignment" not in op.attributes:
        return 0
    align = ir.IntegerAttr(op.attributes["alignment"]).value
    return align if align > 1 else 0


@register("vector.load", "memref.load")
def _vload(c: Compiler, op: ir.Operation) -> Instr:
    (m, *idx), (o,) = c.ins(op), c.outs(op)
    vshape = _vshape(op.results[0].type)
    vmap = _minor(op.operands[0].type.rank, vshape)
    loc, oid, align = c.loc(op), c.op_id(op), _alignment(op)

    def run(st: State) -> None:
        env = st.env
        eidx = element_indices([env[i] for i in idx], vshape, vmap)
        if align:
            check_alignment(st, env[m], eidx, align, loc)
        env[o] = load(st, env[m], eidx, loc, oid)

    return run


@register("vector.store", "memref.store")
def _vstore(c: Compiler, op: ir.Operation) -> Instr:
    v, m, *idx = c.ins(op)
    vshape = _vshape(op.operands[0].type)
    vmap = _minor(op.operands[1].type.rank, vshape)
    loc, oid, align = c.loc(op), c.op_id(op), _alignment(op)

    def run(st: State) -> None:
        env = st.env
        eidx = element_indices([env[i] for i in idx], vshape, vmap)
        if align:
            check_alignment(st, env[m], eidx, align, loc)
        store(st, env[m], eidx, env[v], loc, oid)

    return run


def _transfer_setup(c: Compiler, op: ir.Operation, vtype: ir.Type) -> tuple:
    vshape = _vshape(vtype)
    pmap = op.attributes["permutation_map"].value
    vmap: list[int | None] = []
    for e in pmap.results:
        if isinstance(e, ir.AffineDimExpr):
            vmap.append(e.position)
        elif isinstance(e, ir.AffineConstantExpr) and e.value == 0:
            vmap.append(None)
        else:
            raise EmulatorError(message=f"{c.loc(op)}: unsupported permutation map {pmap}")
    inb = [bool(a) for a in op.attributes["in_bounds"]] if "in_bounds" in op.attributes else []
    inb = inb or [False] * len(vshape)
    sorted_map = [d for d in vmap if d is not None]
    if sorted_map != sorted(sorted_map) and list(op.attributes["operandSegmentSizes"])[-1]:
        raise EmulatorError(message=f"{c.loc(op)}: masked transposing transfer is not supported")
    return vshape, vmap, inb


@register("vector.transfer_read")
def _transfer_read(c: Compiler, op: ir.Operation) -> Instr:
    # operands: memref, indices..., padding, mask?
    ins, (o,) = c.ins(op), c.outs(op)
    seg = list(op.attributes["operandSegmentSizes"])
    m, idx, pad = ins[0], ins[1 : 1 + seg[1]], ins[1 + seg[1]]
    mask = ins[2 + seg[1]] if seg[3] else None
    vshape, vmap, inb = _transfer_setup(c, op, op.results[0].type)
    loc, oid = c.loc(op), c.op_id(op)

    def run(st: State) -> None:
        env = st.env
        mem = env[m]
        eidx = element_indices([env[i] for i in idx], vshape, vmap)
        em = None if mask is None else np.asarray(env[mask])
        for i, d in enumerate(vmap):  # elements out of bounds along a dim not in_bounds read the padding
            if d is not None and not inb[i]:
                ok = (eidx[d] >= 0) & (eidx[d] < mem.shape[d])
                em = ok if em is None else em & ok
        vals = load(st, mem, eidx, loc, oid, emask=em)
        if em is not None:
            vals = np.where(em, vals, np.asarray(env[pad]).reshape((-1,) + (1,) * len(vshape)))
        env[o] = vals

    return run


@register("vector.broadcast", "vector.splat")
def _broadcast(c: Compiler, op: ir.Operation) -> Instr:
    shape, sshape = _vshape(op.results[0].type), _vshape(op.operands[0].type)
    pad = (1,) * (len(shape) - len(sshape))

    def fn(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        return np.broadcast_to(x.reshape(x.shape[:1] + pad + x.shape[1:]), x.shape[:1] + shape)

    return elementwise(c, op, fn)


def _positions(static: list[int], dyn: list[int], st: State) -> tuple[Any, ...]:
    it = iter(dyn)
    pos: list[Any] = [slice(None)]
    for p in static:
        if p != KDYN:
            pos.append(p)
            continue
        v = np.asarray(st.env[next(it)], np.int64)
        pos.append(int(v[0]) if v.shape[0] == 1 else v)
    if any(isinstance(p, np.ndarray) for p in pos):
        pos[0] = np.arange(st.lanes)
    return tuple(pos)


def insert_at(dest: np.ndarray, value: np.ndarray, pos: tuple, lanes: int | None = None) -> np.ndarray:
    """A copy of ``dest`` (over ``lanes``, else the lanes of ``dest`` and ``value``) with ``value`` at ``pos``."""
    n = lanes or max(value.shape[0], dest.shape[0])
    out = np.array(np.broadcast_to(dest, (n,) + dest.shape[1:]))
    out[pos] = value
    return out


@register("vector.extract")
def _extract(c: Compiler, op: ir.Operation) -> Instr:
    (src, *dyn), (o,) = c.ins(op), c.outs(op)
    static = list(op.attributes["static_position"])

    def run(st: State) -> None:
        x = np.asarray(st.env[src])
        pos: tuple[Any, ...] = _positions(static, dyn, st) if dyn else (slice(None), *static)
        st.env[o] = (full_lanes(x, st.lanes) if isinstance(pos[0], np.ndarray) else x)[pos]

    return run


@register("vector.insert")
def _insert(c: Compiler, op: ir.Operation) -> Instr:
    (src, dest, *dyn), (o,) = c.ins(op), c.outs(op)
    static = list(op.attributes["static_position"])

    def run(st: State) -> None:
        s, d = np.asarray(st.env[src]), np.asarray(st.env[dest])
        pos: tuple[Any, ...] = _positions(static, dyn, st) if dyn else (slice(None), *static)
        st.env[o] = insert_at(d, s, pos, st.lanes if isinstance(pos[0], np.ndarray) else None)

    return run


@register("vector.extract_strided_slice")
def _extract_slice(c: Compiler, op: ir.Operation) -> Instr:
    offs, sizes, strides = (_ints(op.attributes[k]) for k in ("offsets", "sizes", "strides"))
    sl = (slice(None),) + tuple(slice(o, o + n * s, s) for o, n, s in zip(offs, sizes, strides, strict=False))
    return elementwise(c, op, lambda x: x[sl])


@register("vector.insert_strided_slice")
def _insert_slice(c: Compiler, op: ir.Operation) -> Instr:
    offs, strides = _ints(op.attributes["offsets"]), _ints(op.attributes["strides"])
    sshape = _vshape(op.operands[0].type)
    lead = len(offs) - len(sshape)
    sl = (slice(None),) + tuple(offs[:lead])
    sl += tuple(slice(o, o + n * s, s) for o, n, s in zip(offs[lead:], sshape, strides, strict=False))

    return elementwise(c, op, lambda s, d: insert_at(d, s, sl))


@register("vector.shape_cast")
def _shape_cast(c: Compiler, op: ir.Operation) -> Instr:
    shape = _vshape(op.results[0].type)
    return elementwise(c, op, lambda x: np.reshape(x, x.shape[:1] + shape))


@register("vector.shuffle")
def _shuffle(c: Compiler, op: ir.Operation) -> Instr:
    mask = np.array([max(0, int(i)) for i in op.attributes["mask"]], np.int64)

    def fn(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a, b = (x.reshape(x.shape + (1,)) if x.ndim == 1 else x for x in (a, b))
        n = max(a.shape[0], b.shape[0])
        a, b = (np.broadcast_to(x, (n,) + x.shape[1:]) for x in (a, b))
        return np.concatenate([a, b], axis=1)[:, mask]

    return elementwise(c, op, fn)


@register("vector.reduction")
def _reduction(c: Compiler, op: ir.Operation) -> Instr:
    fn, fix = reduction(c, op, "kind")

    def red(x: np.ndarray, acc: np.ndarray | None = None) -> np.ndarray:
        r = x[:, 0] if acc is None else fix(fn(acc, x[:, 0]))
        for i in range(1, x.shape[1]):
            r = fix(fn(r, x[:, i]))
        return r

    return elementwise(c, op, red)


@register("vector.from_elements")
def _from_elements(c: Compiler, op: ir.Operation) -> Instr:
    shape = _vshape(op.results[0].type)

    def fn(*xs: np.ndarray) -> np.ndarray:
        arrs = np.broadcast_arrays(*[np.asarray(x) for x in xs])
        return np.stack(arrs, axis=1).reshape(arrs[0].shape[:1] + shape)

    return elementwise(c, op, fn)
