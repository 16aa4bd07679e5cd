"""Lowering of ``NamedBarrier`` (``frontend/ops_hopper.py``): ``bar.sync`` / ``bar.arrive`` with a barrier id
per consumer warpgroup, registered in ``lowering.LOWERINGS``.  The id is warpgroup-uniform, so every warp
executes one aligned barrier instruction."""

from __future__ import annotations

from contextlib import nullcontext

import sympy
import torch.fx as fx
from iree.compiler import ir
from iree.compiler.dialects import arith, nvvm, scf

from ...frontend.ops_hopper import NamedBarrier
from ...indexing import THREAD
from ..lowering import FunctionBuilder, rule

WARPGROUP = 128


def _i32(v: ir.Value) -> ir.Value:
    return arith.index_cast(ir.IntegerType.get_signless(32), v)


@rule(NamedBarrier)
def lower_named_barrier(fb: FunctionBuilder, node: fx.Node) -> None:
    kw = node.kwargs
    group = sympy.floor(THREAD / WARPGROUP)  # the consumer warpgroup (0 or 1; the producer never gets here)
    bar = _i32(fb.index(1 + group if kw["turn"] == "mine" else 2 - group))  # id 0: the workgroup's bar.sync 0
    threads = _i32(fb.index(kw["threads"]))
    only = kw.get("only")
    branch = None
    if only is not None:
        branch = scf.IfOp(arith.cmpi(arith.CmpIPredicate.eq, fb.index(group), fb.index(only)))
    with ir.InsertionPoint(branch.then_block) if branch is not None else nullcontext():
        if kw["action"] == "sync":
            nvvm.barrier(barrier_id=bar, number_of_threads=threads)
        else:
            nvvm.barrier_arrive(threads, barrier_id=bar)
        if branch is not None:
            scf.yield_([])
