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

import numpy as np
import sympy
import torch.fx as fx

from ..errors import DTypeError, ShapeError
from . import dtypes as dt
from .tracing import Tracer, Value, current_loc

INDEX_DTYPES = (dt.i32, dt.i64)


def _static_ok(e) -> bool:
    """A tile-start expression, or a constant (``{ONE: 0}``: a rank-0 value stored at one element)."""
    e = sympy.sympify(e)
    return e.is_Integer or any(s.name.startswith(("$TILE_START_", "$ARG_")) for s in e.free_symbols)


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


_SAMPLE = 8  # every size and register extent when a write map is evaluated for a counterexample
_NUMPY_BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "floordiv": np.floor_divide, "mod": np.mod,
    "maximum": np.maximum, "minimum": np.minimum,
}  # fmt: skip


def _evaluate(node, dims: tuple, grid: list, sizes: dict):
    """The integer value of a traced index expression at every point of the register grid (``grid[i]``:
    the coordinates along ``dims[i]``), or None where it depends on anything but coordinates, numbers and
    shape symbols (a read: data)."""
    from .ops import Arange, Binary, Cast

    if isinstance(node, (int, np.integer)):
        return np.full(grid[0].shape, int(node), dtype=np.int64) if grid else None
    if isinstance(node, sympy.Expr):
        got = node.subs(sizes)
        return np.full(grid[0].shape, int(got), dtype=np.int64) if got.is_Integer and grid else None
    if not isinstance(node, fx.Node):
        return None
    op = node.meta.get("op")
    if op is Arange:
        dim = node.kwargs["dim"]
        return grid[dims.index(dim)] if dim in dims else None
    if op is Cast:
        return _evaluate(node.args[0], dims, grid, sizes)
    kind = str(node.kwargs.get("kind"))
    if op is Binary and kind in _NUMPY_BINARY:
        a, b = (_evaluate(x, dims, grid, sizes) for x in node.args[:2])
        if a is None or b is None or (kind in ("floordiv", "mod") and not b.all()):
            return None
        return _NUMPY_BINARY[kind](a, b)
    return None


def check_injective(op: str, value: Value, mem: Value, dynamic: dict, batch_dims) -> None:
    """Raise a ``ShapeError`` when a write map sends two register elements to one memory element for
    every size equal to ``_SAMPLE`` (a counterexample: a race whatever the launch); maps of data (index
    tensors) and maps that give no counterexample pass."""
    dims = tuple(value.shape)
    if not dynamic or not dims:
        return
    grid = list(np.meshgrid(*[np.arange(_SAMPLE, dtype=np.int64)] * len(dims), indexing="ij"))
    sizes = {sym: _SAMPLE for d in mem.type.dims for sym in sympy.sympify(d).free_symbols}
    coords = []
    for d in mem.type.dims:
        if d in dynamic:
            got = _evaluate(dynamic[d].node, dims, grid, sizes)
            if got is None:
                return
            coords.append(got.reshape(-1))
        elif d in dims:
            coords.append(grid[dims.index(d)].reshape(-1))
        elif d not in batch_dims:
            return
    points = np.stack(coords, axis=1)
    _, first, counts = np.unique(points, axis=0, return_index=True, return_counts=True)
    if (counts == 1).all():
        return
    clash = points[first[counts > 1][0]]
    same = np.nonzero((points == clash).all(axis=1))[0][:2]
    where = [", ".join(f"{d}={int(g.reshape(-1)[i])}" for d, g in zip(dims, grid)) for i in same]
    at = ", ".join(str(int(c)) for c in clash)
    raise ShapeError(
        current_loc(),
        op=op,
        message=f"the mapping is not one-to-one: with every size {_SAMPLE}, elements ({where[0]}) and ({where[1]}) "
        f"both write element [{at}] of {mem.node.name} (a race); use wc.atomic_add to combine them",
    )


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
