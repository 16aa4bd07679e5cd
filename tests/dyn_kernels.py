"""Kernels with data-dependent addresses (DESIGN §12), shared by the emulator, binary, IR and GPU tiers:
each ``make_*`` returns a kernel and ``reference_*`` computes its result with torch."""

from __future__ import annotations

import torch

import wavec as wc
from wavec import Memory, Register, f16, f32

M, N, K, T = wc.sym.M, wc.sym.N, wc.sym.K, wc.sym.T
S, D, P, B, SLOT, REL = wc.sym.S, wc.sym.D, wc.sym.P, wc.sym.B, wc.sym.SLOT, wc.sym.REL
BM, BN, BK = wc.sym.BLOCK_M, wc.sym.BLOCK_N, wc.sym.BLOCK_K
PAGE, R, TOP_K = 16, 5, 2
GEMM_SUBS = {BM: 32, BN: 32, BK: 32}


def gemm_constraints(mma=wc.MMAType.NV_F32_16x8x16_F16, tpw: int = 32, stages: int = 3) -> list:
    return [
        wc.WorkgroupConstraint(M, BM, 0),
        wc.WorkgroupConstraint(N, BN, 1),
        wc.WaveConstraint(M, BM / 2),
        wc.WaveConstraint(N, BN / 2),
        wc.TilingConstraint(K, BK),
        wc.HardwareConstraint(threads_per_wave=tpw, mma_type=mma),
        wc.SchedulingConstraint(num_stages=stages),
    ]


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
