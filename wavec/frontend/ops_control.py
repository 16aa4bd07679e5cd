"""Kernel-owned shared memory and control (DESIGN §12): ``allocate``, ``barrier`` and ``conditional``.
Names follow Wave's (the scans are in ``ops_reduce.py``).

- ``wc.allocate(shape, dtype)`` is the ``Allocate`` record of ``ops.py`` (the one the compiler uses to
  stage tiles) marked ``user=True``: ``promote_to_shared`` sizes it from the constraints, the staging
  passes (padding, multibuffering, buffer sharing, ``cp.async``) leave it alone, ``insert_barriers``
  orders its conflicting accesses.
- ``wc.barrier()`` is the ``Barrier`` record (``gpu.barrier``).
- ``@wc.conditional(cond)`` traces its body as a subgraph, like ``iterate``; it lowers to ``scf.if``.
- ``wc.exit_if(cond)``: a workgroup-uniform early return; no subgraph (the passes see one straight-line
  kernel, so a pipelined GEMM after it keeps its staging); codegen nests the rest in an ``scf.if``.
"""

from __future__ import annotations

from typing import ClassVar

import sympy

from ..errors import DTypeError, ShapeError
from . import dtypes as dt
from .ops import Allocate, Barrier, Op, _need_register
from .tracing import Value, active_tracer, current_loc
from .types import AddressSpace, TensorType


def allocate(shape, dtype: dt.DType, distributed_shape=None, disjoint_writes: bool = False) -> Value:
    """A shared-memory buffer owned by the kernel: ``Memory[*shape, dtype, "shared"]`` for ``wc.read``,
    ``wc.write`` (with ``mapping=``) and the atomics.

    Each dim holds ``distributed_shape[i]`` elements (an int or an expression of ``subs`` symbols), by
    default the dim's workgroup tile (its ``WorkgroupConstraint``, else its ``TilingConstraint``); it is
    indexed by the dim's coordinates relative to the workgroup's tile start (a whole dimension from 0), so
    a workgroup reads back what it wrote at the same coordinates.  Called at the top of the kernel body;
    its contents start undefined; ``insert_barriers`` puts a workgroup barrier between accesses that
    conflict (write then read, read then write, plain and atomic accesses mixed).  ``disjoint_writes``: the
    caller's promise that no two writes since a barrier store different values to one element (a row
    staged piece by piece), so writes need no barrier between them; reads still wait for them."""
    tr = active_tracer("allocate")
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    if not shape or not all(isinstance(d, sympy.Symbol) for d in shape) or len(set(shape)) != len(shape):
        raise ShapeError(current_loc(), op="allocate", message=f"shape must be distinct wc.sym symbols, got {shape!r}")
    if not isinstance(dtype, dt.DType) or dtype == dt.i1:
        raise DTypeError(current_loc(), op="allocate", message=f"dtype must be a wavec value dtype, got {dtype!r}")
    if tr.graph is not tr.root:
        raise ShapeError(
            current_loc(), op="allocate", message="allocate at the top of the kernel body, not in a region"
        )
    kwargs: dict = {"user": True, **({"disjoint_writes": True} if disjoint_writes else {})}
    if distributed_shape is not None:
        ds = tuple(distributed_shape) if isinstance(distributed_shape, (tuple, list)) else (distributed_shape,)
        if len(ds) != len(shape):
            raise ShapeError(
                current_loc(), op="allocate", message=f"distributed_shape {ds!r} needs one extent per dim of {shape}"
            )
        kwargs["distributed_shape"] = tuple(sympy.sympify(x) for x in ds)
    return tr.create(Allocate, (), TensorType(shape, dtype, AddressSpace.SHARED), **kwargs)


def barrier() -> None:
    """A workgroup barrier (``gpu.barrier``): every thread's earlier shared-memory accesses complete before
    any thread's later ones.  ``insert_barriers`` adds the ones the hazards of ``wc.allocate`` buffers
    need; an explicit one stays where it is written."""
    active_tracer("barrier").create(Barrier, (), None)


class Conditional(Op):
    """A region run only where ``cond`` holds (``args = ((cond,) or (), captures)`` like a loop's ``(inits,
    captures)``, ``kwargs["subgraph"]``, or ``kwargs["when"]``): a real
    branch (``scf.if``), so a store inside writes nothing where the condition is false."""

    name = "conditional"
    index_flow: ClassVar[str | None] = "region"  # captured register values share layouts with their placeholders
    expansion = "region"  # the body expands inside the branch; the condition is one element per thread
    lowering = "wavec.codegen.control"
    emulated_ops = ("scf.if", "vector.extract", "arith.cmpi")
    has_result = False


def conditional(cond):
    """Decorator: run the decorated body (no arguments, no result) only where ``cond`` holds.

    ``cond`` is a boolean Register holding one element per thread (Wave's per-thread scalar: e.g. a
    comparison of a ``Register[X, i32]`` whose ``vector_shapes`` give each lane one element of a wave's
    whole tile), a rank-0 boolean (a comparison of ``wc.Scalar`` arguments), or a sympy relation of shape
    symbols and ``wc.tile_start(d)`` (uniform over the workgroup: ``wc.tile_start(J) == 0``).  A condition
    holding several elements per thread is rejected (``ExpansionError``): use ``wc.where`` for
    per-element selection.  The body may read, write, use atomics and nest regions; ``wc.barrier`` inside
    it would be divergent and is rejected."""
    tr = active_tracer("conditional")
    loc = current_loc()
    kwargs: dict = {}
    if isinstance(cond, Value):
        cond = _need_register("conditional", "cond", cond)
        if cond.dtype != dt.i1:
            raise DTypeError(loc, op="conditional", message=f"cond must be a comparison result, got {cond.dtype}")
        args: tuple = (cond,)
    elif isinstance(cond, sympy.Rel):
        args, kwargs["when"] = (), cond
    else:
        raise ShapeError(
            loc, op="conditional", message=f"cond must be an i1 Register or a sympy relation, got {cond!r}"
        )

    def deco(body) -> None:
        name = f"conditional_{len(tr.subgraphs)}"
        g = tr.push(name)
        if body() is not None:
            raise ShapeError(loc, op="conditional", message="the body of a conditional returns nothing")
        for n in g.nodes:
            if n.meta.get("op") is Barrier:
                raise ShapeError(n.meta.get("loc"), op="barrier", message="a barrier inside wc.conditional diverges")
        g.output(None)
        tr.pop()
        captures = tuple(tr.captures.get(g, {}).keys())
        tr.create(Conditional, (args, captures), None, loc=loc, subgraph=name, **kwargs)

    return deco


class ExitIf(Op):
    """``wc.exit_if(cond)`` (``args = (cond,)``, a rank-0 boolean): the workgroup skips everything after it
    where ``cond`` holds.  It has no region: the nodes after it stay in the root graph, and its lowering
    (``codegen/control.py``) emits them inside ``scf.if (not cond)``; barriers there are uniform."""

    name = "exit_if"
    lowering = "wavec.codegen.control"
    emulated_ops = ("scf.if", "vector.extract", "arith.xori")
    has_result = False


def exit_if(cond) -> None:
    """Return early from the kernel, for the whole workgroup, where the rank-0 boolean ``cond`` holds
    (``cond`` is one value per workgroup: a comparison of a value read at ``wc.tile_start`` coordinates
    or of ``wc.Scalar`` arguments).  Unlike ``wc.conditional``, the code after it is not a region: loops
    after it are staged and pipelined as usual.  At the top level of the kernel body only, once."""
    tr = active_tracer("exit_if")
    loc = current_loc()
    cond = _need_register("exit_if", "cond", cond)
    if cond.dtype != dt.i1 or cond.shape:
        raise ShapeError(loc, op="exit_if", message=f"cond must be a rank-0 comparison result, got {cond.type}")
    if tr.graph is not tr.root:
        raise ShapeError(loc, op="exit_if", message="exit_if at the top level of the kernel body, not in a region")
    if any(n.meta.get("op") is ExitIf for n in tr.root.nodes):
        raise ShapeError(loc, op="exit_if", message="a kernel takes one exit_if")
    tr.create(ExitIf, (cond,), None, loc=loc)
