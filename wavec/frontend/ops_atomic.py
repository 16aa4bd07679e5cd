"""Atomic read-modify-write ops (DESIGN §12): ``atomic_add``/``atomic_min``/``atomic_max`` of a register
tile into global memory or a ``wc.allocate`` buffer, each element combined with what memory holds, and
``scatter_add`` (Wave's name for an ``atomic_add`` through an index tensor).  The defined way for several
lanes or workgroups to update one address; a plain ``write`` there is a race.  Each returns the values
memory held before (a token's rank within its expert is the old count); an unused result lets NVIDIA
targets issue ``red`` instead of ``atom``.  Lowered by ``wavec/codegen/dynamic_access.py``.
"""

from __future__ import annotations

from typing import ClassVar

from ..errors import DTypeError, ShapeError
from . import dtypes as dt
from .ops import PRIO_WRITE, Op, _checked_store
from .tracing import Value, active_tracer, current_loc
from .types import AddressSpace, TensorType

ATOMIC_KINDS = ("add", "min", "max")
# every kind and space: f16/bf16 adds of pairs along the last dim are one packed f16x2/bf16x2 reduction
# where the target has one; the rest are compare-and-swap loops (the lowering's docstring)
ATOMIC_DTYPES = (dt.f32, dt.i32, dt.f16, dt.bf16)


class Atomic(Op):
    """``memory[idx] = memory[idx] <kind> value`` per element (``kwargs["kind"]``); the result is the old
    ``memory[idx]`` (``value``'s shape and dtype, the same layout)."""

    name = "atomic"
    anchor, anchor_priority = "written_value", PRIO_WRITE
    index_flow: ClassVar[str | None] = "atomic"  # indexed_access, and the old values in the value's layout
    memory_arg = 1
    writes_memory = True
    lowering = "wavec.codegen.dynamic_access"
    emulated_ops = ("memref.atomic_rmw", "llvm.inline_asm", "memref.subview", "memref.extract_strided_metadata")


def _atomic(kind: str, value: Value, memory: Value, mapping: dict | None) -> Value:
    op = f"atomic_{kind}"
    val, mem, kwargs, idx = _checked_store(op, value, memory, mapping)
    user_buffer = bool(mem.node.kwargs.get("user"))
    if mem.type.address_space != AddressSpace.GLOBAL and not user_buffer:
        raise ShapeError(current_loc(), op=op, message="atomics update global Memory arguments or wc.allocate buffers")
    if val.dtype not in ATOMIC_DTYPES:
        allowed = ", ".join(d.name for d in ATOMIC_DTYPES)
        raise DTypeError(current_loc(), op=op, message=f"{op} takes {allowed} values, got {val.dtype}; use wc.cast")
    return active_tracer(op).create(
        Atomic, (val, mem, *idx), TensorType(val.type.shape, val.dtype), kind=kind, **kwargs
    )


def atomic_add(value: Value, memory: Value, mapping: dict | None = None) -> Value:
    """``memory += value`` elementwise, atomically (``mapping`` as for ``wc.read``); returns the values
    memory held before each update (f32, i32, f16, bf16)."""
    return _atomic("add", value, memory, mapping)


def atomic_min(value: Value, memory: Value, mapping: dict | None = None) -> Value:
    """``memory = min(memory, value)`` elementwise, atomically; returns the old values (f32, i32, f16,
    bf16)."""
    return _atomic("min", value, memory, mapping)


def atomic_max(value: Value, memory: Value, mapping: dict | None = None) -> Value:
    """``memory = max(memory, value)`` elementwise, atomically; returns the old values (f32, i32, f16,
    bf16)."""
    return _atomic("max", value, memory, mapping)


def scatter_add(value: Value, memory: Value, mapping: dict) -> Value:
    """``memory[mapping] += value`` atomically, where ``mapping`` holds at least one index tensor
    (``wc.scatter_add(rows, out, mapping={T: ids})`` is ``out.index_add_(0, ids, rows)``); returns the
    old values."""
    if not any(isinstance(e, Value) for e in (mapping or {}).values()):
        raise ShapeError(current_loc(), op="scatter_add", message="mapping needs an index tensor; use wc.atomic_add")
    return _atomic("add", value, memory, mapping)
