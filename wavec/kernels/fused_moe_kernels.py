"""The DSL kernels of the fused mixture-of-experts layer (``fused_moe.fused_experts``, DESIGN §14).

Rows are the ``(token, slot)`` pairs ``moe_align_block_size`` sorted by expert and padded per expert to the
token block BLOCK_M (the sentinel ``T*k`` marks padding); ``expert_ids[b]`` is the expert of block ``b``.
Every kernel is compiled once per (dtype, top-k, flags, tiles, target) and is dynamic in T, H, I and E.

- ``moe_remap``: ``local = expert_map[topk_ids]``, with -1 ("another rank") turned into E, one extra
  expert whose blocks the GEMMs skip.
- ``moe_up``: per BLOCK_M x BLOCK_N tile of the intermediate [rows, I], the token rows gathered by
  ``sorted_ids // k`` and the block's expert's gate and up rows of ``w1`` (viewed [E, 2, I, H], no copy)
  into two accumulators of one workgroup; the epilogue writes ``act(gate) * up`` in the input dtype in
  sorted order.  ``weighted_input`` scales both accumulators by the routing weight first (weighting the
  input row: the GEMM is linear).
- ``moe_down``: the intermediate rows (affine, sorted order) times the block's expert's ``w2`` [H, I];
  the epilogue multiplies by the routing weight and either stores the row of its ``(token, slot)`` in a
  [T*k + 1, H] buffer (``deterministic``) or atomically adds it into an f32 [T + 1, H] accumulator.
  Stores have no mask: padding rows (the sentinel T*k, row T of the accumulator) go to the extra last
  row, which nothing reads.
- ``moe_combine``: ``out[t] = sum over slots s of y[t, s]`` in f32, in slot order, rounded once, over the
  slots whose local expert is below ``limit`` (a skipped slot's row is never written).

Swap-AB (``swap=True``, sm_90a ``wgmma``, docs/moe.md "Swap-AB on wgmma"): the same two GEMMs with the
expert's weight rows as the instruction's 64-row M operand and the token block (8, 16 or 32 rows) as its
N operand, so a decode block is not padded to 64 rows: the accumulators are [N, M] (weight rows, tokens),
one warpgroup per 64 weight rows where the token tile's copy keeps 16-byte runs (``swap_warpgroups``),
and the epilogues are the same ops on the transposed tile, writing the same outputs in the same layouts
(a write stores by dimension name).

Split-K (``split_k=True`` for ``make_down``, docs/moe.md "Split-K"): the down-projection's grid gets a third
axis of SPLIT K slices (SPLIT bound in subs); workgroup ``q`` walks the K steps ``[q*steps//SPLIT,
(q+1)*steps//SPLIT)`` of the ``steps = ceil(K / BLOCK_K)`` (balanced: no slice is empty while SPLIT <= steps;
the last one ends at K's masked tail) and adds its weighted partial into the f32 accumulator like the
unsplit atomic kernel: the GEMM is linear in K, so the slices' sum is the whole product.  Deterministic:
slice ``q`` stores its f32 partial as row ``id * SPLIT + q`` of [(T*k + 1) * SPLIT, H], and the combine sums
each token's k * SPLIT rows in (slot, slice) order: the same bits every call.

Both GEMMs start with ``wc.exit_if``: a workgroup whose token block has no local expert (past the last
run: -1; the skip expert E) returns before loading anything.  (``wc.conditional`` around the GEMM would
do the same on the emulator but lose the shared-memory staging and pipelining: its body is a region the
staging passes do not enter; ``exit_if`` leaves the kernel one straight-line graph.)  The wrapper's grid
also stops at the most blocks the routing can fill.
"""

from __future__ import annotations

import sympy

import wavec as wc
from wavec import Memory, Register, f32
from wavec.kernels.decode import kernel_function
from wavec.kernels.gemm import BLOCK_K, BLOCK_M, BLOCK_N, GROUP_M, NUM_STAGES, K, M, N, gemm_constraints

T, E, G, J, TK, R, S, GE = wc.sym.T, wc.sym.E, wc.sym.G, wc.sym.J, wc.sym.TK, wc.sym.R, wc.sym.S, wc.sym.GE
KS = wc.sym.KS  # the routing's slots per token (the split combine's S is KS * SPLIT rows)
P, BLOCK_P = wc.sym.P, wc.sym.BLOCK_P
SPLIT = wc.sym.SPLIT  # split-K slices of the down-projection (grid axis 2, bound in subs)
COMBINE_VEC = 8  # elements per lane of the combine's 16-byte (bf16/f16) runs
REMAP_WAVES = 4
SWAP_ROWS = 64  # weight rows of one m64 wgmma (swap-AB: the weight rows are its M axis)
SWAP_THREADS = 128  # threads of a warpgroup


def gemm_tiles(tpw: int, mma, block_m: int) -> list:
    """BLOCK_M x BLOCK_N workgroup tiles over NUM_STAGES stages: 2 x 2 waves, or 1 x 4 for a 16-row
    token block (a wave's M tile is one m16 instruction).  GROUP_M > 1 launches GROUP_M token blocks
    together along N (``reorder_workgroups``): the blocks of one expert are adjacent in M, so an expert
    weight tile is read by GROUP_M blocks while it is in L2 (for experts larger than the usable L2)."""
    waves = (1, 4) if block_m < 32 else (2, 2)
    return gemm_constraints(tpw, mma, waves, wc.SchedulingConstraint(num_stages=NUM_STAGES, group_size=GROUP_M))


def swap_warpgroups(block_m: int, block_n: int, block_k: int, elem_bytes: int = 2) -> int:
    """Warpgroups of a swap-AB tile along the weight rows: one per 64 rows, halved while the token tile
    (BLOCK_M x BLOCK_K) would have fewer 16-byte runs than the workgroup has threads (each thread copies
    whole runs: ``infer_indices.copy_layout`` narrows them otherwise, and 2-byte runs leave ``cp.async``);
    a warpgroup then issues two or four m64 instructions per K step."""
    wg = block_n // SWAP_ROWS
    while wg > 1 and block_m * block_k * elem_bytes // 16 < wg * SWAP_THREADS:
        wg //= 2
    return wg


def swap_tiles(mma, warpgroups: int) -> list:
    """The swap-AB tiles: BLOCK_M tokens x BLOCK_N weight rows per workgroup over ``warpgroups`` along the
    weight rows (the wgmma M axis: a multiple of 64 each), every token of the block in each warpgroup
    (its N axis), K in steps of BLOCK_K over NUM_STAGES ``cp.async`` stages (gathered rows: TMA boxes
    cannot express them), GROUP_M as in ``gemm_tiles``."""
    return [
        wc.WorkgroupConstraint(M, BLOCK_M, 0),
        wc.WorkgroupConstraint(N, BLOCK_N, 1),
        wc.WaveConstraint(M, BLOCK_M),
        wc.WaveConstraint(N, BLOCK_N / warpgroups),
        wc.TilingConstraint(K, BLOCK_K),
        wc.HardwareConstraint(threads_per_wave=32, mma_type=mma),
        wc.SchedulingConstraint(num_stages=NUM_STAGES, group_size=GROUP_M, async_copy="cp.async"),
    ]


def wgmma_tiles(mma, warpgroups: int) -> list:
    """Large token blocks on wgmma (``MoeConfig(wgmma=True)``): BLOCK_M tokens (the instruction's M axis)
    over ``warpgroups`` of 64 rows, each with the whole BLOCK_N of weight rows (its N axis), K in steps of
    BLOCK_K over NUM_STAGES ``cp.async`` stages (gathered token rows and the per-block expert: no TMA box),
    GROUP_M as in ``gemm_tiles``."""
    return [
        wc.WorkgroupConstraint(M, BLOCK_M, 0),
        wc.WorkgroupConstraint(N, BLOCK_N, 1),
        wc.WaveConstraint(M, BLOCK_M / warpgroups),
        wc.WaveConstraint(N, BLOCK_N),
        wc.TilingConstraint(K, BLOCK_K),
        wc.HardwareConstraint(threads_per_wave=32, mma_type=mma),
        wc.SchedulingConstraint(num_stages=NUM_STAGES, group_size=GROUP_M, async_copy="cp.async"),
    ]


def _tiles(tpw: int, mma, block_m: int, swap_waves: int | None, wgmma_waves: int | None = None) -> list:
    """``swap_tiles`` when ``swap_waves`` (warpgroups) is given, ``wgmma_tiles`` when ``wgmma_waves`` is,
    else ``gemm_tiles``."""
    if swap_waves is not None:
        return swap_tiles(mma, swap_waves)
    return gemm_tiles(tpw, mma, block_m) if wgmma_waves is None else wgmma_tiles(mma, wgmma_waves)


def _acc(swap: bool):
    """A zero accumulator: [M, N] (tokens, weight rows), or [N, M] for swap-AB."""
    return Register[N, M, f32](0.0) if swap else Register[M, N, f32](0.0)


def _product(rows, weight, acc, swap: bool):
    """``acc + rows @ weight.T`` in the accumulator's orientation: swap-AB puts the weight rows first (the
    wgmma's 64-row M operand) and the token rows second (its N operand)."""
    return wc.mma(weight, rows, acc) if swap else wc.mma(rows, weight, acc)


def _per_token(v, swap: bool):
    """A per-token [M] value broadcast over the accumulator's other dimension."""
    return v[None, :] if swap else v[:, None]


def _activation(g, name: str):
    if name == "silu":
        return wc.silu(g)
    return 0.5 * g * (1.0 + wc.erf(g * 0.7071067811865476))  # vLLM's "gelu": exact erf GELU


def _exit_unless_local(expert_ids) -> None:
    """The workgroup returns at once unless its token block has a local expert (not -1 past the last
    run, not the skip expert E)."""
    blk = wc.read(expert_ids, mapping={J: wc.tile_start(M) // BLOCK_M})
    wc.exit_if((blk < 0) | (blk >= E))


def _block_expert(expert_ids):
    """The expert of this workgroup's token block along N, as an index of the weights (a mapping value
    must be a tensor: every element is the same, loaded once per row that uses it)."""
    return wc.read(expert_ids, mapping={J: wc.index(N) * 0 + wc.tile_start(M) // BLOCK_M})


def make_up(
    dtype, top_k: int, activation: str, weighted_input: bool, tpw: int, mma, block_m: int,
    swap_waves: int | None = None, wgmma_waves: int | None = None,
):  # fmt: skip
    """``moe_up(x [T, K], sorted_ids [M], expert_ids [J], w1 [E, G=2, N, K], weights [TK] f32, inter [M, N])``;
    ``swap_waves``: swap-AB on wgmma (``mma`` a warpgroup type) over that many warpgroups
    (``swap_warpgroups``); ``wgmma_waves``: the token block on wgmma's M axis over that many warpgroups
    (``wgmma_tiles``); else ``gemm_tiles``."""
    swap = swap_waves is not None

    @wc.wave(_tiles(tpw, mma, block_m, swap_waves, wgmma_waves))
    def moe_up(
        x: Memory[T, K, dtype], sorted_ids: Memory[M, wc.i32], expert_ids: Memory[J, wc.i32],
        w1: Memory[E, G, N, K, dtype], weights: Memory[TK, f32], inter: Memory[M, N, dtype],
    ):  # fmt: skip
        _exit_unless_local(expert_ids)
        e = _block_expert(expert_ids)
        ids = wc.read(sorted_ids)
        rows = wc.minimum(ids // top_k, T - 1)  # the sentinel T*k would be row T

        @wc.iterate(K, init_args=[_acc(swap), _acc(swap)])
        def body(g, u):
            a = wc.read(x, mapping={T: rows})
            gate, up = wc.read(w1, mapping={E: e, G: 0}), wc.read(w1, mapping={E: e, G: 1})
            return _product(a, gate, g, swap), _product(a, up, u, swap)

        g, u = body
        if weighted_input:
            w = _per_token(wc.read(weights, mapping={TK: wc.minimum(ids, TK - 1)}), swap)
            g, u = g * w, u * w
        wc.write(wc.cast(_activation(g, activation) * u, dtype), inter)

    return moe_up


def split_tiles(tiles: list) -> list:
    """``tiles`` with the SPLIT K slices as grid axis 2 (one slice per workgroup along it)."""
    return [wc.WorkgroupConstraint(SPLIT, 1, 2), *tiles]


def split_bounds() -> tuple:
    """(start, end) in K of this workgroup's slice: whole K steps, balanced over SPLIT (``split_tiles``)."""
    steps, q = sympy.ceiling(K / BLOCK_K), wc.tile_start(SPLIT)
    return sympy.floor(q * steps / SPLIT) * BLOCK_K, sympy.floor((q + 1) * steps / SPLIT) * BLOCK_K


def _down(
    inter, sorted_ids, expert_ids, w2, weights, y, top_k: int, weighted_output: bool, store: bool, dtype, swap: bool,
    split: bool,
):  # fmt: skip
    """The down-projection's body; ``store``: one row per (token, slot) into ``y``, else atomic adds;
    ``swap``: the accumulator is [N, M] (swap-AB); ``split``: this workgroup's K slice only
    (``split_bounds``)."""
    _exit_unless_local(expert_ids)
    e = _block_expert(expert_ids)
    ids = wc.read(sorted_ids)
    start, end = split_bounds() if split else (None, None)

    @wc.iterate(K, init_args=[_acc(swap)], start=start, end=end)
    def body(acc):
        return _product(wc.read(inter), wc.read(w2, mapping={E: e}), acc, swap)

    if weighted_output:
        body = body * _per_token(wc.read(weights, mapping={TK: wc.minimum(ids, TK - 1)}), swap)
    # a select, not a product: -0.0 and NaN * 0 would break the padding row's equal zeros
    val = wc.where(_per_token(ids < TK, swap), body, 0.0)
    if store and split:  # f32 partials, one row per (token, slot, slice)
        wc.write(val, y, mapping={R: ids * SPLIT + wc.tile_start(SPLIT)})
    elif store:
        wc.write(wc.cast(val, dtype), y, mapping={R: ids})
    else:  # the sentinel T*k is row T, the scratch row
        wc.atomic_add(val, y, mapping={R: ids // top_k})


def make_down(
    dtype, top_k: int, weighted_output: bool, deterministic: bool, tpw: int, mma, block_m: int,
    swap_waves: int | None = None, split_k: bool = False, wgmma_waves: int | None = None,
):  # fmt: skip
    """``moe_down(inter [M, K], sorted_ids [M], expert_ids [J], w2 [E, N, K], weights [TK] f32, y)`` with
    ``y`` [R = TK + 1, N] in ``dtype`` (deterministic) or f32 [R = T + 1, N] (atomic adds); ``swap_waves``
    and ``wgmma_waves`` as for ``make_up``; ``split_k``: SPLIT K slices (subs), deterministic ones into f32
    [R = (TK + 1) * SPLIT, N] (row ``id * SPLIT + slice``)."""
    flags = (top_k, weighted_output, deterministic, dtype, swap_waves is not None, split_k)
    tiles = _tiles(tpw, mma, block_m, swap_waves, wgmma_waves)
    tiles = split_tiles(tiles) if split_k else tiles
    name = ("moe_down" if deterministic else "moe_down_atomic") + ("_split" if deterministic and split_k else "")
    params = [
        ("inter", Memory[M, K, dtype]), ("sorted_ids", Memory[M, wc.i32]), ("expert_ids", Memory[J, wc.i32]),
        ("w2", Memory[E, N, K, dtype]), ("weights", Memory[TK, f32]),
        ("y", Memory[R, N, dtype if deterministic and not split_k else f32]),
    ]  # fmt: skip

    def run(inter, sorted_ids, expert_ids, w2, weights, y) -> None:
        _down(inter, sorted_ids, expert_ids, w2, weights, y, *flags)

    return wc.wave(tiles)(kernel_function(name, params, run))


def make_combine(dtype, tpw: int = 32, waves: int = 2, split: bool = False) -> wc.WaveKernel:
    """``moe_combine(y [T, S, N], local [T, S] i32, out [T, N], limit)``: one token per workgroup (a batch
    dim), N in ``waves`` wave-wide 16-byte runs, the S slots whose ``local < limit`` summed in f32.
    ``split``: ``y`` f32 [T, S = KS * SPLIT, N], the split-K partials of each slot, ``local`` [T, KS]."""
    constraints = [
        wc.WorkgroupConstraint(N, BLOCK_N, 0),
        wc.WorkgroupConstraint(T, 1, 1),
        wc.WorkgroupConstraint(S, S, None),
        wc.WaveConstraint(N, BLOCK_N / waves),
        wc.HardwareConstraint(threads_per_wave=tpw, vector_shapes={S: 1, N: tpw * COMBINE_VEC}),
    ]

    def run(y, local, out, limit) -> None:
        slot = {KS: wc.index(S) // SPLIT} if split else None  # the slot of each of a token's k * SPLIT rows
        keep = wc.read(local, mapping=slot) < limit
        rows = wc.read(y) if split else wc.cast(wc.read(y), f32)
        wc.write(wc.cast(wc.sum(wc.where(keep[:, None], rows, 0.0), S), dtype), out)

    params = [
        ("y", Memory[T, S, N, f32 if split else dtype]), ("local", Memory[T, KS if split else S, wc.i32]),
        ("out", Memory[T, N, dtype]), ("limit", wc.Scalar[wc.i32]),
    ]  # fmt: skip
    return wc.wave(constraints)(kernel_function("moe_combine_split" if split else "moe_combine", params, run))


def make_remap(tpw: int = 32) -> wc.WaveKernel:
    """``moe_remap(topk_ids [P] i32, expert_map [GE] i32, local [P] i32, skip)``: ``expert_map[id]``, -1 -> skip."""
    constraints = [
        wc.WorkgroupConstraint(P, BLOCK_P, 0),
        wc.WaveConstraint(P, BLOCK_P / REMAP_WAVES),
        wc.HardwareConstraint(threads_per_wave=tpw, vector_shapes={P: tpw}),
    ]

    @wc.wave(constraints)
    def moe_remap(
        topk_ids: Memory[P, wc.i32], expert_map: Memory[GE, wc.i32], local: Memory[P, wc.i32], skip: wc.Scalar[wc.i32]
    ):
        mapped = wc.read(expert_map, mapping={GE: wc.read(topk_ids)})
        wc.write(wc.where(mapped < 0, skip, mapped), local)

    return moe_remap


def gemm_subs(block_m: int, block_n: int, block_k: int, stages: int, group_m: int = 1, split: int = 0) -> dict:
    """The GEMMs' tile subs; ``split`` > 0: SPLIT too (a split-K down-projection)."""
    subs = {BLOCK_M: block_m, BLOCK_N: block_n, BLOCK_K: block_k, NUM_STAGES: stages, GROUP_M: group_m}
    return {**subs, SPLIT: split} if split else subs


def combine_subs(top_k: int, tpw: int = 32, waves: int = 2, split: int = 1) -> dict:
    """The combine's subs; ``split`` > 1: the split-K form (``make_combine(split=True)``)."""
    subs = {BLOCK_N: waves * tpw * COMBINE_VEC, S: top_k * split}
    return {**subs, SPLIT: split} if split > 1 else subs


def remap_subs(tpw: int = 32) -> dict:
    return {BLOCK_P: REMAP_WAVES * tpw}
