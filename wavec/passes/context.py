"""State shared by the passes of one compilation: resolved constraints, target, loop nesting."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch.fx as fx

from ..frontend.constraints import ConstraintSet
from ..frontend.ops import Iterate
from ..frontend.tracing import Trace


@dataclass(frozen=True, slots=True)
class TensorMapRequest:
    """A TMA tensor map the kernel reads (``runtime.tensor_map.TensorMapSpec`` at launch): binding ``arg``
    of ``dtype``, boxes of ``box`` elements (innermost first), ``swizzle`` bytes."""

    arg: int
    dtype: str
    box: tuple[int, ...]
    swizzle: int


@dataclass
class PassContext:
    constraints: ConstraintSet
    target: str
    loop_dims: dict = field(default_factory=dict)  # fx.Graph -> tuple of dims of enclosing loops
    parent: dict = field(default_factory=dict)  # subgraph -> (iterate node, parent graph)
    workgroup_remap: dict = field(default_factory=dict)  # WORKGROUP[i] -> expression of $PID
    grid_override: tuple | None = None
    requirements: dict = field(default_factory=dict)  # dim -> divisor the launcher must check
    masked_loops: set = field(default_factory=set)  # loop dims that run ceil(size / tile) iterations
    loop_stages: dict = field(default_factory=dict)  # loop dim -> num_stages of a pipelined loop
    tensor_maps: list = field(default_factory=list)  # TensorMapRequest, in binding order of the map buffer
    stage_start: dict = field(default_factory=dict)  # loop dim -> initial carried stage (persistent: base % S)
    persistent: dict | None = None  # persistent_grid: tiles, workgroup remap of $TILE, tile-start barrier
    producer_threads: int = 0  # threads beyond the wave grid's (warp_specialize: one producer warpgroup)

    @classmethod
    def build(cls, trace: Trace, constraints: ConstraintSet, target: str) -> PassContext:
        ctx = cls(constraints, target)
        ctx.index_loops(trace)
        return ctx

    def index_loops(self, trace: Trace) -> None:
        self.loop_dims = {trace.graph: ()}
        self.parent = {}
        todo = [trace.graph]
        while todo:
            g = todo.pop()
            for node in g.nodes:
                if node.meta.get("op") is Iterate:
                    sub = trace.subgraphs[node.kwargs["subgraph"]]
                    self.loop_dims[sub] = self.loop_dims[g] + (node.kwargs["dim"],)
                    self.parent[sub] = (node, g)
                    todo.append(sub)

    def in_loop(self, graph: fx.Graph, dim) -> bool:
        return dim in self.loop_dims.get(graph, ())
