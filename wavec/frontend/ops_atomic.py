"""Atomic read-modify-write ops (DESIGN §12): ``atomic_add``/``atomic_min``/``atomic_max`` of a register
tile into global memory or a ``wc.allocate`` buffer, each element combined with what memory holds, and
``scatter_add`` (Wave's name for an ``atomic_add`` through an index tensor).  The defined way for several
lanes or workgroups to update one address; a plain ``write`` there is a race.  Each returns the values
memory held before (a token's rank within its expert is the old count); an unused result lets NVIDIA
targets issue ``red`` instead of ``atom``.  Lowered by ``wavec/codegen/dynamic_access.py``.

``arrive`` is the ordered counter of the "last workgroup combines" pattern (split-KV decode in one
launch, stream-K fixups): an ``Atomic`` of kind ``"arrive"`` whose lowering (``codegen/arrive.py``)
releases the workgroup's earlier stores before one GPU-scope increment and acquires the other
workgroups' stores after it; its result is a rank-0 "this workgroup arrived last" flag.
"""

from __future__ import annotations

from typing import ClassVar

import sympy

from ..errors import DTypeError, ShapeError
from . import dtypes as dt
from .ops import PRIO_WRITE, Op, _checked_store, register
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
    emulated_ops = (
        "memref.atomic_rmw",
        "llvm.inline_asm",
        "memref.subview",
        "memref.extract_strided_metadata",
        "llvm.fence",
        "gpu.barrier",
        "memref.alloc",
        "memref.store",
        "memref.load",
        "scf.if",
    )  # fmt: skip  (the second line: wc.arrive's fences, barriers and broadcast word)


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


def arrive(counter: Value, mapping: dict | None = None, *, expected) -> Value:
    """Arrive at one element of ``counter`` (global ``Memory`` of i32, the element chosen by ``mapping`` as
    for ``wc.write`` of a rank-0 value: batch dims and ``wc.tile_start`` expressions); returns a rank-0
    boolean, the same in every thread of the workgroup: whether this workgroup is the ``expected``-th
    (last) to arrive there since the counter was last 0.  ``expected``: a positive int or an index
    expression of shape symbols and ``wc.tile_start`` (``SP``: every split of a group).

    Ordering (the "last workgroup combines" pattern): every store the workgroup made before the call
    is visible device-wide before its arrival is counted (every thread fences with release semantics
    at GPU scope, then a workgroup barrier, then ONE atomic increment by one thread), and a workgroup
    that learns it is last sees every store the others made before their arrivals (the atomic is
    acquire-release; after the old value is broadcast through shared memory, every thread fences with
    acquire semantics at GPU scope, so its later loads are not served from a stale L1).  The last
    arrival returns the element to 0 in the same atomic (``atom.inc`` wraps on NVIDIA; AMD stores 0
    after it), so the next launch, and a CUDA-graph replay, finds it at 0: a counter buffer starts
    zeroed once and is then the kernel's own, and two launches running at once (two streams) must not
    share one.  Typical use: ``wc.exit_if(~wc.arrive(counts, mapping=..., expected=SP))`` and the
    combine after it.  At the top level of the kernel body (it holds two workgroup barriers)."""
    tr = active_tracer("arrive")
    loc = current_loc()
    if tr.graph is not tr.root:
        raise ShapeError(loc, op="arrive", message="arrive at the top level of the kernel body, not in a region")
    if isinstance(expected, int) and not isinstance(expected, bool):
        if expected < 1:
            raise ShapeError(loc, op="arrive", message=f"expected must be at least 1, got {expected}")
    elif not isinstance(expected, sympy.Expr):
        raise ShapeError(loc, op="arrive", message=f"expected must be an int or an index expression, got {expected!r}")
    if not isinstance(counter, Value) or counter.type.address_space != AddressSpace.GLOBAL or counter.dtype != dt.i32:
        got = counter.type if isinstance(counter, Value) else repr(counter)
        raise DTypeError(loc, op="arrive", message=f"counter must be a global Memory of i32, got {got}")
    one = register((), dt.i32, 1)
    val, mem, kwargs, idx = _checked_store("arrive", one, counter, mapping)
    if idx:
        raise ShapeError(loc, op="arrive", message="the counter element is chosen by wc.tile_start expressions")
    return tr.create(
        Atomic, (val, mem), TensorType((), dt.i1), kind="arrive", expected=sympy.sympify(expected), **kwargs
    )
