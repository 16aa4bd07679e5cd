"""``memref.alloc``/``alloca`` and ``hal.interface.binding.subspan``: the memrefs a kernel accesses (scalar
loads/stores are handled with vector ones, in ``ops_vector``).

Workgroup allocations (``#gpu.address_space<workgroup>``) are one buffer per workgroup, filled with
0xFF bytes (NaN for floats, -1 for ints) so that a read of a never-written element shows.  Private
allocations (``memref.alloca`` without an address space) give every lane its own copy.
"""

from __future__ import annotations

import numpy as np
from iree.compiler import ir

from wavec.emulator.interp import KDYN, Compiler, Instr, State, register, uniform
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


@register("memref.reinterpret_cast")
def _reinterpret_cast(c: Compiler, op: ir.Operation) -> Instr:
    """The view of a flat binding with its launch sizes and strides (a strided variant's arguments,
    ``codegen/emitter.py``): every element it can address must lie in the binding, so a stride or size the
    launcher got wrong is an error here, not a silent read of other memory."""
    ins, (o,), loc = c.ins(op), c.outs(op), c.loc(op)
    seg = list(op.attributes["operandSegmentSizes"])
    src = ins[0]
    dyn_off, dyn_sizes = ins[1 : 1 + seg[1]], ins[1 + seg[1] : 1 + seg[1] + seg[2]]
    dyn_strides = ins[1 + seg[1] + seg[2] :]
    offset = list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]))
    sizes = list(ir.DenseI64ArrayAttr(op.attributes["static_sizes"]))
    strides = list(ir.DenseI64ArrayAttr(op.attributes["static_strides"]))

    def run(st: State) -> None:
        m = st.env[src]
        off = _uniforms(offset, list(dyn_off), st, "reinterpret_cast offset")[0]
        shape = tuple(_uniforms(sizes, list(dyn_sizes), st, "reinterpret_cast size"))
        steps = tuple(_uniforms(strides, list(dyn_strides), st, "reinterpret_cast stride"))
        if any(s < 0 for s in steps) or off < 0:
            raise EmulatorError(message=f"{loc}: negative stride or offset in {steps}, {off}")
        base = int(np.asarray(m.offset).reshape(-1)[0]) + off
        reach = base + sum((n - 1) * s for n, s in zip(shape, steps)) if all(shape) else base - 1
        if reach >= m.arr.size:
            raise EmulatorError(
                message=f"{loc}: a view of shape {shape} and strides {steps} reaches element {reach} of "
                f"{m.name}, which has {m.arr.size}"
            )
        st.env[o] = MemRef(m.arr, base, shape, steps, m.et, m.name, m.shared, m.extra)

    return run
