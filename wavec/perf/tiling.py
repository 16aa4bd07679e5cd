"""A launch's tiling as model inputs: the panel reuse of a tiled GEMM's waves (the unique A and B bytes each
wave of concurrently resident CTAs reads, against the bytes its CTAs request) and the steps, fill and
pipeline stages of the innermost tiled dimension.

The features otherwise give two bounds on the DRAM traffic: the footprint (each tensor once, a perfect L2)
and the requested bytes (no L2 at all).  Between them, what a GEMM really moves depends on which tiles run
at the same time: CTAs of one wave that share an M row of tiles read the same A panel, those sharing an N
column the same B panel, and L2 serves the second reader.  This module counts that reuse from the launch
alone (no GPU): the tile order of ``passes/reorder_workgroups.py`` (``GROUP_M`` rows of tiles walked column
by column, or plain x-fastest order without grouping), the tile sizes, and the number of resident CTAs.

The innermost tiled dimension is K in steps of ``BLOCK_K`` where the kernel has one (GEMM, MoE), else N in
steps of ``BLOCK_N`` (rows: a row in chunks; elementwise; attention: the KV loop): its step count is the
length of the main loop (short loops pay the pipeline's fill and drain: ``NUM_STAGES`` of them), its fill
the share of the last step's lanes that hold data (an odd width's tail step is mostly masked lanes).

Requires: the launch's symbols (``BLOCK_*``, ``GROUP_M`` and ``NUM_STAGES`` are the artifact's static
symbols, the sizes its dynamic ones: ``Decomposition.symbols``) and tensors (``Decomposition.tensors``);
the resident CTA slots.

Guarantees: :func:`gemm_tiling` recognises ``C[M, N] = A[M, K] @ B[N, K]^T`` launches with a workgroup tile
(else ``None``: every other kernel); :func:`tile_order` gives each tile's (M tile, N tile) in launch order;
:func:`wave_reads` sums, over the waves (consecutive runs of ``slots`` tiles: for a persistent kernel the
tiles its resident CTAs hold at once), the unique A and B bytes per wave and the requested ones, edge tiles
clipped to the matrix; :func:`inner_tiling` the innermost tiled dimension's (steps, fill, stages), (1, 1, 1)
where there is none.  :func:`tiling_features` gives the feature values of any launch: ``wave.dram_bytes``
(the GEMM's estimate of its DRAM bytes: the waves' unique A and B bytes plus C; for other kernels the
footprint, ``global.gpu_bytes``), ``wave.reuse`` (unique over requested,
in (0, 1]; 1 for other kernels), ``tile.steps``, ``tile.fill`` (in (0, 1]) and ``tile.stages``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .mlir_text import DTYPE_BYTES

__all__ = ["Tiling", "gemm_tiling", "tile_order", "wave_reads", "inner_tiling", "tiling_features", "TILING_FEATURES"]

TILING_FEATURES = ("wave.dram_bytes", "wave.reuse", "tile.steps", "tile.fill", "tile.stages")


@dataclass(frozen=True)
class Tiling:
    m: int
    n: int
    k: int
    block_m: int
    block_n: int
    group: int
    a_bytes: int  # element sizes of A and B
    b_bytes: int


def gemm_tiling(symbols: Mapping[str, int], tensors: Sequence[tuple[tuple[int, ...], str, bool]]) -> Tiling | None:
    """The tiling of a ``C = A @ B^T`` launch (inputs [M, K] and [N, K], output [M, N], a BLOCK_M x BLOCK_N
    workgroup tile), else ``None``."""
    if len(tensors) != 3 or "BLOCK_M" not in symbols or "BLOCK_N" not in symbols:
        return None
    (a, a_dt, a_out), (b, b_dt, b_out), (c, _, c_out) = tensors
    if a_out or b_out or not c_out or len(a) != 2 or len(b) != 2 or len(c) != 2:
        return None
    if a[1] != b[1] or c != (a[0], b[0]):
        return None
    block_m, block_n = int(symbols["BLOCK_M"]), int(symbols["BLOCK_N"])
    group = max(1, int(symbols.get("GROUP_M", 1)))
    return Tiling(a[0], b[0], a[1], block_m, block_n, group, DTYPE_BYTES.get(a_dt, 2), DTYPE_BYTES.get(b_dt, 2))


def tile_order(n0: int, n1: int, group: int) -> tuple[np.ndarray, np.ndarray]:
    """(M tile, N tile) of each launch position 0 .. n0*n1-1: ``reorder_workgroups``' grouped order for
    ``group`` > 1 (its exact index arithmetic), x-fastest (M tiles first) otherwise."""
    pid = np.arange(n0 * n1)
    if group <= 1:
        return pid % n0, pid // n0
    width = group * n1
    first = (pid // width) * group
    size = np.minimum(n0 - first, group)
    return first + pid % size, (pid % width) // size


def wave_reads(t: Tiling, slots: int) -> tuple[float, float]:
    """(unique, requested) A + B bytes summed over the waves of ``slots`` consecutive tiles."""
    n0, n1 = -(-t.m // t.block_m), -(-t.n // t.block_n)
    tm, tn = tile_order(n0, n1, t.group)
    wave = np.arange(len(tm)) // max(1, slots)
    rows = np.minimum(t.block_m, t.m - tm * t.block_m)  # edge tiles hold fewer rows and columns
    cols = np.minimum(t.block_n, t.n - tn * t.block_n)
    requested = float(rows.sum()) * t.k * t.a_bytes + float(cols.sum()) * t.k * t.b_bytes
    _, first_a = np.unique(wave * n0 + tm, return_index=True)  # one reader of each A panel per wave
    _, first_b = np.unique(wave * n1 + tn, return_index=True)
    unique = float(rows[first_a].sum()) * t.k * t.a_bytes + float(cols[first_b].sum()) * t.k * t.b_bytes
    return unique, requested


def inner_tiling(symbols: Mapping[str, int]) -> tuple[float, float, float]:
    """(steps, fill, stages) of the innermost tiled dimension: K by ``BLOCK_K``, else N by ``BLOCK_N``."""
    for dim, block in (("K", "BLOCK_K"), ("N", "BLOCK_N")):
        if dim in symbols and block in symbols and symbols[block] > 0:
            size, step = max(1, int(symbols[dim])), int(symbols[block])
            steps = -(-size // step)
            return float(steps), size / (steps * step), float(max(1, int(symbols.get("NUM_STAGES", 1))))
    return 1.0, 1.0, 1.0


def tiling_features(
    symbols: Mapping[str, int],
    tensors: Sequence[tuple[tuple[int, ...], str, bool]],
    tasks: int,
    slots: int,
    footprint: float,
) -> dict[str, float]:
    """``TILING_FEATURES`` of a launch of ``tasks`` CTAs with ``slots`` resident at once (see the module
    docstring); a persistent GEMM's CTAs each hold one of its tiles at a time."""
    steps, fill, stages = inner_tiling(symbols)
    out = {"wave.dram_bytes": float(footprint), "wave.reuse": 1.0}
    tiling = gemm_tiling(symbols, tensors)
    if tiling is not None:
        unique, requested = wave_reads(tiling, max(1, min(tasks, slots)))
        shape, dtype, _ = tensors[2]
        written = float(math.prod(shape) * DTYPE_BYTES.get(dtype, 4))
        out = {"wave.dram_bytes": unique + written, "wave.reuse": unique / requested if requested else 1.0}
    return {**out, "tile.steps": steps, "tile.fill": fill, "tile.stages": stages}
