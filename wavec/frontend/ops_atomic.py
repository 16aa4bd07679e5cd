"""Atomic read-modify-write ops (DESIGN §12): ``atomic_add``/``atomic_min``/``atomic_max`` of a register
tile into global memory or a ``wc.allocate`` buffer, each element combined with what memory holds, each
returning the values it replaced (a Register like ``value``: a histogram's ranks), and ``scatter_add``
(Wave's name for an ``atomic_add`` through an index tensor).  The defined way for several lanes or workgroups to
update one address; a plain ``write`` there is a race.  Lowered by ``wavec/codegen/dynamic_access.py``.
"""

from __future__ import annotations

from typing import ClassVar

from ..errors import DTypeError, ShapeError
from . import dtypes as dt
from .ops import PRIO_WRITE, Op, _checked_store
from .tracing import Value, active_tracer, current_loc
from .types import AddressSpace

ATOMIC_KINDS = ("add", "min", "max")
ATOMIC_DTYPES = (dt.f32, dt.i32)


class Atomic(Op):
    """``memory[idx] = memory[idx] <kind> value`` per element (``kwargs["kind"]``); its value is what memory
    held before (unused: NVIDIA's backend may issue a ``red``)."""

    name = "atomic"
    anchor, anchor_priority = "written_value", PRIO_WRITE
    index_flow: ClassVar[str | None] = "atomic"  # indexed_access, and the old values in the value's layout
    memory_arg = 1
    lowering = "wavec.codegen.dynamic_access"
    emulated_ops = ("memref.atomic_rmw",)


def _atomic(kind: str, value: Value, memory: Value, mapping: dict | None) -> Value:
    op = f"atomic_{kind}"
    val, mem, kwargs, idx = _checked_store(op, value, memory, mapping)
    if mem.type.address_space != AddressSpace.GLOBAL and not mem.node.kwargs.get("user"):
        raise ShapeError(current_loc(), op=op, message="atomics update global Memory arguments or wc.allocate buffers")
    if val.dtype not in ATOMIC_DTYPES:
        raise DTypeError(
            current_loc(), op=op, message=f"atomics take f32 or i32 values, got {val.dtype}; use wc.cast to f32"
        )
    return active_tracer(op).create(Atomic, (val, mem, *idx), val.type, kind=kind, **kwargs)


def atomic_add(value: Value, memory: Value, mapping: dict | None = None) -> Value:
    """``memory += value`` elementwise, atomically (``mapping`` as for ``wc.read``); returns the values
    memory held before."""
    return _atomic("add", value, memory, mapping)


def atomic_min(value: Value, memory: Value, mapping: dict | None = None) -> Value:
    """``memory = min(memory, value)`` elementwise, atomically; returns the values memory held before."""
    return _atomic("min", value, memory, mapping)


def atomic_max(value: Value, memory: Value, mapping: dict | None = None) -> Value:
    """``memory = max(memory, value)`` elementwise, atomically; returns the values memory held before."""
    return _atomic("max", value, memory, mapping)


def scatter_add(value: Value, memory: Value, mapping: dict) -> Value:
    """``memory[mapping] += value`` atomically, where ``mapping`` holds at least one index tensor
    (``wc.scatter_add(rows, out, mapping={T: ids})`` is ``out.index_add_(0, ids, rows)``)."""
    if not any(isinstance(e, Value) for e in (mapping or {}).values()):
        raise ShapeError(current_loc(), op="scatter_add", message="mapping needs an index tensor; use wc.atomic_add")
    return _atomic("add", value, memory, mapping)
