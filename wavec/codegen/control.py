"""Lowering rule of ``wc.conditional`` (``frontend/ops_control.py``; the scans are in ``scans.py``).

- ``wc.exit_if``: ``scf.if (not cond)`` around every node after it in the root graph (lowered here,
  marked done for the graph walk), in a scope of its own like a conditional's body; in a wgmma kernel
  the shared tiles after it are allocated before the branch (the descriptors' addresses are hoisted to
  the top of the function).
- A conditional is one ``scf.if`` on the thread's element of the condition (or a workgroup-uniform
  comparison of index expressions); its body lowers in a scope of its own, so index values it needs are
  computed before the branch and never used from inside it afterwards.
"""

from __future__ import annotations

from typing import cast

import sympy
import torch.fx as fx
from iree.compiler import ir
from iree.compiler.dialects import arith, scf, vector

from ..errors import CodegenError
from ..frontend.ops import Allocate
from ..frontend.ops_control import Conditional, ExitIf
from ..frontend.ops_hopper import MatrixDescriptor
from ..frontend.tracing import arg_nodes
from ..passes.schema import Kwargs, loop_body
from .lowering import FunctionBuilder, rule

_CMP = {sympy.StrictLessThan: "slt", sympy.LessThan: "sle", sympy.StrictGreaterThan: "sgt"}
_CMP.update({sympy.GreaterThan: "sge", sympy.Equality: "eq", sympy.Unequality: "ne"})


def _uniform_condition(fb: FunctionBuilder, rel: sympy.Rel) -> ir.Value:
    pred = _CMP.get(type(rel))
    if pred is None:
        raise CodegenError(message=f"wc.conditional: cannot lower the relation {rel}")
    lhs, rhs = (fb.index(fb.cs.resolve_tile_starts(side)) for side in (rel.lhs, rel.rhs))
    return arith.cmpi(getattr(arith.CmpIPredicate, pred), lhs, rhs)


@rule(Conditional)
def lower_conditional(fb: FunctionBuilder, node: fx.Node) -> None:
    if "when" in node.kwargs:
        cond = _uniform_condition(fb, Kwargs(node).when)
    else:
        cond = vector.extract(fb.values[arg_nodes(node, 0)[0]], [], [0])
    branch = scf.IfOp(cond)
    with ir.InsertionPoint(branch.then_block):
        fb.enter_loop(branch.operation, {})  # a scope: index values are emitted before the branch
        fb.lower_graph(loop_body(fb.trace, node))
        fb.exit_loop()
        scf.yield_([])


@rule(ExitIf)
def lower_exit_if(fb: FunctionBuilder, node: fx.Node) -> None:
    cond = vector.extract(fb.values[cast(fx.Node, node.args[0])], [], [0])
    keep = arith.xori(cond, arith.constant(ir.IntegerType.get_signless(1), 1))
    rest = list(node.graph.nodes)
    rest = [n for n in rest[rest.index(node) + 1 :] if n.op != "output"]
    if any(n.meta.get("op") is MatrixDescriptor for g in fb.trace.graphs() for n in g.nodes):
        # wgmma descriptors take their tiles' shared addresses at the top of the function
        # (``hopper.wgmma.hoisted_symbol``): those tiles are allocated before the branch
        allocs = [n for n in rest if n.meta.get("op") is Allocate]
        fb.lower_graph(node.graph, allocs)
        fb.done.update(allocs)
        rest = [n for n in rest if n not in allocs]
    branch = scf.IfOp(keep)
    with ir.InsertionPoint(branch.then_block):
        fb.enter_loop(branch.operation, {})
        fb.lower_graph(node.graph, rest)
        fb.exit_loop()
        scf.yield_([])
    fb.done.update(rest)
