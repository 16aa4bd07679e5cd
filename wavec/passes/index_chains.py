"""index_chains: give every dynamically mapped access its own chain of index values (DESIGN §12).

An index value takes the layout of the access it addresses (``infer_indices``, flow ``indexed_access``).
One value feeding two accesses of different layouts (the MoE ids gather the A rows in the copy layout and
scatter the output in the accumulator layout) would be a layout conflict, so each access after the first
gets a clone of the chain that computes its index: register ops in its own graph, and through capture
placeholders the chain in the enclosing graph.  Index chains are a few integer loads and arithmetic per
row; re-reading an index tensor costs an L1 hit, converting a layout a shared-memory round trip.

Requires: ``promote_to_shared`` (staging reads carry the mapping from then on).  Guarantees: every index
operand of a dynamic access, and every register node of its chain, has the access as its only consumer
chain; chains feeding a workgroup-distributed copy carry ``meta["index_scope"] = "workgroup"`` (their tiles
are counted over the workgroup's extent, like the copy's).
"""

from __future__ import annotations

import torch.fx as fx

from ..frontend.mapping import index_operands
from ..frontend.tracing import Trace
from .context import PassContext
from .schema import capture_into


def _is_register(n: object) -> bool:
    return isinstance(n, fx.Node) and n.meta.get("type") is not None and n.meta["type"].address_space is None


def _clonable(x: fx.Node) -> bool:
    """Per-tile register ops (reads, arithmetic, ``wc.index``) and captures; loop results, mmas and
    reductions end a chain (shared, never cloned), as do scalar arguments, loop-carried values and the
    old values of atomics (a clone would update memory twice)."""
    if not _is_register(x):
        return False
    if x.op == "call_function":
        op = x.meta.get("op")
        return getattr(op, "expansion", None) == "per_tile" and not getattr(op, "writes_memory", False)
    return x.meta.get("role") == "capture"


def _chain(n: fx.Node) -> list[fx.Node]:
    """The clonable nodes ``n`` is computed from (itself included), across captures."""
    out: list[fx.Node] = []
    stack = [n]
    while stack:
        x = stack.pop()
        if x in out or not _clonable(x):
            continue
        out.append(x)
        if x.meta.get("role") == "capture":
            stack.append(x.meta["capture_of"])
        elif x.op == "call_function":
            stack.extend(a for a in x.all_input_nodes)
    return out


class _Cloner:
    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.loop_of = {trace.subgraphs[it.kwargs["subgraph"]]: it for g in trace.graphs() for it in g.nodes
                        if it.op == "call_function" and "subgraph" in it.kwargs}  # fmt: skip

    def clone(self, n: fx.Node) -> fx.Node:
        """A copy of ``n``'s chain, each node right after its original."""
        if n.meta.get("role") == "capture":
            return capture_into(n.graph, self.loop_of[n.graph], self.clone(n.meta["capture_of"]))
        if not _clonable(n):
            return n
        args = tuple(self.clone(a) if isinstance(a, fx.Node) else a for a in n.args)
        with n.graph.inserting_after(n):
            new = n.graph.create_node("call_function", n.target, args, dict(n.kwargs), name=f"{n.name}_idx")
        new.meta.update(n.meta)
        return new

    def hoist(self, n: fx.Node, memo: dict) -> fx.Node:
        """``n`` (loop-invariant, in a loop body) recomputed before the loop, in the enclosing graph."""
        if n.meta.get("role") == "capture":
            return n.meta["capture_of"]
        if n not in memo:
            args = tuple(self.hoist(a, memo) if isinstance(a, fx.Node) else a for a in n.args)
            with self.loop_of[n.graph].graph.inserting_before(self.loop_of[n.graph]):
                memo[n] = self.loop_of[n.graph].graph.create_node(
                    "call_function", n.target, args, dict(n.kwargs), name=f"{n.name}_hoisted"
                )
            memo[n].meta.update(n.meta)
        return memo[n]

    def invariant(self, n: fx.Node) -> bool:
        """Whether ``n`` (in a loop body) has one value for the whole loop: built from captures only, by
        per-tile ops whose values do not span the loop's dim."""
        if n.meta.get("role") == "capture":
            return True
        dim = self.loop_of[n.graph].kwargs["dim"]
        return (
            _clonable(n)
            and dim not in n.meta["type"].dims
            and all(self.invariant(a) or not _is_register(a) and a.op == "placeholder" for a in n.all_input_nodes)
        )

    def drop_if_dead(self, n: fx.Node) -> None:
        """Erase ``n`` and, transitively, what it was computed from, where nothing else uses them (a node
        two of them were computed from is erased once: the second visit finds it gone)."""
        if getattr(n, "_erased", False) or n.users or not _clonable(n):
            return
        if n.op == "placeholder":  # a capture: also drop it from its loop's captured values
            loop = self.loop_of[n.graph]
            outer = n.meta["capture_of"]
            caps = list(loop.args[1])
            del caps[[p for p in n.graph.nodes if p.meta.get("role") == "capture"].index(n)]
            loop.args = (loop.args[0], tuple(caps))
            n.graph.erase_node(n)
            self.drop_if_dead(outer)
            return
        inputs = n.all_input_nodes
        n.graph.erase_node(n)
        for a in inputs:
            self.drop_if_dead(a)


def _hoist_invariant(cloner: _Cloner, access: fx.Node) -> None:
    """Index values a loop body computes from loop-invariant inputs move before the loop (captured), so
    that copies issued iterations ahead (``pipeline_loops``) and their prologue can use them."""
    for idx in index_operands(access).values():
        loop = cloner.loop_of.get(access.graph)
        if loop is not None and "dim" in loop.kwargs and idx.op == "call_function" and cloner.invariant(idx):
            body = access.graph
            access.replace_input_with(idx, capture_into(body, cloner.loop_of[body], cloner.hoist(idx, {})))
            cloner.drop_if_dead(idx)


def index_chains(trace: Trace, ctx: PassContext) -> None:
    cloner = _Cloner(trace)
    for g in trace.graphs():
        for access in list(g.nodes):
            _hoist_invariant(cloner, access)
    owner: dict[fx.Node, fx.Node] = {}  # chain node -> the access it was first claimed by
    for g in trace.graphs():
        for access in list(g.nodes):
            for idx in index_operands(access).values():
                chain = _chain(idx)
                if any(owner.get(x, access) is not access for x in chain):
                    new = cloner.clone(idx)
                    access.replace_input_with(idx, new)
                    cloner.drop_if_dead(idx)
                    chain = _chain(new)
                for x in chain:
                    owner[x] = access
                    if access.meta.get("distribute") == "workgroup":
                        x.meta["index_scope"] = "workgroup"
