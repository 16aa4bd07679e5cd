"""RMSNorm and LayerNorm over the last dimension, for rows that fit one workgroup tile (N bound in subs).

Statistics in f32, reduced as in softmax (``row_constraints``); ``w`` (and ``b``) are read once per row
tile and broadcast over the rows.  Long rows (N = 4096) want several waves per row: one wave holding a
whole row needs ~250 registers per thread, too many for enough waves per SM to keep bytes in flight.
"""

import wavec as wc
from wavec import Memory
from wavec.kernels.row_softmax import row_constraints

M, N = wc.sym.M, wc.sym.N
BLOCK_M = wc.sym.BLOCK_M


def make_rmsnorm(
    n: int, dtype=wc.f16, eps: float = 1e-6, threads_per_wave: int = 32, waves_per_row: int = 1
) -> wc.WaveKernel:
    """``out = x / sqrt(mean(x**2) + eps) * w`` over rows of length ``n`` (compile with subs {N: n})."""

    @wc.wave(row_constraints(dtype, threads_per_wave, waves_per_row))
    def rmsnorm(x: Memory[M, N, dtype], w: Memory[N, dtype], out: Memory[M, N, dtype]):
        v = wc.cast(wc.read(x), wc.f32)
        r = wc.rsqrt(wc.sum(v * v, N) * (1.0 / n) + eps)
        wc.write(wc.cast(v * r[:, None] * wc.cast(wc.read(w), wc.f32)[None, :], dtype), out)

    return rmsnorm


def make_layernorm(
    n: int, dtype=wc.f16, eps: float = 1e-5, threads_per_wave: int = 32, waves_per_row: int = 1
) -> wc.WaveKernel:
    """``out = (x - mean) / sqrt(var + eps) * w + b`` over rows of length ``n`` (subs {N: n})."""

    @wc.wave(row_constraints(dtype, threads_per_wave, waves_per_row))
    def layernorm(x: Memory[M, N, dtype], w: Memory[N, dtype], b: Memory[N, dtype], out: Memory[M, N, dtype]):
        v = wc.cast(wc.read(x), wc.f32)
        d = v - (wc.sum(v, N) * (1.0 / n))[:, None]
        r = wc.rsqrt(wc.sum(d * d, N) * (1.0 / n) + eps)
        y = d * r[:, None] * wc.cast(wc.read(w), wc.f32)[None, :] + wc.cast(wc.read(b), wc.f32)[None, :]
        wc.write(wc.cast(y, dtype), out)

    return layernorm
