"""Index mappings of memory accesses (DESIGN §12): ``read``/``write``/atomics take ``mapping={dim: e}``.

``e`` is either a *static* expression of batch coordinates (``wc.tile_start(H) // G``) and shape
symbols (or a constant), which indexes ``dim`` with one coordinate per workgroup and drops it from the registers, or a
*dynamic* index: a ``Register`` of i32/i64 values (read from an index tensor, ``wc.index(d)``, integer
arithmetic of those).  A dynamic index replaces ``dim`` by the index value's own dimensions: reading
``x: Memory[T, K]`` at ``{T: ids}`` with ``ids: Register[M, i32]`` gives ``Register[M, K]`` whose row
``m`` is row ``ids[m]`` of ``x``.  The index value takes the access's layout restricted to its dims
(``infer_indices``), so each thread holds the indices of the rows it touches, once per row.

Requires: the active tracer.  Guarantees: :func:`split_mapping` returns the static part, the dynamic part
(memory dim -> index value, in memory-dim order) and the register shape of the access, or raises a
``ShapeError``/``DTypeError`` naming the mapping key.
"""

from __future__ import annotations

from typing import cast

import sympy
import torch.fx as fx

from ..errors import DTypeError, ShapeError
from . import dtypes as dt
from .tracing import Tracer, Value, current_loc

INDEX_DTYPES = (dt.i32, dt.i64)


def _static_ok(e) -> bool:
    """A tile-start expression, or a constant (``{ONE: 0}``: a rank-0 value stored at one element)."""
    e = sympy.sympify(e)
    return e.is_Integer or any(s.name.startswith("$TILE_START_") for s in e.free_symbols)


def split_mapping(tr: Tracer, op: str, mem: Value, mapping: dict | None) -> tuple[dict, dict, tuple]:
    """(static mapping, dynamic mapping, register shape) of an access to ``mem`` through ``mapping``."""
    static: dict = {}
    dynamic: dict = {}
    for d, e in (mapping or {}).items():
        if d not in mem.type.dims:
            raise ShapeError(current_loc(), op=op, message=f"mapping key {d} is not a dimension of {list(mem.shape)}")
        if isinstance(e, Value):
            if e.type.address_space is not None:
                raise ShapeError(current_loc(), op=op, message=f"mapping[{d}] is a Memory argument; wc.read it first")
            if e.dtype not in INDEX_DTYPES:
                raise DTypeError(
                    current_loc(), op=op, message=f"mapping[{d}] must hold i32 or i64 indices, not {e.dtype}"
                )
            if not e.shape:
                raise ShapeError(current_loc(), op=op, message=f"mapping[{d}] is a scalar; index with a tensor")
            dynamic[d] = e
        elif isinstance(e, (int, sympy.Expr)) and _static_ok(e):
            static[d] = sympy.sympify(e)
        else:
            raise ShapeError(
                current_loc(),
                op=op,
                message=f"mapping[{d}] = {e!r} must be an index tensor (a Register of i32/i64, e.g. wc.read(ids) "
                "or wc.index(S) // PAGE) or an expression of wc.tile_start(batch dim) coordinates",
            )
    shape: list = []
    for d in mem.type.dims:
        if d in dynamic:
            shape += [x for x in dynamic[d].type.dims if x not in shape]
        elif d not in tr.batch_dims and d not in static and d not in shape:
            shape.append(d)
    dynamic = {d: dynamic[d] for d in mem.type.dims if d in dynamic}
    return static, dynamic, tuple(shape)


def memory_operand(node: fx.Node) -> fx.Node:
    """The memory an access node reads or writes (its op record's ``memory_arg``)."""
    return node.args[node.meta["op"].memory_arg]


def index_operands(node: fx.Node) -> dict:
    """The dynamic index values of an access node: memory dim -> index node (``kwargs["dynamic"]`` names
    the dims; their values are the node's trailing args)."""
    dims = cast(tuple, node.kwargs.get("dynamic") or ())
    return dict(zip(dims, node.args[len(node.args) - len(dims) :]))


def access_dims(node: fx.Node) -> tuple:
    """The register dims through which an access (with its layout) addresses memory, in memory-dim
    order: its held memory dims, and in place of each dynamically mapped dim its index value's dims."""
    dyn, held = index_operands(node), node.meta["layout"].dims
    out: list = []
    for d in memory_operand(node).meta["type"].shape:
        new = dyn[d].meta["type"].dims if d in dyn else ((d,) if d in held else ())
        out += [x for x in new if x not in out]
    return tuple(out)


def access_kwargs(static: dict, dynamic: dict) -> dict:
    """The kwargs that record a mapping on an access node (its index values are its trailing args)."""
    out: dict = {}
    if static:
        out["mapping"] = static
    if dynamic:
        out["dynamic"] = tuple(dynamic)
    return out
