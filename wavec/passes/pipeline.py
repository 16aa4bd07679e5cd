"""The pass pipeline (DESIGN §5): a core list every target runs, plus target wings inserted at named points.

``PIPELINE`` is the assembled flat, named, ordered list; each step says why it stands where it does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..errors import OptionError
from ..frontend.tracing import Trace
from ..knobs import knobs
from .coarsen_loads import coarsen_loads
from .context import PassContext
from .convert_layouts import convert_layouts
from .expand import expand
from .hopper.cluster_launch import cluster_launch
from .hopper.insert_wgmma_fences import insert_wgmma_fences
from .hopper.intra_warpgroup_overlap import intra_warpgroup_overlap
from .hopper.layout_wgmma_operands import layout_wgmma_operands
from .hopper.persistent_grid import persistent_grid
from .hopper.pingpong_warpgroups import pingpong_warpgroups
from .hopper.warp_specialize import warp_specialize
from .index_chains import index_chains
from .infer_indices import infer_indices
from .infer_types import infer_types
from .insert_barriers import insert_barriers
from .mask_bounds import mask_bounds
from .pipeline_loops import pipeline_loops
from .prefetch_fragments import prefetch_fragments
from .printer import format_trace
from .promote_to_shared import promote_to_shared
from .reorder_workgroups import reorder_workgroups
from .schedule_loops import schedule_loops
from .share_shared_buffers import share_shared_buffers
from .swizzle_shared import swizzle_shared
from .verify import verify_trace
from .widen_stores import widen_stores

Pass = Callable[[Trace, PassContext], None]
Step = tuple[str, Pass, str]  # (name, pass, why it stands where it does)

# The core list: every target runs these, in this order.
CORE: list[Step] = [
    ("infer_types", infer_types, "first: every later pass reads meta['type']; shape errors point at the kernel"),
    ("promote_to_shared", promote_to_shared, "before inference, so the staging copies get layouts like any op"),
    ("index_chains", index_chains, "after staging moved mappings to the copies: one index chain per access"),
    ("convert_layouts", convert_layouts, "before inference: mma->mma operands get an explicit conversion to anchor"),
    ("infer_indices", infer_indices, "a layout on every value (DESIGN §3) once the op graph is complete"),
    ("expand", expand, "layouts fix the instruction tiles that expansion clones per wave tile (§4)"),
    ("coarsen_loads", coarsen_loads, "access instructions need the per-tile layouts of expand"),
    ("swizzle_shared", swizzle_shared, "shared layouts follow the access instructions (ldmatrix) just chosen"),
    ("pipeline_loops", pipeline_loops, "multibuffers the final shared tiles; issues their copies ahead"),
    ("schedule_loops", schedule_loops, "orders the pipelined body K step by K step, copies included"),
    ("prefetch_fragments", prefetch_fragments, "rotates the scheduled loop; moves the wait insert_barriers anchors on"),
    ("share_shared_buffers", share_shared_buffers, "needs every loop's final buffers, stages and waits"),
    ("reorder_workgroups", reorder_workgroups, "only remaps workgroup ids: any point before codegen"),
    ("mask_bounds", mask_bounds, "once every access exists, the pipeline's copies included"),
    ("widen_stores", widen_stores, "merges masked writes: after mask_bounds decided their masks"),
    ("insert_barriers", insert_barriers, "last core pass: every shared access and wait is in place"),
]

# The Hopper wing (passes/hopper/): (after, name, pass, why); each does nothing without its capability.
HOPPER: list[tuple[str, str, Pass, str]] = [
    ("promote_to_shared", "layout_wgmma_operands", layout_wgmma_operands, "wgmma tile layouts, for inference"),
    ("insert_barriers", "insert_wgmma_fences", insert_wgmma_fences, "fences and waits around the final barriers"),
    (
        "insert_wgmma_fences",
        "intra_warpgroup_overlap",
        intra_warpgroup_overlap,
        "rotates the fenced body: needs its waits",
    ),
    ("intra_warpgroup_overlap", "warp_specialize", warp_specialize, "moves the fenced TMA fills to a producer"),
    ("warp_specialize", "pingpong_warpgroups", pingpong_warpgroups, "orders the consumers' fenced chains"),
    ("pingpong_warpgroups", "persistent_grid", persistent_grid, "wraps the finished body in the tile loop"),
    ("persistent_grid", "cluster_launch", cluster_launch, "checks the finished TMA pipeline; pads the grid last"),
]


def assemble(core: list[Step], extensions: list[tuple[str, str, Pass, str]]) -> list[Step]:
    """``core`` with each extension inserted right after the step it names (in list order)."""
    steps = list(core)
    for after, name, fn, why in extensions:
        steps.insert(next(i for i, s in enumerate(steps) if s[0] == after) + 1, (name, fn, why))
    return steps


STEPS = assemble(CORE, HOPPER)
PIPELINE: list[tuple[str, Pass]] = [(name, fn) for name, fn, _ in STEPS]
PASS_NAMES = [name for name, _ in PIPELINE]


def run_pipeline(
    trace: Trace,
    ctx: PassContext,
    print_ir_after: Sequence[str] = (),
    printer: Callable[[str], None] = print,
    stop_after: str | None = None,
) -> Trace:
    """Run the passes in order (up to and including ``stop_after``), verifying between them."""
    if stop_after is not None and stop_after not in PASS_NAMES:
        raise OptionError(option="stop_after", message=f"unknown pass {stop_after!r}; expected one of {PASS_NAMES}")
    wanted = {print_ir_after} if isinstance(print_ir_after, str) else set(print_ir_after)
    unknown = wanted - set(PASS_NAMES) - {"all", "trace", "mlir"}
    if unknown:
        raise OptionError(
            option="print_ir_after",
            message=f"unknown pass {sorted(unknown)}; expected pass names {PASS_NAMES}, 'trace', 'mlir' or 'all'",
        )
    if wanted & {"all", "trace"}:
        printer(f"// ----- after trace -----\n{format_trace(trace)}")
    verify = knobs.verify_ir
    ran: set[str] = set()
    if verify:
        verify_trace(trace, "trace", ran)
    for name, fn in PIPELINE:
        fn(trace, ctx)
        ran.add(name)
        if verify:
            verify_trace(trace, name, ran)
        if "all" in wanted or name in wanted:
            printer(f"// ----- after {name} -----\n{format_trace(trace)}")
        if name == stop_after:
            break
    return trace
