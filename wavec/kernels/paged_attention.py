"""Decode attention over a paged KV cache (vLLM's flash layout), read through the block table, split over
the keys like the dense kernel (``kernels/decode.py``: same rows, online softmax, partials and
combine).

``out[b, i, h] = softmax(q[b, i, h] · K_bᵀ · scale) V_b`` where K_b / V_b are the first ``seq_lens[b]``
positions of sequence ``b``: position ``n`` lives in page ``block_tables[b, n // PAGE]`` of the cache, at
row ``n % PAGE``.  The ``q_len`` new tokens are the last ``q_len`` positions (their K/V already in the
cache); query ``i`` sees positions ``<= seq_len - q_len + i``.

How the body maps onto the compiler (docs/data_dependent.md, "Worked example: paged decode attention"):
- one workgroup per (row tile, split, kv head, sequence): grid axis 1 is ``split * KVH + kv_head``; the
  rows M of the query tile are the (query, head-of-the-group) pairs, ``m = i * G + g``, read from q through
  a computed mapping, so the G query heads of a kv head share every K/V tile;
- split ``s`` walks keys ``[s * CHUNK, (s + 1) * CHUNK)`` of the longest block table (``N = P * PAGE``: a
  derived size, bound in ``subs``) and masks by the sequence's length (a rank-0 value read from
  ``seq_lens``);
- K and V tiles are gathered through the block table with the two-level mapping: the page entry per key,
  then the key's row of that page (16-byte runs along D, staged through shared memory for ldmatrix);
- positions past the end are clamped to the last one, ``min(n, seq_len - 1)``, before the block table is
  read: entries past a sequence's end may be garbage and are never read, and the clamped K/V rows are
  real data (finite) whose probabilities are exactly 0.  Tiles wholly past the end re-read that one row.
"""

from __future__ import annotations

from typing import Any

import wavec as wc
from wavec import Memory, Register, f32

from . import decode as da
from .decode import KVH, NEG_INF, QL, B, D, H, M, N
from .fastpath import Decisions, tensor_key

NB, PG, P = wc.sym.NB, wc.sym.PG, wc.sym.P  # cache blocks, rows of a block (the page size), block-table width
# (rows, head dim) -> (BLOCK_N, waves): the dense kernel's.  The block of a step is computed in the loop;
# ``pipeline_loops`` recomputes it for the step each ``cp.async`` fills (two stages).
CONFIGS = da.CONFIGS


def make_paged_attention(
    dtype=wc.f16, group: int = 1, page: int = 16, alibi: bool = False, one_launch: bool = False,
    direct: bool = False, **constraints: Any,
) -> wc.WaveKernel:  # fmt: skip
    """The split kernel ``paged_attention(q, k_cache, v_cache, block_tables, seq_lens, o_part, m_part,
    l_part, scale)`` for ``group`` query heads per kv head and ``page`` rows per cache block (partials as
    ``decode.make_decode_split``'s); ``constraints``: ``decode_constraints``'s keywords.  Compile
    with ``paged_subs``: the rows M, keys N and grid axis Y are derived sizes.  ``alibi``: an argument
    ``slopes`` [H] f32 after ``seq_lens`` (``decode.alibi_logits``).  ``one_launch``: ``counter`` and
    ``out`` after ``l_part``, the last split of each group combines; ``direct``: one split, ``out`` in place
    of the partials (both ``decode.make_decode_split``'s)."""
    q_type = Memory[B, QL, H, D, dtype]
    cache_type = Memory[NB, PG, KVH, D, dtype]
    split, kv_head = da.split_index(), da.kv_head_index()
    first = split * da.split_chunk(N)

    def body(q, k_cache, v_cache, block_tables, seq_lens, slopes, parts: tuple, scale) -> None:
        rows = wc.index(M)  # row m is query m // G of head kv_head * G + m % G
        q_rows = {QL: rows // group, H: rows % group + kv_head * group}
        qr = wc.read(q, mapping=q_rows)
        seq_len = wc.read(seq_lens)  # this sequence's length (a rank-0 value)
        last = seq_len - 1
        limit = wc.arange(M)[:, None] // group + (seq_len - QL)  # query i sees positions <= seq_len - QL + i
        logits, c = da.alibi_logits(slopes, q_rows[H], limit, scale)
        init = [Register[M, f32](NEG_INF), Register[M, f32](0.0), Register[M, D, f32](0.0)]

        @wc.iterate(N, init_args=init, start=first, end=first + da.split_chunk(N))
        def loop(m_i: Register[M, f32], l_i: Register[M, f32], acc: Register[M, D, f32]):
            pos = wc.minimum(wc.index(N), last)  # never past the end: the entries there may be garbage
            blk = wc.read(block_tables, mapping={P: pos // page})
            kv_rows = {NB: blk, PG: pos % page, KVH: kv_head}
            keep = wc.arange(N)[None, :] <= limit
            kt = wc.read(k_cache, mapping=kv_rows)
            vt = wc.permute(wc.read(v_cache, mapping=kv_rows), (D, N))
            return da.online_softmax_step(qr, kt, vt, keep, c, dtype, (m_i, l_i, acc), logits)

        da.finish_split(loop, c, parts, q_rows, group, dtype)

    params: list[tuple[str, Any]] = [("q", q_type), ("k_cache", cache_type), ("v_cache", cache_type)]
    params += [("block_tables", Memory[B, P, wc.i32]), ("seq_lens", Memory[B, wc.i32])]
    params += [("slopes", Memory[H, f32])] if alibi else []
    params += [*da.partial_params(dtype, one_launch, direct), ("scale", wc.Scalar[f32])]
    name = ("paged_one_launch" if one_launch else "paged_direct" if direct else "paged_attention") + (
        "_alibi" if alibi else ""
    )

    def run(*args) -> None:
        q, k_cache, v_cache, block_tables, seq_lens, *rest = args
        slopes = rest.pop(0) if alibi else None
        body(q, k_cache, v_cache, block_tables, seq_lens, slopes, tuple(rest[:-1]), rest[-1])

    constraint_list = da.decode_constraints(dtype, one_launch=one_launch, **constraints)
    return wc.wave(constraint_list)(da.kernel_function(name, params, run))


def paged_subs(head_dim: int, group: int, page: int, block_n: int, waves: int, stages: int = 2) -> dict:
    """``subs`` of a kernel: the tile, the head dim, the page size and the derived sizes (rows
    ``M = QL * G``, keys ``N = P * PAGE``, grid axis 1 ``Y = SP * KVH``), so one binary serves every
    q_len, batch, block-table width and split count."""
    return {**da.decode_subs(head_dim, group, block_n, waves, stages), PG: page, N: P * page}


def _check_blocks(k_cache: Any, block_tables: Any, seq_lens: Any) -> None:
    """The block ids a sequence uses are blocks of the cache (where ``decode.per_call_checks`` says: always
    on the emulator, under ``WAVEC_CHECK_BOUNDS=1`` on a GPU, where the kernel's bounds checks also name any
    id it reads out of range)."""
    import torch

    blocks, page = k_cache.shape[:2]
    used = torch.arange(block_tables.shape[1], device=seq_lens.device) < ((seq_lens.long() + page - 1) // page)[:, None]
    wrong = used & ((block_tables < 0) | (block_tables >= blocks))
    if bool(wrong.any()):
        b, j = (int(x) for x in wrong.nonzero()[0])
        raise da.fail(
            "paged_attention",
            f"block_tables[{b}, {j}] = {int(block_tables[b, j])} is not a block of k_cache (0..{blocks - 1})",
        )


# (tensors, options) -> SplitKV: what paged_attention decided for them (a repeated call: one lookup)
_DISPATCH = Decisions("paged_attention")


def paged_attention(
    q,
    k_cache,
    v_cache,
    block_tables,
    seq_lens,
    *,
    scale: float | None = None,
    num_splits: int | None = None,
    backend: str | None = None,
    config=None,
    alibi_slopes=None,
    one_launch: bool = False,
):
    """Decode attention over a paged KV cache (vLLM's flash layout); returns a new tensor shaped like q.

    q [B, q_len, Hq, D] (f16 or bf16; q_len 1..16), k_cache / v_cache [num_blocks, page_size, Hkv, D]
    (Hq a multiple of Hkv: grouped-query and multi-query heads; D 64 or 128; any page size),
    block_tables [B, max_blocks] int32, seq_lens [B] int32: each sequence's length including its q_len
    new tokens, whose K/V are already in the cache.  Query i attends to positions <= seq_len - q_len + i.
    Block-table entries past a sequence's end are never read (they may be -1 or garbage), nor are cache
    rows past its end.  Softmax and accumulation in f32; ``scale`` defaults to 1/sqrt(D).  ``num_splits``:
    splits of the keys (default ``decode.num_splits_for``'s rule over max_blocks * page_size
    keys); ``config = (BLOCK_N, waves[, stages])`` overrides ``decode_config``.  All tensors contiguous and on one
    device (CPU tensors run on the emulator).  Lengths outside [q_len, max_blocks * page_size] and block
    ids outside the cache are a ``WavecError`` on the emulator and, on a GPU, under
    ``WAVEC_CHECK_BOUNDS=1``.  ``one_launch``: as ``decode.decode_attention``'s (default False: two
    launches, until one launch is timed)."""
    opts = (num_splits, config, one_launch)
    tensors = (q, k_cache, v_cache, block_tables, seq_lens)
    types = (type(num_splits), type(one_launch))  # 2.0 and 0 hash as 2 and False do; the plan refuses them
    key = (*map(tensor_key, tensors), tensor_key(alibi_slopes), opts, types, backend)
    run = _DISPATCH.get(key)
    if run is None:
        run = _DISPATCH.remember(key, _plan(*tensors, opts, backend, alibi_slopes))
    return run(tensors if alibi_slopes is None else (*tensors, alibi_slopes), scale)


def _plan(q, k_cache, v_cache, block_tables, seq_lens, options: tuple, backend, slopes=None) -> da.SplitKV:
    fn = "paged_attention"
    dtype = da.check_query_and_cache(fn, q, k_cache, v_cache, "[num_blocks, page_size, kv_heads, head_dim]")
    alibi = da.check_slopes(fn, slopes, q)
    da.check_index_tensor(fn, "block_tables", block_tables, q, 2)
    da.check_index_tensor(fn, "seq_lens", seq_lens, q, 1)
    head_dim, page = q.shape[-1], k_cache.shape[1]
    keys = block_tables.shape[1] * page

    def build(group: int, block_n: int, waves: int, stages: int, one: bool, direct: bool) -> Any:
        subs = da.split_kernel_subs(paged_subs(head_dim, group, page, block_n, waves, stages), one, direct)
        return da.compiled(
            ("paged", dtype.name, head_dim, group, page, block_n, waves, stages, backend, alibi, tuple(subs.items())),
            lambda: wc.compile(
                make_paged_attention(dtype, group, page, alibi, one, direct, waves=waves), subs, backend=backend
            ),
        )

    def check(head: tuple) -> None:
        q, k_cache, _v, block_tables, seq_lens = head[:5]
        da.check_lengths(fn, q, seq_lens, keys, "max_blocks * page_size")
        _check_blocks(k_cache, block_tables, seq_lens)

    return da.plan_split_kv(fn, q, k_cache.shape[2], keys, options, build, check)
