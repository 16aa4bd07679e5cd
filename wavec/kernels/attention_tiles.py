"""Tile tables of the flash-attention kernel (``wavec/kernels/attention.py``): candidate tiles per head dim
and matrix instruction, and ``attention_config``, which picks one for a call.  Why these tiles:
docs/attention.md ("Configurations", "One-warpgroup tiles and TMA by default", "Warp specialization").
"""

from __future__ import annotations

import wavec as wc

BLOCK_M, BLOCK_N, NUM_STAGES, D, DV = wc.sym.BLOCK_M, wc.sym.BLOCK_N, wc.sym.NUM_STAGES, wc.sym.D, wc.sym.DV

# Candidate tiles (BLOCK_M, BLOCK_N, waves[, cp.async stages]) per head dim; a dim not listed takes the next
# larger one's (96: 128's).  Why 64 and 128: docs/performance.md, "Why the schedule tables are what they
# are" (registers, shared memory, measured TFLOP/s); the others: docs/attention.md, "Head dims" (ptxas
# registers; d80's copies put 2 threads on a row of 10 16-byte runs, so a workgroup's threads / 2 <= BLOCK_N).
CONFIGS: dict[int, list[tuple[int, ...]]] = {
    128: [(128, 64, 8), (64, 64, 4), (128, 64, 8, 3)],
    64: [(128, 64, 4), (128, 128, 8), (64, 64, 2), (128, 64, 4, 3)],
    80: [(64, 64, 4), (128, 128, 8)],
    192: [(128, 32, 8), (128, 64, 8), (64, 32, 4)],  # BLOCK_N 64: 100 KB of shared memory (not sm_86/89)
    256: [(128, 32, 8), (64, 32, 4)],  # BLOCK_N 64 spills
}
_SHORT: dict[int, dict[int, tuple[int, ...]]] = {
    128: {32: (32, 64, 2), 64: (64, 64, 4)},
    64: {64: (64, 64, 2)},
    80: {32: (32, 64, 2)},
    192: {64: (64, 32, 4)},
    256: {64: (64, 32, 4)},
}
# Hopper wgmma (sm_90a): (BLOCK_M, BLOCK_N, warpgroups[, stages]), each warpgroup 64 query rows; K/V by TMA
# where D is a multiple of 64 (the 128-byte swizzle span), else cp.async.
WGMMA_CONFIGS: dict[int, list[tuple[int, ...]]] = {
    128: [(64, 64, 1), (128, 128, 2), (128, 64, 2), (128, 128, 2, 3)],
    64: [(128, 64, 2), (64, 64, 1), (128, 128, 2), (128, 128, 2, 3)],
    80: [(64, 64, 1), (128, 128, 2)],
    192: [(64, 64, 1), (64, 32, 1), (128, 64, 2)],
    256: [(64, 32, 1)],  # BLOCK_N 64 spills
}
_WGMMA_SHORT: dict[int, dict[int, tuple[int, ...]]] = {128: {64: (64, 128, 1)}, 64: {64: (64, 128, 1)}}
_WGMMA_LONG_CAUSAL = {128: (16384, (128, 128, 2))}  # causal with at least this many queries
# warp_specialize: FlashAttention-3's tile, two consumer warpgroups of 64 query rows (240 registers each)
WS_CONFIG = (128, 128, 2)
# attention(warp_specialize=None) takes it for these head dims from (non-causal, causal) query lengths: where
# it beat the default tile on the H200 (session 18, docs/attention.md "Warp specialization"); shorter
# sequences (512-1024 queries) and d64 ran slower with it
WS_AUTO: dict[int, tuple[int, int]] = {128: (2048, 4096)}


def ws_default(head_dim: int, v_head_dim: int, seq_q: int, causal, mma: str, plain: bool) -> bool:
    """Whether ``attention(warp_specialize=None)`` warp-specializes: wgmma, equal Q/K and V head dims in
    ``WS_AUTO``, at least its query count for the mask, and ``plain`` (no window, soft-cap, ALiBi, the
    default ``async_copy``, overlap or tile: the options the warp-specialized kernel was timed without)."""
    if mma != "wgmma" or not plain or head_dim != v_head_dim or head_dim not in WS_AUTO:
        return False
    full, masked = WS_AUTO[head_dim]
    return seq_q >= (masked if causal else full)


HEAD_DIMS = (64, 80, 96, 128, 192, 256)  # Q/K and V head dims ``attention()`` takes (each, in any pair)


def _table_dim(head_dim: int, table: dict) -> int:
    return head_dim if head_dim in table else min((d for d in table if d >= head_dim), default=max(table))


def attention_config(
    head_dim: int,
    seq_q: int | None = None,
    config: tuple | None = None,
    mma: str = "mma_sync",
    causal: bool | str = False,
    v_head_dim: int | None = None,
    intra_wg_overlap: bool = False,
    warp_specialize: bool = False,
) -> tuple[dict, int]:
    """(subs, waves) for a head dim (``HEAD_DIMS``; V's ``v_head_dim`` when it differs: binds ``DV``, and the
    tiles are the larger dim's): ``config = (BLOCK_M, BLOCK_N, waves[, stages])`` if given, else the first
    candidate of ``CONFIGS`` (``WGMMA_CONFIGS`` for ``mma="wgmma"``, where waves are warpgroups), or a
    smaller tile when the queries fit in it, or (wgmma, causal, many queries) ``_WGMMA_LONG_CAUSAL``'s.
    ``intra_wg_overlap``: stages default to ``OVERLAP_STAGES`` (the pass needs 3) and a chosen tile wider than
    ``OVERLAP_SCORES`` falls back to the dim's default.  ``warp_specialize``: ``WS_CONFIG`` (two consumer
    warpgroups; the producer is the third)."""
    if config is None and warp_specialize:
        config = WS_CONFIG
    if config is None:
        short_tiles, configs = (_WGMMA_SHORT, WGMMA_CONFIGS) if mma == "wgmma" else (_SHORT, CONFIGS)
        hd = _table_dim(max(head_dim, v_head_dim or 0), configs)
        short = [c for rows, c in sorted(short_tiles.get(hd, {}).items()) if seq_q is not None and seq_q <= rows]
        rows, long_causal = _WGMMA_LONG_CAUSAL.get(hd, (0, None))
        if short:
            config = short[0]
        elif mma == "wgmma" and causal and long_causal and seq_q is not None and seq_q >= rows:
            config = long_causal
        else:
            config = configs[hd][0]
        if intra_wg_overlap and config[1] * hd > OVERLAP_SCORES:
            config = configs[hd][0]
    bm, bn, waves, *stages = config
    default_stages = OVERLAP_STAGES if intra_wg_overlap else 2
    subs = {BLOCK_M: bm, BLOCK_N: bn, NUM_STAGES: stages[0] if stages else default_stages, D: head_dim}
    if v_head_dim is not None and v_head_dim != head_dim:
        subs[DV] = v_head_dim
    return subs, waves


# intra_warpgroup_overlap: the next tile's K must not share a stage with the V being read (3 stages); two score
# tiles live at once: BLOCK_N x D above this spills (d128 BLOCK_N 128: 255 registers, 48-96 bytes, ptxas 13)
OVERLAP_STAGES, OVERLAP_SCORES = 3, 64 * 128
