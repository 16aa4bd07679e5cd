"""Lowering of the persistent grid's tile loop (``PersistentTiles``, ``passes/hopper/persistent_grid.py``);
imported by the emitter only for persistent kernels.

``scf.for %t = block_id.x to tiles step grid_dim.x`` binding ``$TILE`` = ``%t``, ``$TILE_COUNT`` = tiles
this workgroup finished before (the TMA pipeline's running K-iteration base), ``$WG0``/``$WG1`` from the
pass's remap and ``$WG2`` = 0; inside, an optional ``gpu.barrier`` and every root node after the marker.
Index math free of these symbols is hoisted before the loop.  :func:`tile_loop` is the same loop for the
warp-specialized producer (``codegen.hopper.tma``).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch.fx as fx
from iree.compiler import ir
from iree.compiler.dialects import arith, gpu, scf

from ...frontend.ops_hopper import PersistentTiles
from ...indexing.symbols import TILE, TILE_COUNT, WORKGROUP
from ...passes.schema import Kwargs
from ..lowering import FunctionBuilder, rule


@contextmanager
def tile_loop(fb: FunctionBuilder, tiles, remap: dict):
    """Inside: the body of ``for $TILE in range(block id, tiles, grid size)`` with the tile symbols bound."""
    pid = gpu.block_id(gpu.Dimension.x)
    nprog = gpu.grid_dim(gpu.Dimension.x)
    loop = scf.ForOp(pid, fb.index(tiles), nprog, [])
    with ir.InsertionPoint(loop.body):
        t = loop.induction_variable
        count = arith.divui(arith.subi(t, pid), nprog)
        fb.enter_loop(loop.operation, {TILE: t, TILE_COUNT: count})
        for wg in WORKGROUP:  # bound in this scope: expressions of the workgroup ids stay in the loop
            fb.scope_symbols[-1].add(wg)
            fb.symbols[wg] = fb.index(remap[wg]) if wg in remap else fb.index(0)
        yield
        scf.yield_([])
        fb.exit_loop()


@rule(PersistentTiles)
def lower_persistent_tiles(fb: FunctionBuilder, node: fx.Node) -> None:
    with tile_loop(fb, Kwargs(node).tiles, Kwargs(node).remap):
        if node.kwargs["barrier"]:  # every warpgroup retired the last tile's wgmmas before a stage is refilled
            gpu.barrier()
        nodes = list(node.graph.nodes)
        rest = nodes[nodes.index(node) + 1 :]
        fb.lower_graph(node.graph, rest)
        fb.done.update(rest)
