"""``memref`` ops and ``hal.interface.binding.subspan``: building strided views (scalar loads/stores are
handled with vector ones, in ``ops_vector``).

Workgroup allocations (``#gpu.address_space<workgroup>``) are one buffer per workgroup, filled with
0xFF bytes (NaN for floats, -1 for ints) so that a read of a never-written element shows.  Private
allocations (``memref.alloca`` without an address space) give every lane its own copy.
"""

from __future__ import annotations

import numpy as np
from iree.compiler import ir

from wavec.emulator.interp import KDYN, Compiler, Instr, State, elementwise, no_effect, register, uniform
from wavec.emulator.memory import MemRef, SharedBuf, row_major
from wavec.emulator.types import elem_type
from wavec.errors import EmulatorError


def _mtype(t: ir.Type) -> ir.MemRefType:
    if not isinstance(t, ir.MemRefType):
        raise EmulatorError(message=f"expected a ranked memref type, got {t}")
    return t


def _uniforms(static: list[int], dyn: list[int], st: State, what: str) -> list[int]:
    """Static values with the dynamic ones (which must be uniform) filled in."""
    it = iter(dyn)
    return [uniform(st.env[next(it)], what) if s == KDYN else s for s in static]


def _layout_strides(mt: ir.MemRefType, shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, _ = mt.get_strides_and_offset()
    if any(s == KDYN for s in strides):
        if str(mt.layout).startswith("affine_map"):
            return row_major(shape)
        raise EmulatorError(message=f"dynamic strides in {mt} are not supported")
    return tuple(strides)


def is_workgroup(mt: ir.MemRefType) -> bool:
    space = mt.memory_space
    return space is not None and ("workgroup" in str(space) or str(space).startswith("3"))


@register("hal.interface.binding.subspan")
def _subspan(c: Compiler, op: ir.Operation) -> Instr:
    (o,) = c.outs(op)
    seg = list(op.attributes["operandSegmentSizes"])
    ins = c.ins(op)
    off_slot, dyn = (ins[0] if seg[0] else None), ins[seg[0] :]
    mt = _mtype(op.results[0].type)
    et, binding, loc = elem_type(mt.element_type), op.attributes["binding"].value, c.loc(op)
    static_shape = list(mt.shape)

    def run(st: State) -> None:
        if binding >= len(st.bindings):
            raise EmulatorError(message=f"{loc}: binding {binding} not given")
        off = uniform(st.env[off_slot], "subspan offset") if off_slot is not None else 0
        shape = tuple(_uniforms(static_shape, dyn, st, "subspan size"))
        arr_in = np.asarray(st.bindings[binding])
        if not arr_in.flags.c_contiguous:
            raise EmulatorError(message=f"{loc}: binding {binding} is not contiguous (writes would be lost)")
        raw = arr_in.reshape(-1).view(np.uint8)
        n = et.mem.itemsize
        if off % n or off > raw.size:
            raise EmulatorError(message=f"{loc}: byte offset {off} invalid for binding {binding}")
        arr, strides = raw[off : off + (raw.size - off) // n * n].view(et.mem), _layout_strides(mt, shape)
        extra = {"binding": binding, "byte_offset": off}
        st.env[o] = MemRef(arr, 0, shape, strides, et, f"binding {binding}", extra=extra)

    return run


@register("memref.alloc", "memref.alloca")
def _alloc(c: Compiler, op: ir.Operation) -> Instr:
    dyn, (o,) = c.ins(op), c.outs(op)
    mt = _mtype(op.results[0].type)
    et, shared, static_shape, name = elem_type(mt.element_type), is_workgroup(mt), list(mt.shape), c.loc(op)

    def run(st: State) -> None:
        shape = tuple(_uniforms(static_shape, dyn, st, "alloc size"))
        n = int(np.prod(shape)) if shape else 1
        strides = _layout_strides(mt, shape)
        if shared:
            buf = SharedBuf(n * et.mem.itemsize, name)
            st.shared.append(buf)
            st.env[o] = MemRef(buf.raw.view(et.mem), 0, shape, strides, et, name, buf)
        else:
            arr = np.full(n * st.lanes * et.mem.itemsize, 0xFF, np.uint8).view(et.mem)
            st.env[o] = MemRef(arr, np.arange(st.lanes, dtype=np.int64) * n, shape, strides, et, name)

    return run


def _drop_dims(sizes: list[int], rank: int) -> list[int]:
    """Indices of the kept dims of a rank-reducing subview (unit dims dropped from the left)."""
    keep, surplus = [], len(sizes) - rank
    for i, s in enumerate(sizes):
        if surplus > 0 and s == 1:
            surplus -= 1
            continue
        keep.append(i)
    return keep


def _offsets_sizes_strides(c: Compiler, op: ir.Operation) -> tuple:
    """(source slot, dynamic offsets, sizes, strides, static offsets, sizes, strides) of a view op."""
    ins = c.ins(op)
    seg = list(op.attributes["operandSegmentSizes"])
    d_off, d_size = ins[1 : 1 + seg[1]], ins[1 + seg[1] : 1 + seg[1] + seg[2]]
    d_str = ins[1 + seg[1] + seg[2] :]
    s_off, s_size, s_str = (list(op.attributes[k]) for k in ("static_offsets", "static_sizes", "static_strides"))
    return ins[0], d_off, d_size, d_str, s_off, s_size, s_str


@register("memref.subview")
def _subview(c: Compiler, op: ir.Operation) -> Instr:
    (o,) = c.outs(op)
    src, d_off, d_size, d_str, s_off, s_size, s_str = _offsets_sizes_strides(c, op)
    rank, loc = _mtype(op.results[0].type).rank, c.loc(op)

    def run(st: State) -> None:
        m: MemRef = st.env[src]
        it = iter(d_off)
        offs = [np.asarray(st.env[next(it)], np.int64) if s == KDYN else s for s in s_off]  # may differ per lane
        sizes, strs = _uniforms(s_size, d_size, st, "subview size"), _uniforms(s_str, d_str, st, "subview stride")
        offset = m.offset
        for d, (of, sz, sd) in enumerate(zip(offs, sizes, strs, strict=False)):
            last = np.asarray(of) + (sz - 1) * sd
            bad = ((np.asarray(of) < 0) | (last >= m.shape[d])) & (sz > 0)
            if st.mask is not None and np.ndim(bad) and bad.shape[0] == st.lanes:
                bad = bad & st.mask
            if np.any(bad):
                raise EmulatorError(message=f"{loc}: subview out of bounds of {m.name} in dim {d}")
            offset = offset + np.asarray(of) * m.strides[d]
        keep = _drop_dims(sizes, rank)
        shape = tuple(sizes[i] for i in keep)
        strides = tuple(m.strides[i] * strs[i] for i in keep)
        st.env[o] = MemRef(m.arr, offset, shape, strides, m.et, m.name, m.shared, m.byte_base)

    return run


@register("memref.assume_alignment", "memref.cast", "memref.memory_space_cast")
def _identity(c: Compiler, op: ir.Operation) -> Instr | None:
    return elementwise(c, op, lambda src, *_: src) if op.results else None


register("memref.dealloc")(no_effect)


@register("memref.dim")
def _dim(c: Compiler, op: ir.Operation) -> Instr:
    return elementwise(c, op, lambda m, d: np.array([m.shape[uniform(d, "memref.dim index")]], np.int64))


@register("memref.reinterpret_cast")
def _reinterpret(c: Compiler, op: ir.Operation) -> Instr:
    (o,) = c.outs(op)
    src, d_off, d_size, d_str, s_off, s_size, s_str = _offsets_sizes_strides(c, op)

    def run(st: State) -> None:
        m: MemRef = st.env[src]
        (off,) = _uniforms(s_off, d_off, st, "offset")
        sizes, strs = tuple(_uniforms(s_size, d_size, st, "size")), tuple(_uniforms(s_str, d_str, st, "stride"))
        st.env[o] = MemRef(m.arr, off, sizes, strs, m.et, m.name, m.shared, m.byte_base)

    return run


@register("memref.collapse_shape", "memref.expand_shape")
def _reshape(c: Compiler, op: ir.Operation) -> Instr:
    ins, (o,) = c.ins(op), c.outs(op)
    groups = [[int(i.value) for i in g] for g in op.attributes["reassociation"]]
    collapse = op.name == "memref.collapse_shape"
    out_static = list(_mtype(op.results[0].type).shape)
    if not collapse and "static_output_shape" in op.attributes:
        out_static = list(op.attributes["static_output_shape"])

    def run(st: State) -> None:
        m: MemRef = st.env[ins[0]]
        shape: list[int] = []
        strides: list[int] = []
        if collapse:
            for g in groups:
                shape.append(int(np.prod([m.shape[i] for i in g])))
                strides.append(m.strides[g[-1]] if g else 1)
        else:
            shape = _uniforms(out_static, ins[1:], st, "expand size")
            strides = [0] * len(shape)
            for src_dim, g in enumerate(groups):
                acc = m.strides[src_dim]
                for i in reversed(g):
                    strides[i] = acc
                    acc *= shape[i]
        st.env[o] = MemRef(m.arr, m.offset, tuple(shape), tuple(strides), m.et, m.name, m.shared, m.byte_base)

    return run
