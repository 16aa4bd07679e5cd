"""State shared by the passes of one compilation: resolved constraints, target, loop nesting, and what
passes decide for codegen and the launcher (grid, requirements, tensor maps)."""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy
import torch.fx as fx

from ..errors import ConstraintError
from ..frontend.constraints import ConstraintSet
from ..frontend.ops import Iterate
from ..frontend.ops_control import Conditional
from ..frontend.tracing import Trace
from ..indexing.mma import MMAType
from ..target import Target, get_target


@dataclass(frozen=True, slots=True)
class TensorMapRequest:
    """A TMA tensor map the kernel reads (``runtime.tensor_map.TensorMapSpec`` at launch): binding ``arg``
    of ``dtype``, boxes of ``box`` elements (innermost first), ``swizzle`` bytes."""

    arg: int
    dtype: str
    box: tuple[int, ...]
    swizzle: int


@dataclass(frozen=True, slots=True)
class PersistentGrid:
    """``persistent_grid``'s tile loop: ``tiles`` output tiles, ``remap`` = WORKGROUP[i] as expressions of
    ``$TILE``, ``per_sm`` workgroups resident per SM."""

    tiles: sympy.Expr
    remap: dict[sympy.Symbol, sympy.Expr]
    per_sm: int


@dataclass
class PassContext:
    constraints: ConstraintSet
    target: Target
    loop_dims: dict[fx.Graph, tuple[sympy.Symbol, ...]] = field(default_factory=dict)  # dims of enclosing loops
    parent: dict[fx.Graph, tuple[fx.Node, fx.Graph]] = field(default_factory=dict)  # body -> (iterate/branch, graph)
    workgroup_remap: dict[sympy.Symbol, sympy.Expr] = field(default_factory=dict)  # WORKGROUP[i] -> expr of $PID
    grid_override: tuple[sympy.Expr, sympy.Expr, sympy.Expr] | None = None
    requirements: dict[sympy.Symbol, int] = field(default_factory=dict)  # dim -> divisor the launcher checks
    masked_loops: set[sympy.Symbol] = field(default_factory=set)  # loop dims of ceil(size / tile) iterations
    loop_stages: dict[sympy.Symbol, int] = field(default_factory=dict)  # loop dim -> num_stages when pipelined
    tensor_maps: list[TensorMapRequest] = field(default_factory=list)  # binding order of the map buffer
    stage_start: dict[sympy.Symbol, sympy.Expr] = field(default_factory=dict)  # loop dim -> initial stage
    persistent: PersistentGrid | None = None
    producer_threads: int = 0  # threads beyond the wave grid's (warp_specialize: one producer warpgroup)
    cluster: tuple[int, int, int] = (1, 1, 1)  # thread-block cluster dimensions of the launch (cluster_launch)
    check_bounds: bool = False  # WAVEC_CHECK_BOUNDS: codegen checks every dynamic index (a bounds record binding)
    run_caps: dict[sympy.Symbol, int] = field(default_factory=dict)  # dynamic dim -> longest run (a narrow variant)
    # None: dense row-major bindings; else a strided variant (every argument's outer strides are launch values)
    # whose entries cap an argument's runs along its innermost dim (0: its innermost stride is one too)
    strided: dict[str, int] | None = None
    arg_runs: dict[str, int] = field(default_factory=dict)  # argument -> lcm of its runs (row pitch multiple)

    @classmethod
    def build(cls, trace: Trace, constraints: ConstraintSet, target: Target | str) -> PassContext:
        """The context of one compilation; a target name is looked up once, here."""
        ctx = cls(constraints, get_target(target) if isinstance(target, str) else target)
        ctx.index_loops(trace)
        return ctx

    def index_loops(self, trace: Trace) -> None:
        self.loop_dims = {trace.graph: ()}
        self.parent = {}
        todo = [trace.graph]
        while todo:
            g = todo.pop()
            for node in g.nodes:
                region = node.meta.get("op") is Conditional  # a branch body: in the loops of its graph
                if node.meta.get("op") is Iterate or region:
                    if not region and node.kwargs["dim"] not in self.constraints.loop_tile:
                        dim = node.kwargs["dim"]
                        raise ConstraintError(
                            node.meta.get("loc"),
                            message=f"wc.iterate({dim}, ...) needs a TilingConstraint({dim}, <tile>) for its step",
                        )
                    sub = trace.subgraphs[node.kwargs["subgraph"]]
                    self.loop_dims[sub] = self.loop_dims[g] + (() if region else (node.kwargs["dim"],))
                    self.parent[sub] = (node, g)
                    todo.append(sub)

    def arg_cap(self, name: str, width: int) -> int:
        """The longest run (at most ``width``) along the innermost dim of argument ``name``: the strided
        variant's cap for it (an inner-strided argument: single elements), else ``width``."""
        cap = (self.strided or {}).get(name)
        return width if cap is None else min(width, max(cap, 1))

    def inner_strided(self, name: str) -> bool:
        """Whether argument ``name``'s innermost stride is a launch value (read element by element)."""
        return (self.strided or {}).get(name) == 0

    def in_loop(self, graph: fx.Graph, dim) -> bool:
        return dim in self.loop_dims.get(graph, ())

    @property
    def mma(self) -> MMAType:
        """The MMA type of a kernel with ``wc.mma``."""
        if self.constraints.mma_type is None:
            raise ConstraintError(message="wc.mma needs HardwareConstraint(mma_type=...)")
        return self.constraints.mma_type

    def extent(self, dim, wave: bool = False) -> int:
        """The extent of a distributed ``dim`` per workgroup (or per wave) and loop iteration."""
        ext = self.constraints.wave_extent(dim) if wave else self.constraints.workgroup_extent(dim)
        if ext is None:
            raise ConstraintError(message=f"dimension {dim} has no tile: no constraint distributes it")
        return ext

    def instruction_n(self, n_dim) -> int | None:
        """A warpgroup MMA instruction's N (checked by ``layout_wgmma_operands``); None for fixed shapes."""
        spec = self.mma.spec
        return None if spec.group_waves == 1 else spec.instruction_n(self.extent(n_dim, wave=True))
