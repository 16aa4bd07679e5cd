"""``wavec.perf.tiling``: the grouped tile order of ``reorder_workgroups``, a GEMM wave's unique panel bytes
and the innermost tiled dimension, counted by hand on small grids (no compiler needed)."""

from __future__ import annotations

import numpy as np
import pytest

from wavec.perf import GPUS, Decomposition, features, schedule
from wavec.perf.tiling import (
    TILING_FEATURES,
    Tiling,
    gemm_tiling,
    inner_tiling,
    tile_order,
    tiling_features,
    wave_reads,
)

# C[40, 64] = A[40, 10] @ B[64, 10]^T in 16 x 32 tiles: 3 M tiles (16, 16 and an 8-row edge) x 2 N tiles
GEMM = [((40, 10), "f16", False), ((64, 10), "f16", False), ((40, 64), "f32", True)]
SYMBOLS = {"M": 40, "N": 64, "K": 10, "BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 4, "NUM_STAGES": 3, "GROUP_M": 2}


def test_grouped_order_walks_group_rows_column_by_column() -> None:
    # width = 2 x 2: the first group (M tiles 0, 1) column by column, then the last group of one M tile
    tm, tn = tile_order(3, 2, 2)
    assert list(zip(tm.tolist(), tn.tolist())) == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1)]
    tm, tn = tile_order(3, 2, 1)  # no grouping: the hardware's x-fastest order, M tiles first
    assert list(zip(tm.tolist(), tn.tolist())) == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]
    tm, tn = tile_order(7, 5, 8)  # one group larger than the grid: every tile exactly once
    assert sorted(zip(tm.tolist(), tn.tolist())) == [(m, n) for m in range(7) for n in range(5)]


def test_wave_panels_by_hand() -> None:
    t = gemm_tiling(SYMBOLS, GEMM)
    assert t == Tiling(40, 64, 10, 16, 32, 2, 2, 2)
    # 3 slots, grouped: wave 0 = (0,0) (1,0) (0,1): A rows 16 + 16, B rows 32 + 32 once each;
    # wave 1 = (1,1) (2,0) (2,1): A rows 16 + 8, B rows 32 + 32.  K x 2 bytes per row.
    unique, requested = wave_reads(t, 3)
    assert unique == ((16 + 16) + 64 + (16 + 8) + 64) * 10 * 2
    # every tile requests its own rows: M rows 16+16+16 | 16+8+8, N rows 32 per tile
    assert requested == ((16 + 16 + 16 + 16 + 8 + 8) + 6 * 32) * 10 * 2
    # x-fastest order, same slots: each wave is a whole column of M tiles and one B panel
    ungrouped = Tiling(40, 64, 10, 16, 32, 1, 2, 2)
    assert wave_reads(ungrouped, 3) == (2 * (40 + 32) * 10 * 2, requested)
    # one wave holding the whole grid reads each panel once: the footprint of A and B
    assert wave_reads(t, 6)[0] == (40 + 64) * 10 * 2


def test_tiling_features_of_a_gemm_and_of_other_kernels() -> None:
    v = tiling_features(SYMBOLS, GEMM, tasks=6, slots=3, footprint=1e9)
    unique, requested = wave_reads(gemm_tiling(SYMBOLS, GEMM), 3)  # type: ignore[arg-type]
    assert v["wave.dram_bytes"] == unique + 40 * 64 * 4  # plus C (f32) written once
    assert v["wave.reuse"] == pytest.approx(unique / requested)
    # K = 10 in steps of 4: 3 steps, the last half full; 3 stages
    assert (v["tile.steps"], v["tile.fill"], v["tile.stages"]) == (3.0, 10 / 12, 3.0)
    assert set(v) == set(TILING_FEATURES)
    # a persistent grid of 2 CTAs holds 2 tiles at a time, whatever the slots
    assert tiling_features(SYMBOLS, GEMM, tasks=2, slots=264, footprint=0)["wave.dram_bytes"] == (
        wave_reads(gemm_tiling(SYMBOLS, GEMM), 2)[0] + 40 * 64 * 4  # type: ignore[arg-type]
    )
    # a row kernel: no panels, its footprint; a 3000-wide row in 2048-wide chunks: 2 steps, 3000/4096 full
    rows = [((37, 3000), "bf16", False), ((3000,), "bf16", False), ((37, 3000), "bf16", True)]
    v = tiling_features({"M": 37, "N": 3000, "BLOCK_N": 2048}, rows, tasks=10, slots=264, footprint=5e5)
    assert v == {"wave.dram_bytes": 5e5, "wave.reuse": 1.0, "tile.steps": 2.0, "tile.fill": 3000 / 4096} | {
        "tile.stages": 1.0
    }
    assert inner_tiling({"M": 5}) == (1.0, 1.0, 1.0)  # nothing tiled
    # not C = A @ B^T: shapes that do not chain, or a tile missing
    assert gemm_tiling(SYMBOLS, [GEMM[0], ((64, 12), "f16", False), GEMM[2]]) is None
    assert gemm_tiling({"BLOCK_M": 16}, GEMM) is None


def test_features_carry_the_tiling() -> None:
    h100 = GPUS["h100"]
    tasks = 6
    d = Decomposition(
        kernel="k", target="sm_90", grid=(tasks, 1, 1), block=(128, 1, 1), wave=32, shared_bytes=0,
        registers=64, demand={"global_read": np.full(tasks, 1e3), "global_write": np.full(tasks, 1e2)},
        trips={}, footprint={"read": 4000, "write": 600}, symbols=SYMBOLS, tensors=GEMM,
    )  # fmt: skip
    s = schedule(d, h100)
    v = features(d, s).values
    expected = tiling_features(SYMBOLS, GEMM, tasks, h100.sms * s.occupancy.blocks_per_sm, 4600.0)
    assert {k: v[k] for k in TILING_FEATURES} == expected
    assert v["wave.dram_bytes"] == (40 + 64) * 10 * 2 + 40 * 64 * 4  # one wave: every panel once
