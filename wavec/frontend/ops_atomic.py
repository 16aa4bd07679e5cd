"""Atomic read-modify-write ops (DESIGN §12): ``atomic_add``/``atomic_min``/``atomic_max`` of a register
tile into global memory, each element combined with what memory holds, and ``scatter_add`` (Wave's name
for an ``atomic_add`` through an index tensor).  The defined way for several lanes or workgroups to
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
    """``memory[idx] = memory[idx] <kind> value`` per element (``kwargs["kind"]``), the result unused."""

    name = "atomic"
    anchor, anchor_priority = "written_value", PRIO_WRITE
    index_flow: ClassVar[str | None] = "indexed_access"
    memory_arg = 1
    has_result = False
    lowering = "wavec.codegen.dynamic_access"
    emulated_ops = ("memref.atomic_rmw",)


def _atomic(kind: str, value: Value, memory: Value, mapping: dict | None) -> None:
    op = f"atomic_{kind}"
    val, mem, kwargs, idx = _checked_store(op, value, memory, mapping)
    if mem.type.address_space != AddressSpace.GLOBAL:
        raise ShapeError(current_loc(), op=op, message="atomics update global Memory arguments")
    if val.dtype not in ATOMIC_DTYPES:
        raise DTypeError(
            current_loc(), op=op, message=f"atomics take f32 or i32 values, got {val.dtype}; use wc.cast to f32"
        )
    active_tracer(op).create(Atomic, (val, mem, *idx), None, kind=kind, **kwargs)


def atomic_add(value: Value, memory: Value, mapping: dict | None = None) -> None:
    """``memory += value`` elementwise, atomically (``mapping`` as for ``wc.read``)."""
    _atomic("add", value, memory, mapping)


def atomic_min(value: Value, memory: Value, mapping: dict | None = None) -> None:
    """``memory = min(memory, value)`` elementwise, atomically."""
    _atomic("min", value, memory, mapping)


def atomic_max(value: Value, memory: Value, mapping: dict | None = None) -> None:
    """``memory = max(memory, value)`` elementwise, atomically."""
    _atomic("max", value, memory, mapping)


def scatter_add(value: Value, memory: Value, mapping: dict) -> None:
    """``memory[mapping] += value`` atomically, where ``mapping`` holds at least one index tensor
    (``wc.scatter_add(rows, out, mapping={T: ids})`` is ``out.index_add_(0, ids, rows)``)."""
    if not any(isinstance(e, Value) for e in (mapping or {}).values()):
        raise ShapeError(current_loc(), op="scatter_add", message="mapping needs an index tensor; use wc.atomic_add")
    _atomic("add", value, memory, mapping)
