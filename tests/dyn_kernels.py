"""Kernels with data-dependent addresses (DESIGN §12), shared by the emulator, binary, IR and GPU tiers:
each ``make_*`` returns a kernel and ``reference_*`` computes its result with torch."""

from __future__ import annotations

import torch

import wavec as wc
from wavec import Memory, Register, f16, f32
from wavec.kernels import gemm

M, N, K, T = wc.sym.M, wc.sym.N, wc.sym.K, wc.sym.T
S, D, P, B, SLOT, REL = wc.sym.S, wc.sym.D, wc.sym.P, wc.sym.B, wc.sym.SLOT, wc.sym.REL
BM, BN, BK = wc.sym.BLOCK_M, wc.sym.BLOCK_N, wc.sym.BLOCK_K
PAGE, R, TOP_K = 16, 5, 2
GEMM_SUBS = {BM: 32, BN: 32, BK: 32}


def gemm_constraints(mma=wc.MMAType.NV_F32_16x8x16_F16, tpw: int = 32, stages: int = 3) -> list:
    """The library GEMM's constraints (2 x 2 waves) with ``stages`` fixed."""
    return gemm.gemm_constraints(tpw, mma, (2, 2), wc.SchedulingConstraint(num_stages=stages))


def make_gather_gemm(constraints: list) -> wc.WaveKernel:
    """``c[ids[m] // TOP_K] += (w[m] * x[ids[m] // TOP_K] @ b.T)``: gathered A rows (staged, pipelined),
    a weighted, scattered, atomically combined output (the MoE building block)."""

    @wc.wave(constraints)
    def gather_gemm(
        x: Memory[T, K, f16], ids: Memory[M, wc.i32], b: Memory[N, K, f16], w: Memory[M, f32], c: Memory[T, N, f32]
    ):
        rows = wc.read(ids)
        acc = Register[M, N, f32](0.0)

        @wc.iterate(K, init_args=[acc])
        def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
            return wc.mma(wc.read(x, mapping={T: rows // TOP_K}), wc.read(b), acc)

        wc.atomic_add(body * wc.read(w)[:, None], c, mapping={T: rows // TOP_K})

    return gather_gemm


def make_gathered_rows_gemm(constraints: list) -> wc.WaveKernel:
    """``c = x[ids // TOP_K] @ b.T``: gathered A rows (staged, pipelined), C written in order: the gather's
    cost alone, for the benchmark against the dense GEMM."""

    @wc.wave(constraints)
    def gathered_rows_gemm(x: Memory[T, K, f16], ids: Memory[M, wc.i32], b: Memory[N, K, f16], c: Memory[M, N, f32]):
        rows = wc.read(ids)
        acc = Register[M, N, f32](0.0)

        @wc.iterate(K, init_args=[acc])
        def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
            return wc.mma(wc.read(x, mapping={T: rows // TOP_K}), wc.read(b), acc)

        wc.write(body, c)

    return gathered_rows_gemm


def reference_gather_gemm(x, ids, b, w, c):
    t = (ids // TOP_K).long()
    return c.clone().index_add_(0, t, w[:, None] * (x[t].float() @ b.float().T))


def make_paged_read() -> wc.WaveKernel:
    """Two-level read: a block table row per sequence, then K rows through it (a paged KV cache)."""
    constraints = [
        wc.WorkgroupConstraint(S, 32, 0),
        wc.WorkgroupConstraint(D, 64, 1),
        wc.WorkgroupConstraint(B, 1, 2),
        wc.WaveConstraint(S, 8),
        wc.HardwareConstraint(threads_per_wave=32, vector_shapes={S: 4, D: 8}),
    ]

    @wc.wave(constraints)
    def paged(block_table: Memory[B, P, wc.i32], kc: Memory[SLOT, D, f16], out: Memory[B, S, D, f16]):
        blk = wc.read(block_table, mapping={P: wc.index(S) // PAGE})
        wc.write(wc.read(kc, mapping={SLOT: blk * PAGE + wc.index(S) % PAGE}), out)

    return paged


def reference_paged(block_table, kc, s_len: int):
    s = torch.arange(s_len)
    return torch.stack([kc[bt[s // PAGE].long() * PAGE + s % PAGE] for bt in block_table])


def make_relative_bias() -> wc.WaveKernel:
    """``out = x + bias[clip(m - n, -R, R) + R]`` (T5-style relative positions): a computed index."""
    constraints = [
        wc.WorkgroupConstraint(M, 16, 0),
        wc.WorkgroupConstraint(N, 64, 1),
        wc.WaveConstraint(M, 4),
        wc.HardwareConstraint(threads_per_wave=32, vector_shapes={M: 1, N: 32}),
    ]

    @wc.wave(constraints)
    def relative_bias(bias: Memory[REL, f32], x: Memory[M, N, f32], out: Memory[M, N, f32]):
        rel = wc.clip(wc.index(M) - wc.index(N), -R, R) + R
        wc.write(wc.read(x) + wc.read(bias, mapping={REL: rel}), out)

    return relative_bias


def reference_relative_bias(bias, x):
    m, n = torch.meshgrid(torch.arange(x.shape[0]), torch.arange(x.shape[1]), indexing="ij")
    return x + bias[(m - n).clamp(-R, R) + R]


def row_constraints(vec: int = 4, tpw: int = 32) -> list:
    return [
        wc.WorkgroupConstraint(M, 4, 0),
        wc.WorkgroupConstraint(N, tpw * vec, 1),
        wc.WaveConstraint(M, 1),
        wc.HardwareConstraint(threads_per_wave=tpw, vector_shapes={M: 1, N: tpw * vec}),
    ]


def make_scatter(index_dtype=wc.i64, tpw: int = 32) -> wc.WaveKernel:
    @wc.wave(row_constraints(tpw=tpw))
    def scatter(src: Memory[M, N, f32], idx: Memory[M, index_dtype], out: Memory[T, N, f32]):
        wc.write(wc.read(src), out, mapping={T: wc.read(idx)})

    return scatter


def make_atomic(kind: str, dtype=f32, tpw: int = 32) -> wc.WaveKernel:
    fn = {"add": wc.atomic_add, "min": wc.atomic_min, "max": wc.atomic_max}[kind]

    @wc.wave(row_constraints(tpw=tpw))
    def atomic(src: Memory[M, N, dtype], idx: Memory[M, wc.i32], out: Memory[T, N, dtype]):
        fn(wc.read(src), out, mapping={T: wc.read(idx) // 2})

    return atomic


def paged_kv_inputs(
    seq_lens: list[int], q_len: int, heads: int, kv_heads: int, head_dim: int, page: int, dtype, device="cpu"
):
    """Fresh inputs of a paged decode step: q, k_cache, v_cache, block_tables, seq_lens.  Each sequence's
    blocks are a random permutation of the cache's; entries past a sequence's end are garbage (-1 or
    huge), and cache rows no sequence uses (the tail of a last page, spare blocks) hold NaN: a kernel that
    reads them, or lets them reach the result, fails."""
    torch_dtype = dtype.torch()
    used = [(s + page - 1) // page for s in seq_lens]
    max_blocks, num_blocks = max(used) + 2, sum(used) + 3
    q = torch.randn(len(seq_lens), q_len, heads, head_dim, device=device).to(torch_dtype)
    k_cache = torch.randn(num_blocks, page, kv_heads, head_dim, device=device).to(torch_dtype)
    v_cache = torch.randn(num_blocks, page, kv_heads, head_dim, device=device).to(torch_dtype)
    garbage = torch.tensor([-1, 2**30, -(2**31), num_blocks], dtype=torch.int32)
    block_tables = garbage[torch.randint(0, 4, (len(seq_lens), max_blocks))]
    perm, start = torch.randperm(num_blocks), 0
    for b, (s, n) in enumerate(zip(seq_lens, used)):
        block_tables[b, :n] = perm[start : start + n]
        start += n
        k_cache[block_tables[b, n - 1], s - (n - 1) * page :] = float("nan")
        v_cache[block_tables[b, n - 1], s - (n - 1) * page :] = float("nan")
    k_cache[perm[start:]] = float("nan")
    v_cache[perm[start:]] = float("nan")
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    return q, k_cache, v_cache, block_tables.to(device), lens.to(device)


def _decode_mask(s_len: int, q_len: int, slopes, device) -> torch.Tensor:
    """The bottom-right causal mask of a decode step ([q_len, S] bool), or with ALiBi ``slopes`` [Hq] the
    additive [Hq, q_len, S] mask: -inf where unseen, else ``-slope * (pos_q - pos_k)``."""
    pos = torch.arange(s_len, device=device)
    pos_q = s_len - q_len + torch.arange(q_len, device=device)
    seen = pos[None, :] <= pos_q[:, None]
    if slopes is None:
        return seen
    bias = -slopes.float().view(-1, 1, 1) * (pos_q[:, None] - pos[None, :]).float()
    return bias.masked_fill(~seen, float("-inf"))


def reference_paged_attention(q, k_cache, v_cache, block_tables, seq_lens, scale=None, alibi_slopes=None):
    """f32 attention of each sequence over its gathered, contiguous K/V (torch SDPA with the causal mask
    aligned bottom-right: query i of q_len sees positions <= seq_len - q_len + i; ALiBi slopes [Hq])."""
    batch, q_len, heads, head_dim = q.shape
    page, kv_heads = k_cache.shape[1], k_cache.shape[2]
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for b in range(batch):
        s_len = int(seq_lens[b])
        pos = torch.arange(s_len, device=q.device)
        blocks = block_tables[b, pos // page].long()
        k = k_cache[blocks, pos % page].float().repeat_interleave(heads // kv_heads, 1)  # [S, Hq, D]
        v = v_cache[blocks, pos % page].float().repeat_interleave(heads // kv_heads, 1)
        seen = _decode_mask(s_len, q_len, alibi_slopes, q.device)
        out[b] = torch.nn.functional.scaled_dot_product_attention(
            q[b].float().transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=seen, scale=scale
        ).transpose(0, 1)
    return out


def dense_kv_inputs(
    seq_lens: list[int],
    q_len: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    dtype,
    s_max: int | None = None,
    device="cpu",
):
    """Fresh inputs of a dense-cache decode step: q [B, q_len, Hq, D], k / v [B, S_max, Hkv, D], seq_lens.
    Cache rows past each sequence's end hold large finite garbage (1e4): a kernel that lets them reach the
    result, or misplaces the causal limit, fails."""
    torch_dtype = dtype.torch()
    s_max = s_max or max(seq_lens)
    q = torch.randn(len(seq_lens), q_len, heads, head_dim, device=device).to(torch_dtype)
    k = torch.randn(len(seq_lens), s_max, kv_heads, head_dim, device=device).to(torch_dtype)
    v = torch.randn(len(seq_lens), s_max, kv_heads, head_dim, device=device).to(torch_dtype)
    for b, s in enumerate(seq_lens):
        k[b, s:], v[b, s:] = 1e4, -1e4
    return q, k, v, torch.tensor(seq_lens, dtype=torch.int32, device=device)


def reference_decode_attention(q, k, v, seq_lens, scale=None, alibi_slopes=None):
    """f32 attention of each sequence over its first seq_len cache rows, the causal mask aligned
    bottom-right (query i of q_len sees positions <= seq_len - q_len + i; ALiBi slopes [Hq])."""
    batch, q_len, heads, _ = q.shape
    group = heads // k.shape[2]
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for b in range(batch):
        s_len = int(seq_lens[b])
        kb = k[b, :s_len].float().repeat_interleave(group, 1).transpose(0, 1)  # [Hq, S, D]
        vb = v[b, :s_len].float().repeat_interleave(group, 1).transpose(0, 1)
        seen = _decode_mask(s_len, q_len, alibi_slopes, q.device)
        qb = q[b].float().transpose(0, 1)
        out[b] = torch.nn.functional.scaled_dot_product_attention(qb, kb, vb, attn_mask=seen, scale=scale).transpose(
            0, 1
        )
    return out


def make_atomic_old(kind: str, dtype=wc.i32, tpw: int = 32) -> wc.WaveKernel:
    """The atomic's result used: ``old`` gets the values ``out`` held before each update."""
    fn = {"add": wc.atomic_add, "min": wc.atomic_min, "max": wc.atomic_max}[kind]

    @wc.wave(row_constraints(tpw=tpw))
    def atomic_old(
        src: Memory[M, N, dtype], idx: Memory[M, wc.i32], out: Memory[T, N, dtype], old: Memory[M, N, dtype]
    ):
        wc.write(fn(wc.read(src), out, mapping={T: wc.read(idx) // 2}), old)

    return atomic_old


def sequential_atomic(kind: str, out, rows, src):
    """``out`` after applying ``src[m]`` to row ``rows[m]`` for m in order (in ``out``'s precision, one
    rounding per update, like the emulator's lane order for ``row_constraints`` kernels), and the old rows."""
    out, old = out.clone(), torch.empty_like(src)
    op = {"add": torch.add, "min": torch.minimum, "max": torch.maximum}[kind]
    for m, r in enumerate(rows.tolist()):
        old[m] = out[r]
        out[r] = op(out[r], src[m])
    return out, old
