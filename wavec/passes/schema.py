"""The IR schema: every ``node.meta`` and ``node.kwargs`` key the tracer or a pass writes, declared once.

Each key is a field of one frozen record below: its annotation is the value's type, ``by(...)`` names the
passes that create it (``TRACE`` = the tracer; passes that only copy meta onto clones are not producers).
``verify.verify_trace`` checks between passes that every key is declared, typed as declared and produced
by a pass that already ran.  A new key: a field of its record (or a new record listed in ``META`` /
``KWARGS``).  Requires: the frontend and indexing types.  Guarantees: ``META`` and ``KWARGS`` map each key
to its :class:`Key`; a key declared twice in one namespace fails at import.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field, fields
from functools import cache
from typing import Any, Literal, TypeAlias, Union, cast, get_args, get_origin, get_type_hints

import sympy
import torch.fx as fx

from ..errors import SourceLoc
from ..frontend.dtypes import DType
from ..frontend.tracing import Trace
from ..frontend.types import TensorType
from ..indexing import Layout
from ..indexing.shared_layout import SharedLayout

TRACE = "trace"  # the producer name of what the tracer writes (it always ran)
Expr: TypeAlias = int | sympy.Expr  # an index expression or a plain integer
Dims = tuple[sympy.Symbol, ...]


def by(*passes: str) -> Any:
    """A field created by ``passes`` (a key is legal once one of them ran)."""
    return field(metadata={"producers": passes})


# ----- node.meta -----


@dataclass(frozen=True, slots=True)
class Traced:
    """What the tracer writes: every node's op, type and source line; placeholders' role."""

    op: Any = by(TRACE)  # the op (frontend.ops); None on placeholders
    type: TensorType | None = by(TRACE)  # None for ops without a value (write, barrier, ...)
    loc: SourceLoc | None = by(TRACE)
    role: Literal["memory", "scalar", "iter_arg", "capture"] = by(TRACE)  # placeholders only
    arg_index: int = by(TRACE)  # memory arguments: position among the kernel's Memory arguments
    scalar_index: int = by(TRACE)  # scalar arguments: position among the scalars
    promote: bool = by(TRACE)  # Memory[..., "shared"]: stage this argument through shared memory
    index: int = by(TRACE)  # iter_args: position in the loop's init list
    capture_of: fx.Node = by(TRACE)  # capture placeholders: the enclosing graph's value


@dataclass(frozen=True, slots=True)
class Indexed:
    """Layouts (DESIGN §3) and expansion (§4)."""

    layout: Layout = by("infer_indices")
    layout_prio: int = by("infer_indices")  # the anchor priority the layout came from
    mma_role: Literal["a", "b", "c"] = by("infer_indices")  # operand of an mma (A, B, accumulator)
    convert_id: int = by("convert_layouts")  # numbers the conversions (shared scratch of via=shared)
    key: tuple[tuple[sympy.Symbol, int], ...] = by("expand")  # instruction-tile position per dim
    finalize: bool = by("expand")  # the last partial reduction of an output tile
    a_in_registers: bool = by("layout_wgmma_operands")  # wgmma with A from registers


@dataclass(frozen=True, slots=True)
class Access:
    """How a read/write touches memory: distribution, instruction choice, runs, bounds."""

    distribute: Literal["workgroup"] = by("promote_to_shared")  # a tile copy spread over the workgroup
    staging: bool = by("promote_to_shared")  # the global read / shared write of a staged tile
    index_scope: Literal["workgroup"] = by("index_chains")  # index values of a workgroup-distributed copy
    copy_layout: SharedLayout = by("layout_wgmma_operands")  # the shared layout the tile copy follows
    access: Literal["ldmatrix", "descriptor"] = by("coarsen_loads")  # else vector loads/stores
    accesses: list[tuple[int, int, dict[sympy.Symbol, Expr]]] = by("coarsen_loads")  # (first, len, offset)
    alignments: list[int] = by("coarsen_loads")  # proven byte alignment of each run
    mma_dims: tuple[sympy.Symbol, sympy.Symbol] = by("coarsen_loads")  # ldmatrix: the (row, k) dims
    transpose: bool = by("coarsen_loads")  # ldmatrix.trans
    pair_with: fx.Node = by("coarsen_loads")  # the B fragment this read's ldmatrix.x4 also loads
    paired_by: fx.Node = by("coarsen_loads")  # the read whose ldmatrix.x4 loads this one
    mask_dims: Dims = by("mask_bounds")  # dims whose bound the access tests
    clamp_dims: Dims = by("mask_bounds")  # dims clamped to the last row instead of masked
    narrow: list[dict[str, Any]] = by("widen_stores")  # the meta of the writes a WideStore replaced


@dataclass(frozen=True, slots=True)
class Staging:
    """Software pipelining (``pipeline_loops``, its TMA form in ``hopper.pipeline_tma``)."""

    stage: Expr = by("pipeline_loops")  # the multibuffer stage an access uses
    iv_subs: dict[sympy.Symbol, Expr] = by("pipeline_loops")  # induction variable -> prefetched iteration
    mapping: dict[sympy.Symbol, Expr] | None = by("pipeline_loops")  # an async copy's read mapping
    mappings: tuple[Mapping[sympy.Symbol, Expr] | None, ...] = by("pipeline_loops")  # per TMA map
    maps: tuple[int, ...] = by("pipeline_loops")  # a TMA fill's tensor maps (ctx.tensor_maps indices)
    multicast: tuple[bool, ...] = by("pipeline_loops")  # per TMA map: a cluster's shared tile, half per workgroup
    mbarriers: fx.Node = by("pipeline_loops", "warp_specialize", "persistent_grid")  # the MBarrierInit
    wgmma_groups_in_flight: int = by("pipeline_loops")  # iterate: wgmma groups left running per iteration
    stage_start: Expr = by("pipeline_loops")  # iterate: its first stage (loops sharing one set of mbarriers)
    iterations: Expr = by("pipeline_loops")  # MBarrierInit: iterations of the loops pipelined on it so far
    tiles: tuple[fx.Node, ...] = by("pipeline_loops")  # mbarrier wait / arrive: the stage group's shared tiles


# ----- node.kwargs -----


@dataclass(frozen=True)  # no slots: Kwargs combines them
class OpArgs:
    """The DSL call's parameters (the tracer), and the same on nodes passes create."""

    dim: sympy.Symbol = by(TRACE, "pipeline_loops", "warp_specialize")
    dims: Dims = by(TRACE)  # permute: the new order
    kind: str = by(TRACE)  # unary/binary/reduce: the operation
    dtype: DType = by(TRACE)  # cast: the result type
    shape: tuple[Expr, ...] = by(TRACE)  # broadcast: the result shape
    index: int = by(TRACE)  # get_result: which loop result
    value: int | float = by(TRACE)  # register: the initial value
    subgraph: str = by(TRACE, "warp_specialize")  # the body's name in Trace.subgraphs
    start: Expr = by(TRACE, "warp_specialize")  # loop bounds in coordinates
    end: Expr = by(TRACE)
    mapping: dict[sympy.Symbol, Expr] = by(TRACE)  # read: memory dim -> index expression
    dynamic: Dims = by(TRACE, "pipeline_loops")  # accesses: memory dims indexed by the trailing args
    elements_per_thread: int | None = by(TRACE)
    part: Literal["value", "index"] = by(TRACE)  # arg_unpack: which half of an arg-reduction's key
    exclusive: bool = by(TRACE)  # scan: element i combines the elements before i only
    k_dim: sympy.Symbol = by(TRACE)  # topk: the new dimension of the k winners (bound to k in subs)
    expected: Expr = by(TRACE)  # arrive: the arrivals that complete a round (an index expression)


@dataclass(frozen=True)  # no slots: Kwargs combines them
class SharedArgs:
    """Shared tiles (``allocate``), layout conversions and copy-group waits."""

    user: bool = by(TRACE)  # a wc.allocate buffer: staging passes (pad, stages, sharing, cp.async) leave it alone
    distributed_shape: tuple[Expr, ...] = by(TRACE)  # wc.allocate's extents per dim (else the dims' tiles)
    disjoint_writes: bool = by(TRACE)  # wc.allocate: its writes need no barrier between them (insert_barriers)
    when: sympy.Rel = by(TRACE)  # conditional: a workgroup-uniform relation of shape symbols and tile starts
    tile: dict[sympy.Symbol, int] = by("promote_to_shared")  # extent per dim
    base: dict[sympy.Symbol, Expr] = by("promote_to_shared")  # the tile's origin in the memory
    pad: int = by("promote_to_shared")  # elements of padding per row
    stages: int = by("promote_to_shared")  # multibuffer depth
    smem_layout: SharedLayout = by("layout_wgmma_operands", "swizzle_shared")
    via: Literal["registers", "shared"] = by("convert_layouts")
    pending: int = by("pipeline_loops", "share_shared_buffers", "insert_wgmma_fences")  # groups in flight
    drain: bool = by("share_shared_buffers")  # wait for all copies between two loops


@dataclass(frozen=True)  # no slots: Kwargs combines them
class HopperArgs:
    """mbarriers and TMA fills (``pipeline_loops``), and the Hopper wing's ops."""

    count: int = by("pipeline_loops")  # full mbarriers (one per stage)
    empty_arrivals: int = by("pipeline_loops")  # arrivals per empty mbarrier (0: none)
    stage: Expr = by("pipeline_loops", "persistent_grid")
    parity: Expr = by("pipeline_loops")
    war: Literal["barrier", "mbarrier"] = by("pipeline_loops")  # how the stage's reuse is ordered
    iteration: Expr = by("pipeline_loops", "persistent_grid")
    stop: Expr | None = by("pipeline_loops", "warp_specialize")
    refill_from: Expr = by("pipeline_loops")
    refill_index: Expr = by("pipeline_loops")
    empty_parity: Expr = by("pipeline_loops")
    first: Expr = by("pipeline_loops", "persistent_grid")
    bar_offset: int = by("pipeline_loops")  # a stage group's first mbarrier (K and V apart: S per group)
    retire: tuple[fx.Node, ...] = by("insert_wgmma_fences")  # accumulators a wgmma wait completes
    consumers: int = by("warp_specialize")  # consumer threads
    regs: tuple[int, int] = by("warp_specialize")  # setmaxnreg of (producer, consumer)
    fence_maps: bool = by("warp_specialize")
    action: Literal["sync", "arrive"] = by("pingpong_warpgroups")  # named_barrier: bar.sync or bar.arrive
    turn: Literal["mine", "other"] = by("pingpong_warpgroups")  # named_barrier: whose barrier
    threads: int = by("pingpong_warpgroups")  # named_barrier: threads per phase
    only: int = by("pingpong_warpgroups")  # named_barrier: the one consumer warpgroup that executes it
    loops: tuple[tuple[str, Expr, Expr], ...] = by("warp_specialize")  # producer: (region, start, stop) each
    cluster: bool = by("pipeline_loops")  # MBarrierInit: a 2-workgroup cluster (a cluster barrier after init)
    remote: bool = by("pipeline_loops")  # MBarrierArrive: also arrive on the cluster peer's empty mbarrier
    tiles: Expr = by("persistent_grid")
    remap: dict[sympy.Symbol, Expr] = by("persistent_grid")
    barrier: bool = by("persistent_grid")


def op_node(g: fx.Graph, op: Any, args: tuple, kwargs: dict, name: str, loc: SourceLoc | None, **meta: Any) -> fx.Node:
    """A new ``op`` node at ``g``'s insertion point (or ``before=`` / ``after=`` a node) carrying the meta every
    op node has (``type`` None unless given: most ops passes insert produce no value) plus ``meta``."""
    before, after = meta.pop("before", None), meta.pop("after", None)
    with g.inserting_before(before) if before is not None else g.inserting_after(after) if after else nullcontext():
        n = g.create_node("call_function", op, args, kwargs, name=name)
    n.meta.update({"op": op, "type": None, "loc": loc, **meta})
    return n


def capture_into(body: fx.Graph, loop: fx.Node, outer: fx.Node) -> fx.Node:
    """A new capture placeholder of ``outer`` in ``body`` (after its placeholders), appended to the loop's
    captured values."""
    last = [n for n in body.nodes if n.op == "placeholder"][-1]
    with body.inserting_after(last):
        ph = body.placeholder(f"capture_{outer.name}")
    ph.meta.update(outer.meta, role="capture", capture_of=outer, op=None)
    loop.args = (loop.args[0], tuple(cast(tuple, loop.args[1])) + (outer,))
    return ph


@dataclass(frozen=True, slots=True)
class Key:
    name: str
    type: Any
    producers: tuple[str, ...]
    record: str
    check: Callable[[object], bool]  # conforms(value, type), compiled once


def _declare(*records: type) -> dict[str, Key]:
    keys: dict[str, Key] = {}
    for rec in records:
        hints = get_type_hints(rec)
        for f in fields(rec):
            if f.name in keys:
                raise TypeError(f"IR schema: {f.name} declared in {keys[f.name].record} and {rec.__name__}")
            keys[f.name] = Key(f.name, hints[f.name], f.metadata["producers"], rec.__name__, _checker(hints[f.name]))
    return keys


def conforms(value: object, tp: Any) -> bool:
    """Whether ``value`` has type ``tp``: a class, ``Any``, ``None``, a union, a ``Literal``, or a
    tuple / list / dict / Mapping of those."""
    return _checker(tp)(value)


@cache
def _checker(tp: Any) -> Callable[[object], bool]:
    # built once per declared type: the verifier runs after every pass over every key of every node
    origin, args = get_origin(tp), get_args(tp)
    if tp is Any:
        return lambda v: True
    if tp is None or tp is type(None):
        return lambda v: v is None
    if origin in (Union, types.UnionType):
        first, *rest = [_checker(a) for a in args]
        return lambda v: first(v) or any(c(v) for c in rest)
    if origin is Literal:
        return lambda v: v in args
    if origin is tuple and args and args[-1] is not Ellipsis:
        items = [_checker(a) for a in args]
        return lambda v: isinstance(v, tuple) and len(v) == len(items) and all(c(x) for c, x in zip(items, v))
    if origin in (tuple, list):
        item = _checker(args[0]) if args else _checker(Any)
        return lambda v: isinstance(v, origin) and all(map(item, v))
    if origin in (dict, Mapping):
        key, val = _checker(args[0]), _checker(args[1])
        return lambda v: isinstance(v, Mapping) and all(key(k) and val(x) for k, x in v.items())
    cls = origin or tp
    return lambda v: isinstance(v, cls)


META = _declare(Traced, Indexed, Access, Staging)
KWARGS = _declare(OpArgs, SharedArgs, HopperArgs)


class Kwargs(OpArgs, SharedArgs, HopperArgs):
    """``node.kwargs`` as attributes typed as declared above (``Kwargs(n).kind`` is a ``str``): the
    verifier checks each kwarg against its declaration between passes."""

    def __init__(self, node: fx.Node) -> None:
        self.__dict__.update(node.kwargs)


# ----- typed reads of kwargs whose declared type verify_trace checks at run time -----


def loop_body(trace: Trace, loop: fx.Node) -> fx.Graph:
    """The body graph of a loop node (``kwargs["subgraph"]``)."""
    return trace.subgraphs[cast(str, loop.kwargs["subgraph"])]


def loop_dim(loop: fx.Node) -> sympy.Symbol:
    """The dimension a loop node (or an ``mbarrier_init``) tiles (``kwargs["dim"]``)."""
    return loop.kwargs["dim"]


def tile_extents(alloc: fx.Node) -> dict[sympy.Symbol, int]:
    """A shared tile's extent per dim (``kwargs["tile"]`` of an ``allocate``)."""
    return cast("dict[sympy.Symbol, int]", alloc.kwargs["tile"])
