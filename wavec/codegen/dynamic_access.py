"""Lowering rule of the atomic ops (``frontend/ops_atomic.py``), registered in ``lowering.LOWERINGS``.

Each element is one ``memref.atomic_rmw`` at its address (``coarsen_loads`` gives atomics runs of one
element), under the access's bounds guard and, for a value several threads hold, only in one of them
(``control.replica_guard``); its result is the old values (0 where not updated); unused, NVIDIA's backend
may issue it as a ``red``.  Floating-point min/max are ``maximumf``/``minimumf`` (NaN-propagating, like ``wc.maximum``).
"""

from __future__ import annotations

import torch.fx as fx
from iree.compiler import ir
from iree.compiler.dialects import arith, memref, scf, vector

from ..frontend.ops_atomic import Atomic
from ..frontend.tracing import arg_node
from ..passes.schema import Kwargs
from .lowering import FunctionBuilder, rule
from .memory_access import in_bounds, index_vectors, mem_indices, run_coords
from .replicas import guarded, replica_guard

# (float kind, integer kind) of ``arith.AtomicRMWKind`` per atomic op kind
_KINDS = {"add": ("addf", "addi"), "min": ("minimumf", "mins"), "max": ("maximumf", "maxs")}


@rule(Atomic)
def lower_atomic(fb: FunctionBuilder, node: fx.Node) -> None:
    val_node, mem_node = arg_node(node, 0), arg_node(node, 1)
    layout = node.meta["layout"]
    dtype = val_node.meta["type"].dtype
    kind = getattr(arith.AtomicRMWKind, _KINDS[Kwargs(node).kind][0 if dtype.is_float else 1])
    vecs = index_vectors(fb, node, layout)
    value = fb.values[val_node]
    guard = replica_guard(fb, layout)  # a replicated value updates memory once
    old = []
    for first, _n, off in node.meta["accesses"]:
        coords = run_coords(layout, first, off, vecs)
        elem = vector.extract(value, [], [first])
        idx = mem_indices(fb, node, mem_node, coords)
        cond = guarded(in_bounds(fb, node, coords), guard)
        if cond is None:
            old.append(memref.atomic_rmw(kind, elem, fb.values[mem_node], idx))
            continue
        branch = scf.IfOp(cond, [elem.type], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            scf.yield_([memref.atomic_rmw(kind, elem, fb.values[mem_node], idx)])
        with ir.InsertionPoint(branch.else_block):  # not updated here: the old value reads as 0
            scf.yield_([arith.constant(elem.type, 0.0 if dtype.is_float else 0)])
        old.append(branch.result)
    fb.values[node] = vector.from_elements(value.type, old)
