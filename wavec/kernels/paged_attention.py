"""Decode attention over a paged KV cache (vLLM's flash layout), read through the block table.

``out[b, i, h] = softmax(q[b, i, h] · K_bᵀ · scale) V_b`` where K_b / V_b are the first ``seq_lens[b]``
positions of sequence ``b``: position ``n`` lives in page ``block_tables[b, n // PAGE]`` of the cache, at
row ``n % PAGE``.  The ``q_len`` new tokens are the last ``q_len`` positions (their K/V already in the
cache); query ``i`` sees positions ``<= seq_len - q_len + i``.

How the body maps onto the compiler (docs/data_dependent.md, "Worked example: paged decode attention"):
- one workgroup per (sequence, kv head): B and KVH are batch dims; the rows M of the query tile are the
  (query, head-of-the-group) pairs, ``m = i * G + g``, read from q through a computed mapping, so the G
  query heads of a kv head share every K/V tile (one read of the cache per kv head);
- the loop walks the keys N of the longest block table (``N = P * PAGE``: a derived size, bound in
  ``subs``) and masks by the sequence's length (a rank-0 value read from ``seq_lens``);
- K and V tiles are gathered through the block table with the two-level mapping: the page entry per key,
  then the key's row of that page (16-byte runs along D, staged through shared memory for ldmatrix);
- positions past the end are clamped to the last one, ``min(n, seq_len - 1)``, before the block table is
  read: entries past a sequence's end may be garbage and are never read, and the clamped K/V rows are
  real data (finite) whose probabilities are exactly 0.  Tiles wholly past the end re-read that one row.
"""

from __future__ import annotations

import math
from typing import Any

import wavec as wc
from wavec import Memory, Register, f32
from wavec.tuning.plan import MMA_SYNC_FOR_DTYPE

B, KVH, H, QL, M, N, D = wc.sym.B, wc.sym.KVH, wc.sym.H, wc.sym.QL, wc.sym.M, wc.sym.N, wc.sym.D
NB, PG, P = wc.sym.NB, wc.sym.PG, wc.sym.P  # cache blocks, rows of a block (the page size), block-table width
BLOCK_M, BLOCK_N = wc.sym.BLOCK_M, wc.sym.BLOCK_N
LOG2E = 1.0 / math.log(2.0)
NEG_INF = float("-inf")
HEAD_DIMS = (64, 128)
MAX_Q_LEN = 16
# (rows of the query tile = q_len * G, head dim) -> (BLOCK_N, waves); every wave holds 16 rows.  One wave
# while the rows fit (waves without rows would only add mma work), 4 beyond.  bf16, ptxas 13 for sm_80 /
# sm_90a: 186-188, 252-254, 180-190 and 178-180 registers, no spills; (64, 4) at d64 spilled 108 bytes on
# sm_80 (ptxas stopped at 128 registers), (64, 2) at d128 sat at 254.
CONFIGS = {(16, 64): (64, 1), (16, 128): (32, 1), (64, 64): (128, 4), (64, 128): (64, 4)}
TORCH_DTYPES = ("float16", "bfloat16")


def paged_constraints(dtype=wc.f16, waves: int = 1, threads_per_wave: int = 32, mma_type=None) -> list:
    """``waves`` waves of 16 query rows (``mma_type``: mma.sync m16n8k16 for ``dtype`` by default; gfx942
    takes ``threads_per_wave=64`` and the MFMA); K/V copies stay synchronous (a paged read's block is
    computed in the loop: ``pipeline_loops``)."""
    return [
        wc.WorkgroupConstraint(M, BLOCK_M, 0),
        wc.WorkgroupConstraint(KVH, 1, 1),
        wc.WorkgroupConstraint(B, 1, 2),
        wc.WorkgroupConstraint(D, D, None),
        wc.WaveConstraint(M, BLOCK_M / waves),
        wc.TilingConstraint(N, BLOCK_N),
        wc.HardwareConstraint(threads_per_wave=threads_per_wave, mma_type=mma_type or MMA_SYNC_FOR_DTYPE[dtype.name]),
        wc.SchedulingConstraint(operand_swizzle="none"),
    ]


def make_paged_attention(dtype=wc.f16, group: int = 1, page: int = 16, **constraints: Any) -> wc.WaveKernel:
    """The kernel ``paged_attention(q, k_cache, v_cache, block_tables, seq_lens, out, scale)`` for ``group``
    query heads per kv head and ``page`` rows per cache block; ``constraints``: ``paged_constraints``'s
    keywords.  Compile with ``paged_subs``: the rows M and keys N are derived sizes."""
    q_type = Memory[B, QL, H, D, dtype]
    cache_type = Memory[NB, PG, KVH, D, dtype]

    @wc.wave(paged_constraints(dtype, **constraints))
    def paged_attention(
        q: q_type,
        k_cache: cache_type,
        v_cache: cache_type,
        block_tables: Memory[B, P, wc.i32],
        seq_lens: Memory[B, wc.i32],
        out: q_type,
        scale: wc.Scalar[f32],
    ):
        rows = wc.index(M)  # row m is query m // G of head kv_head * G + m % G
        q_rows = {QL: rows // group, H: rows % group + wc.tile_start(KVH) * group}
        qr = wc.read(q, mapping=q_rows)
        seq_len = wc.read(seq_lens)  # this sequence's length (a rank-0 value)
        last = seq_len - 1
        # query i sees positions <= seq_len - q_len + i (rows past q_len * G are never written)
        limit = wc.arange(M)[:, None] // group + (seq_len - QL)
        c = scale * LOG2E
        init = [Register[M, f32](NEG_INF), Register[M, f32](0.0), Register[M, D, f32](0.0)]

        @wc.iterate(N, init_args=init)
        def body(m_i: Register[M, f32], l_i: Register[M, f32], acc: Register[M, D, f32]):
            pos = wc.minimum(wc.index(N), last)  # never past the end: the entries there may be garbage
            blk = wc.read(block_tables, mapping={P: pos // page})
            kv_rows = {NB: blk, PG: pos % page}
            s = wc.mma(qr, wc.read(k_cache, mapping=kv_rows), Register[M, N, f32](0.0))
            s = wc.where(wc.arange(N)[None, :] <= limit, s, NEG_INF)
            m_new = wc.maximum(m_i, wc.max(s, N))  # finite from the first tile on: position 0 is always seen
            p = wc.exp2(s * c - (m_new * c)[:, None])
            alpha = wc.exp2((m_i - m_new) * c)
            l_new = l_i * alpha + wc.sum(p, N)
            vt = wc.permute(wc.read(v_cache, mapping=kv_rows), (D, N))
            return m_new, l_new, wc.mma(wc.cast(p, dtype), vt, acc * alpha[:, None])

        _m, l_final, acc_final = body
        wc.write(wc.cast(acc_final * wc.reciprocal(l_final)[:, None], dtype), out, mapping=q_rows)

    return paged_attention


def paged_subs(head_dim: int, group: int, page: int, block_n: int, waves: int) -> dict:
    """``subs`` of a kernel: the tile, the head dim, the page size and the derived sizes (rows
    ``M = QL * G``, keys ``N = P * PAGE``), so one binary serves every q_len, batch and block-table width."""
    return {BLOCK_M: 16 * waves, BLOCK_N: block_n, D: head_dim, PG: page, M: QL * group, N: P * page}


def paged_config(head_dim: int, rows: int, config: tuple | None = None) -> tuple[int, int]:
    """(BLOCK_N, waves): ``config`` if given, else ``CONFIGS``'s entry for ``rows = q_len * G`` query rows."""
    if config is not None:
        block_n, waves = config
        return block_n, waves
    return CONFIGS[(16 if rows <= 16 else 64, 128 if head_dim > 64 else 64)]


_COMPILED: dict = {}


def _kernel(dtype, head_dim: int, group: int, page: int, config: tuple[int, int], backend: str | None):
    key = (dtype.name, head_dim, group, page, config, backend)
    if key not in _COMPILED:
        block_n, waves = config
        subs = paged_subs(head_dim, group, page, block_n, waves)
        _COMPILED[key] = wc.compile(make_paged_attention(dtype, group, page, waves=waves), subs, backend=backend)
    return _COMPILED[key]


def _fail(message: str) -> wc.WavecError:
    return wc.WavecError(message=f"paged_attention: {message}")


def _check_tensors(q: Any, k_cache: Any, v_cache: Any, block_tables: Any, seq_lens: Any) -> Any:
    """The wavec dtype of the call, or a ``WavecError`` naming the argument that is wrong."""
    import torch

    dtype_name = str(q.dtype).removeprefix("torch.")
    if dtype_name not in TORCH_DTYPES:
        raise _fail(f"q must be float16 or bfloat16, got {dtype_name}")
    if q.dim() != 4:
        raise _fail(f"q must be 4-D [batch, q_len, heads, head_dim], got shape {list(q.shape)}")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dim() != 4 or t.dtype != q.dtype:
            raise _fail(
                f"{name} must be a 4-D {q.dtype} tensor [num_blocks, page_size, kv_heads, head_dim], "
                f"got {t.dim()}-D {t.dtype}"
            )
    if tuple(v_cache.shape) != tuple(k_cache.shape):
        raise _fail(f"v_cache has shape {list(v_cache.shape)} but k_cache {list(k_cache.shape)}")
    batch, q_len, heads, head_dim = q.shape
    _blocks, _page, kv_heads, cache_dim = k_cache.shape
    if head_dim not in HEAD_DIMS or cache_dim != head_dim:
        raise _fail(f"head_dim must be one of {HEAD_DIMS} in q and the caches, got q {head_dim}, cache {cache_dim}")
    if not 1 <= q_len <= MAX_Q_LEN:
        raise _fail(f"q_len (q.shape[1]) must be 1..{MAX_Q_LEN}, got {q_len}")
    if heads % kv_heads:
        raise _fail(f"{heads} query heads (q.shape[2]) are not a multiple of {kv_heads} kv heads (k_cache.shape[2])")
    for name, t, shape in (("block_tables", block_tables, "[batch, max_blocks]"), ("seq_lens", seq_lens, "[batch]")):
        if t.dtype != torch.int32:
            raise _fail(f"{name} must be int32, got {str(t.dtype).removeprefix('torch.')}")
        if t.dim() != shape.count(",") + 1 or t.shape[0] != batch:
            raise _fail(f"{name} must be {shape} with batch = {batch}, got shape {list(t.shape)}")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache), ("block_tables", block_tables), ("seq_lens", seq_lens)):
        if t.device != q.device:
            raise _fail(f"{name} is on {t.device} but q is on {q.device}")
    return wc.f16 if dtype_name == "float16" else wc.bf16


def _check_lengths(q: Any, k_cache: Any, block_tables: Any, seq_lens: Any) -> None:
    """Data checks of CPU tensors (the emulator's): lengths within [q_len, max_blocks * page_size], the
    block ids a sequence uses within the cache.  On a GPU they would cost a synchronisation; the kernel
    never reads a block-table entry past ``seq_len`` and the emulator checks every access anyway."""
    import torch

    if q.is_cuda:
        return
    q_len, (blocks, page) = q.shape[1], k_cache.shape[:2]
    capacity = block_tables.shape[1] * page
    bad = (seq_lens < q_len) | (seq_lens > capacity)
    if bool(bad.any()):
        b = int(bad.nonzero()[0, 0])
        raise _fail(
            f"seq_lens[{b}] = {int(seq_lens[b])} must be in [q_len, max_blocks * page_size] = [{q_len}, {capacity}]"
        )
    used = torch.arange(block_tables.shape[1]) < ((seq_lens.long() + page - 1) // page)[:, None]
    wrong = used & ((block_tables < 0) | (block_tables >= blocks))
    if bool(wrong.any()):
        b, j = (int(x) for x in wrong.nonzero()[0])
        raise _fail(f"block_tables[{b}, {j}] = {int(block_tables[b, j])} is not a block of k_cache (0..{blocks - 1})")


def paged_attention(
    q, k_cache, v_cache, block_tables, seq_lens, *, scale: float | None = None, backend: str | None = None, config=None
):
    """Decode attention over a paged KV cache (vLLM's flash layout); returns a new tensor shaped like q.

    q [B, q_len, Hq, D] (f16 or bf16; q_len 1..16), k_cache / v_cache [num_blocks, page_size, Hkv, D]
    (Hq a multiple of Hkv: grouped-query and multi-query heads; D 64 or 128; any page size),
    block_tables [B, max_blocks] int32, seq_lens [B] int32: each sequence's length including its q_len
    new tokens, whose K/V are already in the cache.  Query i attends to positions <= seq_len - q_len + i.
    Block-table entries past a sequence's end are never read (they may be -1 or garbage).  Softmax and
    accumulation in f32; ``scale`` defaults to 1/sqrt(D).  ``config = (BLOCK_N, waves)`` overrides
    ``paged_config``.  All tensors contiguous and on one device (CPU tensors run on the emulator)."""
    import torch

    dtype = _check_tensors(q, k_cache, v_cache, block_tables, seq_lens)
    _check_lengths(q, k_cache, block_tables, seq_lens)
    batch, q_len, heads, head_dim = q.shape
    group, page = heads // k_cache.shape[2], k_cache.shape[1]
    out = torch.empty_like(q)
    if out.numel():
        config = paged_config(head_dim, q_len * group, config)
        kernel = _kernel(dtype, head_dim, group, page, config, backend)
        kernel(q, k_cache, v_cache, block_tables, seq_lens, out, 1.0 / math.sqrt(head_dim) if scale is None else scale)
    return out


def register_paged_attention_op(
    dtype=wc.f16,
    head_dim: int = 128,
    page_size: int = 16,
    group: int = 1,
    q_len: int = 1,
    name: str | None = None,
    backend: str | None = None,
):
    """Register the kernel for one configuration as ``torch.ops.<ns>.<op>(q, k_cache, v_cache,
    block_tables, seq_lens, scale)`` (returns out; ``<op>_out`` takes it); its tile is chosen for
    ``q_len`` queries of ``group`` heads, but it serves any q_len up to 16.  Returns the operator."""
    config = paged_config(head_dim, q_len * group)
    name = name or f"wavec::paged_attention_{dtype.name}_d{head_dim}_p{page_size}_g{group}_n{config[0]}w{config[1]}"
    kernel = _kernel(dtype, head_dim, group, page_size, config, backend)
    return wc.register_torch_op(kernel, name)
