"""Lowering of ``convert_layout`` (inserted by ``passes/convert_layouts.py``): each clone builds one
destination instruction tile from the source tiles it overlaps.  ``via="registers"``: a shuffle of the
concatenated sources by the pass's lane-independent mapping (NVIDIA accumulator -> A: a concatenation of
f16 register pairs).  ``via="shared"``: the wave stores its elements into its slice of a shared buffer
(relative to its tile origin) and loads the destination's back, between two barriers.
"""

from __future__ import annotations

from collections.abc import Sequence

import sympy
import torch.fx as fx
from iree.compiler import ir
from iree.compiler.dialects import gpu, memref, vector

from ..errors import CodegenError
from ..frontend.ops import ConvertLayout
from ..frontend.tracing import arg_nodes
from ..indexing import WAVE, Layout
from ..passes.convert_layouts import register_mapping, wave_origin
from .lowering import FunctionBuilder, rule, vec_type


def _concat(values: list[ir.Value]) -> ir.Value:
    acc = values[0]
    for v in values[1:]:
        n, m = ir.VectorType(acc.type).shape[0], ir.VectorType(v.type).shape[0]
        acc = vector.shuffle(acc, v, list(range(n + m)))
    return acc


def _via_registers(fb: FunctionBuilder, node: fx.Node, srcs: Sequence[fx.Node]) -> ir.Value:
    dst: Layout = node.meta["layout"]
    mapping = register_mapping(srcs[0].meta["layout"], dst, fb.cs.lanes)
    if mapping is None:  # the pass proved one exists; every tile shares the pattern
        raise CodegenError(
            node.meta.get("loc"),
            message=f"convert_layout %{node.name}: the layouts have no "
            "lane-independent register mapping (convert_layouts should have chosen via=shared)",
        )
    size = srcs[0].meta["layout"].size
    flat = [ti * size + q for ti, q in mapping]
    whole = _concat([fb.values[s] for s in srcs])
    if flat == list(range(len(srcs) * size)):
        return whole
    return vector.shuffle(whole, whole, flat)


def _buffer(fb: FunctionBuilder, node: fx.Node) -> ir.Value:
    """The conversion's shared scratch (one per ``convert_id``), allocated before every loop."""
    ext = [fb.cs.wave_extent(d) for d in node.meta["layout"].dims]
    shape = "x".join(str(x) for x in [fb.cs.waves, *ext])
    mtype = ir.MemRefType.parse(f"memref<{shape}x{node.meta['type'].dtype.mlir}, #gpu.address_space<workgroup>>")
    return fb.cached(("convert_buffer", node.meta["convert_id"]), 0, lambda: memref.alloc(mtype, [], [], alignment=16))


def _via_shared(fb: FunctionBuilder, node: fx.Node, srcs: Sequence[fx.Node]) -> ir.Value:
    buf = _buffer(fb, node)
    dst: Layout = node.meta["layout"]
    origin = wave_origin(fb.ctx, node.graph, dst.dims)
    w = fb.cs.waves_per_axis
    wave = fb.index(WAVE[0] + w[0] * WAVE[1] + w[0] * w[1] * WAVE[2])

    def where(lay: Layout, off: dict) -> list[ir.Value]:
        return [wave] + [fb.index(sympy.expand(lay.seq(d).start + off[d] - origin[d])) for d in dst.dims]

    gpu.barrier()
    for s in srcs:
        lay: Layout = s.meta["layout"]
        for q, off in enumerate(lay.positions()):
            memref.store(vector.extract(fb.values[s], [], [q]), buf, where(lay, off))
    gpu.barrier()
    elems = [memref.load(buf, where(dst, off)) for off in dst.positions()]
    return vector.from_elements(vec_type(dst.size, node.meta["type"].dtype), elems)


@rule(ConvertLayout)
def lower_convert_layout(fb: FunctionBuilder, node: fx.Node) -> None:
    srcs = arg_nodes(node, 0)
    if node.kwargs["via"] == "registers":
        fb.values[node] = _via_registers(fb, node, srcs)
    else:
        fb.values[node] = _via_shared(fb, node, srcs)
