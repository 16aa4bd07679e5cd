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
