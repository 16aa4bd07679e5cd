"""The pass pipeline: one flat, named, ordered list (DESIGN §5)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..errors import OptionError
from ..frontend.tracing import Trace
from ..knobs import knobs
from .coarsen_loads import coarsen_loads
from .context import PassContext
from .convert_layouts import convert_layouts
from .expand import expand
from .hopper.insert_wgmma_fences import insert_wgmma_fences
from .hopper.layout_wgmma_operands import layout_wgmma_operands
from .hopper.persistent_grid import persistent_grid
from .hopper.warp_specialize import warp_specialize
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

PIPELINE: list[tuple[str, Pass]] = [
    ("infer_types", infer_types),
    ("promote_to_shared", promote_to_shared),
    ("layout_wgmma_operands", layout_wgmma_operands),
    ("convert_layouts", convert_layouts),
    ("infer_indices", infer_indices),
    ("expand", expand),
    ("coarsen_loads", coarsen_loads),
    ("swizzle_shared", swizzle_shared),
    ("pipeline_loops", pipeline_loops),
    ("schedule_loops", schedule_loops),
    ("prefetch_fragments", prefetch_fragments),
    ("share_shared_buffers", share_shared_buffers),
    ("reorder_workgroups", reorder_workgroups),
    ("mask_bounds", mask_bounds),
    ("widen_stores", widen_stores),
    ("insert_barriers", insert_barriers),
    ("insert_wgmma_fences", insert_wgmma_fences),
    ("warp_specialize", warp_specialize),
    ("persistent_grid", persistent_grid),
]

PASS_NAMES = [name for name, _ in PIPELINE]


def run_pipeline(
    trace: Trace, ctx: PassContext, print_ir_after: Sequence[str] = (), printer: Callable[[str], None] = print
) -> Trace:
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
    layouts = False
    for name, fn in PIPELINE:
        fn(trace, ctx)
        layouts |= name == "infer_indices"
        if verify:
            verify_trace(trace, name, layouts)
        if "all" in wanted or name in wanted:
            printer(f"// ----- after {name} -----\n{format_trace(trace)}")
    return trace
