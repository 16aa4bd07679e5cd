"""widen_stores: 16-byte stores of mma.sync accumulators of 2-byte types (C of a GEMM in f16 / bf16).

Requires: ``coarsen_loads`` and ``mask_bounds``.  Guarantees: each four m16n8 accumulator writes to one
2-D global memory (N tiles ``c .. c + 24``, ``c`` a multiple of 32) become one ``WideStore``, transposed
within lane quads into one 16-byte run per lane under the same masks (a dynamic N tests ``N % 8 == 0``).
Not with ``split_epilogue``.  Why: docs/design.md, "Module contracts".
"""

from __future__ import annotations

import functools

import sympy
import torch.fx as fx

from ..frontend.ops import WideStore, Write
from ..frontend.tracing import Trace, arg_node, capture_root
from ..frontend.types import AddressSpace
from ..indexing import LANE
from ..indexing.padding import padded_dims
from .context import PassContext

_FRAGMENT = [(0, 0), (0, 1), (8, 0), (8, 1)]  # (row, column) offsets of a thread's four accumulator elements


def _lane_part(expr) -> sympy.Expr:
    """The terms of an index expression that depend on the lane."""
    expr = sympy.sympify(expr)
    return sympy.Add(*[t for t in (expr.args if expr.is_Add else (expr,)) if LANE in t.free_symbols])


@functools.cache
def _accumulator_lanes(rows: sympy.Expr, cols: sympy.Expr) -> bool:
    """Whether lane l holds row l // 4 and columns 2 * (l % 4) + {0, 1} (relative to lane 0): the m16n8
    accumulator.  Checked once per distinct pair of lane terms (every fragment of a GEMM shares them)."""
    if not rows.free_symbols == cols.free_symbols == {LANE}:
        return False

    def at(e, lane: int) -> int:
        return int(e.subs(LANE, lane))

    return all(
        at(rows, lane) - at(rows, 0) == lane // 4 and at(cols, lane) - at(cols, 0) == 2 * (lane % 4)
        for lane in range(32)
    )


def _fragment_write(node: fx.Node) -> tuple | None:
    """(mem, rows expr, column rest, column constant) of an accumulator-fragment write, else None."""
    if node.meta.get("op") is not Write or arg_node(node, 0).meta["type"].dtype.bytes != 2:
        return None
    mem = arg_node(node, 1)
    mtype = mem.meta["type"]
    # 2-D memories only (a GEMM's C): attention's [B, H, M, D] output keeps its narrow stores until the
    # wide ones are timed and tested on a GPU there
    if mtype.address_space != AddressSpace.GLOBAL or len(mtype.shape) != 2:
        return None
    row_dim, col_dim = mtype.shape[-2], mtype.shape[-1]
    layout = node.meta["layout"]
    if set(layout.dims) != {row_dim, col_dim} or len(node.meta.get("accesses", ())) != 2:
        return None
    got = sorted((p[row_dim], p[col_dim]) for p in layout.positions())
    if got != _FRAGMENT:
        return None
    rows, cols = layout.seq(row_dim).start, layout.seq(col_dim).start
    const, rest = sympy.sympify(cols).as_coeff_Add()
    if not _accumulator_lanes(_lane_part(rows), _lane_part(cols)):
        return None
    return mem, rows, rest, int(const)


def widen_stores(trace: Trace, ctx: PassContext) -> None:
    cs = ctx.constraints
    # (the split epilogue asked for explicitly keeps its form: one bounds test, then the narrow stores)
    if cs.threads_per_wave != 32 or not ctx.target.has_mma_sync or cs.group_waves > 1 or cs.scheduling.split_epilogue:
        return
    groups: dict = {}
    order = {n: i for i, n in enumerate(trace.graph.nodes)}
    for node in trace.graph.nodes:
        info = None if padded_dims(cs, node) else _fragment_write(node)  # padding: narrow guarded stores
        if info is not None:
            mem, rows, rest, const = info
            groups.setdefault((mem, rows, rest, const // 32), {})[const % 32] = node
    for (mem, _rows, _rest, _g), by_offset in groups.items():
        size = cs.resolve(mem.meta["type"].shape[-1])
        if sorted(by_offset) != [0, 8, 16, 24] or (size.is_Integer and int(size) % 8):
            continue
        name = capture_root(mem).name
        if ctx.arg_cap(name, 8) < 8:  # a strided variant's row pitch that 16-byte stores would misalign
            continue
        ctx.arg_runs[name] = int(sympy.ilcm(ctx.arg_runs.get(name, 1), 8))
        writes = [by_offset[o] for o in (0, 8, 16, 24)]
        last = max(writes, key=order.__getitem__)
        args = (*[w.args[0] for w in writes], mem)
        with trace.graph.inserting_after(last):
            wide = trace.graph.create_node(
                "call_function", WideStore, args, dict(writes[0].kwargs), name=f"{writes[0].name}_wide"
            )
        wide.meta.update(writes[0].meta)
        # the four narrow writes, for N % 8 != 0: their meta (the values are the WideStore's args)
        wide.meta.update(op=WideStore, narrow=[dict(w.meta) for w in writes])
        for w in writes:
            trace.graph.erase_node(w)
