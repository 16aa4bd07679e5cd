"""Unit tier: the arithmetic behind the scheduling passes, evaluated exactly instead of read off the IR.

- ``reorder_workgroups``: the ``$PID -> (i, j)`` remap is a bijection onto every output tile, for tile
  counts that are not multiples of the group size, and consecutive PIDs stay within one group of G rows;
- ``swizzle_shared``: with the XOR-swizzled layout (the default) and with the padded row stride
  (``operand_swizzle="none"``), the 8 row addresses of every ``ldmatrix`` phase fall in 8 distinct groups
  of 4 banks (and in plain rows they would not); the copies' 16-byte stores are conflict free on the
  swizzled tiles and at most 2-way conflicting on padded short rows.
"""

from __future__ import annotations

import functools

import pytest
import sympy
from kernel_fixtures import gemm_kernel

import wavec as wc
from wavec.frontend.constraints import ConstraintSet
from wavec.frontend.ops import Allocate, AsyncCopy, Iterate, Read, Write
from wavec.frontend.types import AddressSpace
from wavec.indexing.symbols import LANE, PID, THREAD, WAVE, WORKGROUP, induction_symbol
from wavec.passes.context import PassContext
from wavec.passes.pipeline import run_pipeline

M, N, K = wc.sym.M, wc.sym.N, wc.sym.K
BM, BN, BK = wc.sym.BLOCK_M, wc.sym.BLOCK_N, wc.sym.BLOCK_K
STAGES, GROUP = wc.sym.NUM_STAGES, wc.sym.GROUP_M


def _gemm(swizzle: str) -> wc.WaveKernel:
    return gemm_kernel(
        [
            wc.WorkgroupConstraint(M, BM, 0),
            wc.WorkgroupConstraint(N, BN, 1),
            wc.WaveConstraint(M, BM / 2),
            wc.WaveConstraint(N, BN / 2),
            wc.TilingConstraint(K, BK),
            wc.HardwareConstraint(threads_per_wave=32, mma_type=wc.MMAType.NV_F32_16x8x16_F16),
            wc.SchedulingConstraint(num_stages=STAGES, group_size=GROUP, operand_swizzle=swizzle),
        ]
    )


GEMMS = {"auto": _gemm("auto"), "none": _gemm("none")}  # XOR-swizzled operand tiles / padded rows


@functools.cache
def passes(bm: int = 64, bn: int = 64, bk: int = 32, stages: int = 2, group: int = 1, swizzle: str = "auto"):
    gemm = GEMMS[swizzle]
    trace = gemm.trace()
    ctx = PassContext.build(
        trace, ConstraintSet(gemm.constraints, {BM: bm, BN: bn, BK: bk, STAGES: stages, GROUP: group}), "sm_90"
    )
    run_pipeline(trace, ctx)
    return trace, ctx


# ----- reorder_workgroups -------------------------------------------------------------------------------


def _tiles(m: int, n: int, bm: int, bn: int) -> tuple[int, int]:
    return -(-m // bm), -(-n // bn)


@pytest.mark.parametrize(
    "m,n,group,bm,bn",
    [
        (64 * 6, 64 * 4, 3, 64, 64),  # rows a multiple of G
        (300, 130, 3, 64, 64),  # 5 x 3 tiles: the last group holds 2 rows
        (1000, 200, 8, 64, 64),  # 16 x 4: two full groups
        (650, 70, 8, 64, 64),  # 11 x 2: the last group holds 3 rows
        (70, 64 * 9, 8, 64, 64),  # 2 x 9: fewer rows than G
        (64, 64, 4, 64, 64),  # a single tile
        (129, 513, 3, 128, 256),  # 2 x 3 with other tiles, non-multiples
        (1, 1000, 8, 64, 32),  # decode-like: one row of tiles
    ],
)
def test_grouped_order_is_a_bijection_within_g_rows(m: int, n: int, group: int, bm: int, bn: int) -> None:
    _trace, ctx = passes(bm=bm, bn=bn, group=group)
    n0, n1 = _tiles(m, n, bm, bn)
    sizes = {M: m, N: n}
    grid = [int(sympy.sympify(g).xreplace(sizes)) for g in ctx.grid_override]
    assert grid == [n0 * n1, 1, 1]
    remap = ctx.workgroup_remap
    assert set(remap) == {WORKGROUP[0], WORKGROUP[1]}
    assert remap[WORKGROUP[0]].free_symbols <= {PID, M, N} and remap[WORKGROUP[1]].free_symbols <= {PID, M, N}
    seen = []
    for pid in range(grid[0]):
        env = {PID: pid, **sizes}
        i, j = (remap[WORKGROUP[a]].xreplace(env) for a in (0, 1))
        assert i.is_Integer and j.is_Integer, (pid, i, j)
        i, j = int(i), int(j)
        assert 0 <= i < n0 and 0 <= j < n1, (pid, i, j)
        # PIDs of one group of G * n1 workgroups stay within that group's G rows ...
        assert i // group == pid // (group * n1), (pid, i)
        seen.append((i, j))
    # ... and every output tile is visited exactly once
    assert len(set(seen)) == len(seen) == n0 * n1
    # within a group the walk is column by column: rows vary fastest, columns never go back
    for g0 in range(0, len(seen), group * n1):
        cols = [j for _i, j in seen[g0 : g0 + group * n1]]
        assert cols == sorted(cols)
        rows = min(group, n0 - g0 // n1)
        assert all(cols.count(j) == rows for j in range(n1))


def test_group_size_one_keeps_the_2d_grid() -> None:
    _trace, ctx = passes(group=1)
    assert ctx.grid_override is None and not ctx.workgroup_remap


# ----- swizzle_shared: bank groups of the swizzled and of the padded rows -------------------------------

BANK_GROUP = 16  # bytes: 4 banks of 4 bytes; 32 banks = 8 groups


def _body(trace):
    it = next(n for n in trace.graph.nodes if n.meta.get("op") is Iterate)
    return trace.subgraphs[it.kwargs["subgraph"]]


def _allocation(node):
    mem = node.args[0] if node.meta["op"] is Read else node.args[1]
    while mem.meta.get("role") == "capture":
        mem = mem.meta["capture_of"]
    assert mem.meta["op"] is Allocate
    return mem


def _byte_offset(alloc, row: int, col: int) -> int:
    """Where (row, col) of the tile sits in its stage of the allocation: through the XOR-swizzled layout's
    memref indices, or padded rows."""
    elem = alloc.meta["type"].dtype.bytes
    tile = list(alloc.kwargs["tile"].values())
    layout = alloc.kwargs.get("smem_layout")
    if layout is None:
        return (row * (tile[-1] + alloc.kwargs["pad"]) + col) * elem
    shape = layout.memref_shape(tuple(tile))
    flat = 0
    for i, extent in zip(layout.indices(sympy.Integer(row), sympy.Integer(col)), shape):
        flat = flat * extent + int(i)
    return flat * elem


# Some wave, workgroup and iteration; the bank of an address only depends on its offset in the tile.
ENV = {WAVE[0]: 1, WAVE[1]: 1, WORKGROUP[0]: 3, WORKGROUP[1]: 2, induction_symbol(K): 2, K: 4096}


def _ldmatrix_offsets(read) -> list[tuple[int, int]]:
    """(row, column) in the tile addressed by each of the 32 lanes of an ldmatrix: lane i gives row i % 8
    of 8x8 matrix i // 8; A (x4) stacks the matrices [rows 0-7, rows 8-15] x [k 0-7, k 8-15], B (x2)
    [k 0-7, k 8-15], a pair of B fragments (x4) [k 0-7, k 8-15] x [this N tile, the next one]
    (lowering._ldmatrix)."""
    alloc = _allocation(read)
    row_dim, k_dim = read.meta["layout"].dims
    env = {**ENV, LANE: 0}
    r0 = int(sympy.sympify(read.meta["layout"].seq(row_dim).start - alloc.kwargs["base"][row_dim]).xreplace(env))
    c0 = int(sympy.sympify(read.meta["layout"].seq(k_dim).start - alloc.kwargs["base"][k_dim]).xreplace(env))
    out = []
    for lane in range(32):
        tile = lane // 8
        if read.meta["mma_role"] == "a":
            out.append((r0 + lane % 8 + 8 * (tile % 2), c0 + 8 * (tile // 2)))
        elif read.meta.get("pair_with") is not None:
            out.append((r0 + lane % 8 + read.meta["layout"].tile_of(row_dim) * (tile // 2), c0 + 8 * (tile % 2)))
        else:
            out.append((r0 + lane % 8, c0 + 8 * (tile % 2)))
    return out


def _conflict_free(addresses: list[int]) -> bool:
    """One phase of 8 16-byte accesses: conflict free iff they hit 8 distinct groups of 4 banks."""
    assert all(a % BANK_GROUP == 0 for a in addresses)
    return len({a // BANK_GROUP % 8 for a in addresses}) == 8


@pytest.mark.parametrize("swizzle", ["auto", "none"])
@pytest.mark.parametrize("bk,bn", [(16, 64), (32, 64), (64, 64), (32, 16)])  # BLOCK_N=16: unpaired B (x2)
def test_ldmatrix_phases_hit_distinct_bank_groups(bk: int, bn: int, swizzle: str) -> None:
    trace, _ctx = passes(bk=bk, bn=bn, swizzle=swizzle)
    reads = [n for n in _body(trace).nodes if n.meta.get("access") == "ldmatrix" and "paired_by" not in n.meta]
    assert {r.meta["mma_role"] for r in reads} == {"a", "b"}
    for read in reads:
        alloc = _allocation(read)
        # the default swizzles every tile here but BLOCK_N=16's B (copied in 8-byte runs: padded)
        swizzled = swizzle == "auto" and not (bn == 16 and read.meta["mma_role"] == "b")
        assert (alloc.kwargs.get("smem_layout") is not None) == swizzled
        assert alloc.kwargs["pad"] * 2 == (0 if swizzled else BANK_GROUP)  # padded rows: by 16 bytes
        elem = alloc.meta["type"].dtype.bytes
        lanes = _ldmatrix_offsets(read)
        rows_per_phase = []
        for phase in range(len(lanes) // 8):  # 8 lanes, 8 rows of 16 bytes each
            part = lanes[8 * phase : 8 * phase + 8]
            rows_per_phase.append(len({r for r, _c in part}))
            assert _conflict_free([_byte_offset(alloc, r, c) for r, c in part]), (read.name, phase)
            # the control: plain rows of the same tile do conflict
            plain = list(alloc.kwargs["tile"].values())[-1] * elem
            assert not _conflict_free([r * plain + c * elem for r, c in part]), (read.name, phase)
        assert rows_per_phase == [8] * (len(lanes) // 8)
        paired = read.meta.get("pair_with") is not None
        assert paired == (read.meta["mma_role"] == "b" and bn > 16)  # 1 N tile per wave at BLOCK_N=16


def _copy_store_phases(bk: int, swizzle: str) -> list[list[int]]:
    """Byte offsets in the shared tile of the 16-byte copy stores of threads 0-7, 8-15, ... (one phase of a
    16-byte access is 8 threads)."""
    trace, _ctx = passes(bk=bk, swizzle=swizzle)
    copies = [
        n
        for n in _body(trace).nodes
        if n.meta.get("op") in (AsyncCopy, Write) and _allocation(n).meta["type"].address_space == AddressSpace.SHARED
    ]
    assert copies
    phases = []
    for cp in copies:
        alloc = _allocation(cp)
        lay = cp.meta["layout"]
        row_dim, k_dim = lay.dims
        ((_first, n, _off),) = cp.meta["accesses"]
        assert n * 2 == 16
        offs = []
        for t in range(128):
            env = {**ENV, THREAD: t}
            # an async copy's layout is already that of the iteration it fetches (iv_subs); so is the tile
            r, c = (
                int(
                    sympy.sympify(lay.seq(d).start).xreplace(env)
                    - sympy.sympify(alloc.kwargs["base"][d]).subs(cp.meta.get("iv_subs", {})).xreplace(env)
                )
                for d in (row_dim, k_dim)
            )
            offs.append(_byte_offset(alloc, r, c))
        phases += [offs[i : i + 8] for i in range(0, 128, 8)]
    return phases


def _conflict_degree(addresses: list[int]) -> int:
    """Most accesses of one 8 x 16-byte phase that land in the same group of 4 banks."""
    groups = [a // BANK_GROUP % 8 for a in addresses]
    return max(groups.count(g) for g in set(groups))


# Padding trades store conflicts for ldmatrix ones: rows under 128 bytes padded by 16 bytes make the
# cp.async stores (written once per element) 2-way conflicting while every ldmatrix phase (each element
# read by several warps) is conflict free.  The XOR swizzle makes both conflict free (swizzle_shared).
@pytest.mark.parametrize(
    "bk,swizzle,degree",
    [
        (16, "none", 2),
        (32, "none", 2),
        (64, "none", 1),
        (128, "none", 1),
        (16, "auto", 1),
        (32, "auto", 1),
        (64, "auto", 1),
        (128, "auto", 1),
    ],
)
def test_copy_store_conflicts_are_bounded(bk: int, swizzle: str, degree: int) -> None:
    for phase in _copy_store_phases(bk, swizzle):
        assert _conflict_degree(phase) <= degree, phase
