"""Row kernels of any length: ``softmax``, ``rms_norm`` and ``layer_norm`` over the last dimension, one
binary per (dtype, tile) for every row count M and row length N (both launch values).

A row of up to ``BLOCK_N`` elements is one masked workgroup tile (``WorkgroupConstraint(N, BLOCK_N)``,
a grid of one along N): read once, reduced, written.  Longer rows are walked twice in tiles of
``BLOCK_N`` (``TilingConstraint``): the first loop carries the row's statistics in f32 (softmax: the
running max and the sum rescaled to it, as flash attention does; RMSNorm: the sum of squares;
LayerNorm: count, mean and M2 of each tile merged with Chan's formula, so a large mean does not cancel
the variance away), the second reads each tile again (from L2 for the rows in flight) and writes the
result in the input dtype (one-tile LayerNorm of f16/bf16: its statistics in one pass, ``row_stats``).  The last tile
masks its columns past N (``arange(N) < N``: -inf for the max, 0 for the sums).  One-tile rows take
several waves each past 4 runs per lane (``config_for``; LayerNorm tiles from 4096 bf16: one row per
workgroup at 2 runs a lane, ``make_layer_norm_long``); looped rows a wave each (several would need N
split by a workgroup tile, which must be static).  Row
lengths that are not a multiple of the 16-byte run take ``rows_odd`` (16-byte chunks of each row's
interior, its edges element by element) from one wave's unit up to one tile, slices whose offset within
16 bytes drifts from row to row too (``rows_odd_drift``); shorter and longer ones the launcher's narrow
variant (``docs/sizes_and_strides.md``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import wavec as wc
from wavec import Memory, Register, f32
from wavec.kernels import rows_odd
from wavec.kernels.fastpath import Decisions, as_rows, tensor_key
from wavec.kernels.row_stats import deviations, one_pass, two_sum

M, N = wc.sym.M, wc.sym.N
BLOCK_N = wc.sym.BLOCK_N
LOG2E = 1.0 / math.log(2.0)
NEG_INF = float("-inf")
ROWS = 4  # rows (waves) per workgroup when a row has one wave
KINDS = ("softmax", "rms_norm", "layer_norm")


def row_constraints(
    dtype=wc.f16, loop: bool = True, tpw: int = 32, vec: int | None = None, waves_per_row: int = 1
) -> list:
    """``ROWS`` rows per workgroup, a wave each; N in loop tiles of ``BLOCK_N`` (bound in subs), or
    (``loop=False``) one workgroup tile of ``BLOCK_N`` >= N, optionally split over ``waves_per_row``
    waves (two rows per workgroup then: a tile of one row would make M a batch dim); each lane ``vec``
    elements per run (16 bytes by default)."""
    vec = vec or 16 // dtype.bytes
    along_n = wc.TilingConstraint(N, BLOCK_N) if loop else wc.WorkgroupConstraint(N, BLOCK_N, 1)
    split = [wc.WaveConstraint(N, BLOCK_N / waves_per_row)] if waves_per_row > 1 else []
    return [
        wc.WorkgroupConstraint(M, ROWS if waves_per_row == 1 else 2, 0),
        wc.WaveConstraint(M, 1),
        along_n,
        *split,
        wc.HardwareConstraint(threads_per_wave=tpw, vector_shapes={M: 1, N: tpw * vec}),
    ]


def _tile(x, masked: bool, fill: float):
    """The f32 values of this tile of ``x``; columns past N are ``fill`` in the masked (last) tile."""
    v = wc.cast(wc.read(x), f32)
    return wc.where(wc.arange(N)[None, :] < N, v, fill) if masked else v


def _listed(results) -> list:
    """An ``iterate``'s results as a list (one carried value comes back bare)."""
    return list(results) if isinstance(results, (list, tuple)) else [results]


def _row_pass(x, fill: float, init: list, first, second, loop: bool) -> None:
    """``first(*carried, v, masked)`` folds a tile ``v`` into the statistics, ``second(*stats, v)`` writes
    a tile.  One tile (``loop=False``): read once, masked.  Loops: ``first`` over the full tiles then the
    masked last one, then ``second`` over every tile read again."""
    if not loop:
        v = _tile(x, True, fill)  # columns past N: ``fill``, and their stores are masked
        second(*_listed(first(*init, v=v, masked=True)), v=v)
        return
    whole = N // BLOCK_N * BLOCK_N

    @wc.iterate(N, init_args=init, end=whole)
    def full(*carried):
        return first(*carried, v=_tile(x, False, fill), masked=False)

    @wc.iterate(N, init_args=_listed(full), start=whole)
    def edge(*carried):
        return first(*carried, v=_tile(x, True, fill), masked=True)

    stats = _listed(edge)

    @wc.iterate(N, init_args=[])
    def out_loop() -> list:
        second(*stats, v=wc.cast(wc.read(x), f32))
        return []


def make_softmax_rows(dtype=wc.f16, loop: bool = True, **constraints: Any) -> wc.WaveKernel:
    """``out = softmax(x, -1)`` for ``x [M, N]``; a row of -inf (or NaN) gives NaN, as torch."""

    @wc.wave(row_constraints(dtype, loop, **constraints))
    def softmax_rows(x: Memory[M, N, dtype], out: Memory[M, N, dtype]):
        def first(m_i, l_i, v, masked: bool):
            m_new = wc.maximum(m_i, wc.max(v, N))
            p = wc.exp2((v - m_new[:, None]) * LOG2E)
            return m_new, l_i * wc.exp2((m_i - m_new) * LOG2E) + wc.sum(p, N)

        def second(m_i, l_i, v) -> None:
            wc.write(wc.cast(wc.exp2((v - m_i[:, None]) * LOG2E) * wc.reciprocal(l_i)[:, None], dtype), out)

        _row_pass(x, NEG_INF, [Register[M, f32](NEG_INF), Register[M, f32](0.0)], first, second, loop)

    return softmax_rows


def make_rms_norm_rows(dtype=wc.f16, loop: bool = True, **constraints: Any) -> wc.WaveKernel:
    """``out = x * rsqrt(mean(x**2) + eps) * w`` for ``x [M, N]``, ``w [N]``."""

    @wc.wave(row_constraints(dtype, loop, **constraints))
    def rms_norm_rows(
        x: Memory[M, N, dtype], w: Memory[N, dtype], out: Memory[M, N, dtype], eps: wc.Scalar[f32],
        inv_n: wc.Scalar[f32],
    ):  # fmt: skip
        def first(ss, v, masked: bool):
            return (ss + wc.sum(v * v, N),)

        def second(ss, v) -> None:
            r = wc.rsqrt(ss * inv_n + eps)
            wc.write(wc.cast(v * wc.cast(wc.read(w), f32)[None, :] * r[:, None], dtype), out)

        _row_pass(x, 0.0, [Register[M, f32](0.0)], first, second, loop)

    return rms_norm_rows


def _first(x, mapping: dict):
    """Each row's first element of ``x``, f32 (``mapping`` puts column 0 in the row's place)."""
    return wc.cast(wc.read(x, mapping=mapping), f32)


def _row_sum(v):
    return wc.sum(v, N)


def make_layer_norm_rows(dtype=wc.f16, block_n: int = 256, loop: bool = True, **constraints: Any) -> wc.WaveKernel:
    """``out = (x - mean) * rsqrt(var + eps) * w + b`` (biased variance, as torch) for ``x [M, N]``;
    ``block_n``: the value of ``BLOCK_N`` in subs (a full tile's count)."""

    @wc.wave(row_constraints(dtype, loop, **constraints))
    def layer_norm_rows(
        x: Memory[M, N, dtype], w: Memory[N, dtype], b: Memory[N, dtype], out: Memory[M, N, dtype],
        eps: wc.Scalar[f32], inv_n: wc.Scalar[f32],
    ):  # fmt: skip
        def first(n_a, mean_hi, mean_lo, m2_a, v, masked: bool):
            # the statistics of x less the row's first element (``row_stats``), combined tile by tile
            # (Chan et al.), the running mean an exact (hi, lo) pair: as one f32 it rounds by its own size,
            # up to the row's spread from the shift, at every tile
            v = v - shift[:, None]
            if masked:
                cols = wc.cast(wc.arange(N)[None, :] < N, f32)
                n_b = wc.sum(cols, N)
                inv_b = wc.reciprocal(n_b)
                v = v * cols
                mean_b = wc.sum(v, N) * inv_b
                d = (v - mean_b[:, None]) * cols
            else:
                n_b = Register[M, f32](float(block_n))
                inv_b = Register[M, f32](1.0 / block_n)
                mean_b = wc.sum(v, N) * inv_b
                d = v - mean_b[:, None]
            m2_b = wc.sum(d * d, N)
            delta = mean_b - (mean_hi + mean_lo)
            if not one_pass(dtype):  # f32: the tile sum's rounding, summed over the spread only
                fix = wc.sum(d, N) * inv_b
                m2_b, delta = m2_b - fix * fix * n_b, delta + fix
            n = n_a + n_b
            share = wc.where(n_a > 0.0, n_b * wc.reciprocal(n), 1.0)  # (exactly the first tile's mean)
            hi, lo = two_sum(mean_hi, delta * share)
            return n, hi, mean_lo + lo, m2_a + m2_b + delta * delta * n_a * share

        def second(_n, mean_hi, mean_lo, m2, v) -> None:
            r = wc.rsqrt(m2 * inv_n + eps)
            hi, lo = two_sum(shift, mean_hi)  # (x - hi) - lo: one rounding near the mean (``row_stats``)
            lo = lo + mean_lo
            y = ((v - hi[:, None]) - lo[:, None]) * r[:, None] * wc.cast(wc.read(w), f32)[None, :]
            wc.write(wc.cast(y + wc.cast(wc.read(b), f32)[None, :], dtype), out)

        if loop:
            shift = _first(x, mapping={N: wc.index(M) * 0})
            _row_pass(x, 0.0, [Register[M, f32](0.0) for _ in range(4)], first, second, loop)
            return
        inside = wc.arange(N)[None, :] < N
        v = wc.where(inside, wc.cast(wc.read(x), f32), 0.0)
        d, r = deviations(v, inside, _first(x, mapping={N: wc.index(M) * 0}), _row_sum, eps, inv_n, dtype)
        y = d * r[:, None] * wc.cast(wc.read(w), f32)[None, :] + wc.cast(wc.read(b), f32)[None, :]
        wc.write(wc.cast(y, dtype), out)

    return layer_norm_rows


def _long_constraints(dtype, waves_per_row: int, tpw: int, vec: int | None) -> list:
    """One row per workgroup (M a batch dim), one tile of ``BLOCK_N`` over ``waves_per_row`` waves."""
    vec = vec or 16 // dtype.bytes
    return [
        wc.WorkgroupConstraint(M, 1, 0),
        wc.WorkgroupConstraint(N, BLOCK_N, 1),
        wc.WaveConstraint(N, BLOCK_N / waves_per_row),
        wc.HardwareConstraint(threads_per_wave=tpw, vector_shapes={N: tpw * vec}),
    ]


def make_rms_norm_long(dtype=wc.f16, waves_per_row: int = 8, tpw: int = 32, vec: int | None = None) -> wc.WaveKernel:
    """RMSNorm of one tile of ``BLOCK_N`` over ``waves_per_row`` waves, one row per workgroup: ``kernel_for``'s
    layout for tiles of ``RMS_LONG_UNITS`` (8192 bf16: 0.96 of copy on an H200 where two rows of 8 waves
    read at 0.72; at 16384 it reads at 0.71 against the two-row tile's 0.82, ``benchmarks/rows_sweep.py``)."""

    @wc.wave(_long_constraints(dtype, waves_per_row, tpw, vec))
    def rms_norm_long(
        x: Memory[M, N, dtype], w: Memory[N, dtype], out: Memory[M, N, dtype], eps: wc.Scalar[f32],
        inv_n: wc.Scalar[f32],
    ):  # fmt: skip
        v = wc.where(wc.arange(N) < N, wc.cast(wc.read(x), f32), 0.0)
        r = wc.rsqrt(wc.sum(v * v, N) * inv_n + eps)
        wc.write(wc.cast(v * r * wc.cast(wc.read(w), f32), dtype), out)

    return rms_norm_long


def make_softmax_long(dtype=wc.f16, waves_per_row: int = 8, tpw: int = 32, vec: int | None = None) -> wc.WaveKernel:
    """Softmax of one tile of ``BLOCK_N`` over ``waves_per_row`` waves, one row per workgroup (a candidate
    layout as ``make_rms_norm_long``); a row of -inf gives NaN, as torch."""

    @wc.wave(_long_constraints(dtype, waves_per_row, tpw, vec))
    def softmax_long(x: Memory[M, N, dtype], out: Memory[M, N, dtype]):
        v = wc.where(wc.arange(N) < N, wc.cast(wc.read(x), f32), NEG_INF)
        p = wc.exp2((v - wc.max(v, N)) * LOG2E)
        wc.write(wc.cast(p * wc.reciprocal(wc.sum(p, N)), dtype), out)

    return softmax_long


def make_layer_norm_long(
    dtype=wc.f16, waves_per_row: int = 16, tpw: int = 32, vec: int | None = None, reread: bool = False
) -> wc.WaveKernel:
    """LayerNorm of one tile of ``BLOCK_N`` over ``waves_per_row`` waves, one row per workgroup (M a batch
    dim), statistics in one pass for f16/bf16 (``row_stats``: the shift the row's first element).
    ``reread`` reads x a second time after the statistics (from L1), so no row lives in registers across
    the barrier: ``kernel_for``'s f16/bf16 layout from 8192 (``LN_LONG_UNITS``), ``LN_REREAD_RUNS`` runs
    a lane (docs/performance.md, session 11: 0.81-0.86 of copy on an H200 where the row kept in
    registers, 98 of them, read at 0.64-0.76).  f32's two passes need the row twice anyway: it keeps it
    (re-read, 4096 and 8192 f32 fell from 0.96 / 0.93 to 0.87 / 0.84)."""

    @wc.wave(_long_constraints(dtype, waves_per_row, tpw, vec))
    def layer_norm_long(
        x: Memory[M, N, dtype], w: Memory[N, dtype], b: Memory[N, dtype], out: Memory[M, N, dtype],
        eps: wc.Scalar[f32], inv_n: wc.Scalar[f32],
    ):  # fmt: skip
        inside = wc.arange(N) < N
        v = wc.where(inside, wc.cast(wc.read(x), f32), 0.0)
        shift = _first(x, mapping={N: 0})
        # re-reading x after the statistics (an L1 hit) frees the row's registers across the barrier
        again = wc.where(inside, wc.cast(wc.read(x), f32), 0.0) if reread else None
        d, r = deviations(v, inside, shift, _row_sum, eps, inv_n, dtype, again=again)
        wc.write(wc.cast(d * r * wc.cast(wc.read(w), f32) + wc.cast(wc.read(b), f32), dtype), out)

    return layer_norm_long


DTYPES = {"float16": wc.f16, "bfloat16": wc.bf16, "float32": wc.f32}
MAKERS: dict[str, Callable[..., wc.WaveKernel]] = {
    "softmax": make_softmax_rows, "rms_norm": make_rms_norm_rows, "layer_norm": make_layer_norm_rows,
}  # fmt: skip


RUNS_PER_WAVE = 4  # 16-byte runs per lane and wave of a one-tile row (32 f32 values per thread)
MAX_WAVES_PER_ROW = 16  # two rows of 16 waves: 1024 threads, a workgroup's limit
# rows of up to this many elements are one tile: f32 past RUNS_PER_WAVE * MAX_WAVES_PER_ROW units (8192)
# takes twice the runs a lane (32 f32 values, as bf16's 16384) instead of looping over one-wave tiles
# (docs/reductions.md, session 15); contiguous ones take ``rows_odd`` instead (``aligned_elements``), so
# this serves slices
MAX_TILE_ELEMENTS = 16384
LN_LONG_UNITS = 32  # LayerNorm tiles of at least 32 units (8192 bf16): ``make_layer_norm_long``
# ... that re-reads x after the statistics, so holds no row across the barrier: twice the runs a lane
LN_REREAD_RUNS = 8
# RMSNorm tiles of exactly 32 units (8192 bf16) one row per workgroup (``make_rms_norm_long``): three
# 256-thread workgroups an SM where two rows of 8 waves fit one (docs/performance.md, session 10's sweep)
RMS_LONG_UNITS = 32


def config_for(dtype, n: int, kind: str = "softmax") -> tuple[int, bool, int, int]:
    """(``BLOCK_N``, loop, elements per lane-run, waves per row) for rows of ``n`` elements, with ``unit``
    = 32 lanes x 16 bytes.  A row of up to ``RUNS_PER_WAVE * MAX_WAVES_PER_ROW`` units (16384 bf16) is one
    tile read once: the next power of two from one unit (narrower runs for shorter rows: 96 bf16 would
    leave 62% of a 256-wide tile idle), over as many waves as give each ``RUNS_PER_WAVE`` runs per lane
    (one wave holding 8 runs of a 2048-element row needed so many registers that RMSNorm reached 0.64 of
    copy bandwidth on an H100); LayerNorm tiles of ``LN_LONG_UNITS`` or more one row per workgroup,
    f16/bf16 re-read with ``LN_REREAD_RUNS`` runs a lane (``make_layer_norm_long``; at 4096 bf16 two rows
    of 4 waves read at 0.89 of copy, one of 4 re-read at 0.85).  f32 rows of up to ``MAX_TILE_ELEMENTS``
    are one tile too, over ``MAX_WAVES_PER_ROW`` waves at twice the runs a lane (RMSNorm one row a
    workgroup).  Longer rows loop over tiles of ``8 * unit`` with one wave each,
    as do rows of a length the run does not divide past ``8 * unit`` (their one-element runs were 2x
    slower split over waves).  A handful of binaries per kind and dtype, each for every N up to its tile
    (or every N, looping)."""
    block_n, loop, vec, waves, _ = plan_for(dtype, n, kind)
    return block_n, loop, vec, waves


def plan_for(dtype, n: int, kind: str = "softmax") -> tuple[int, bool, int, int, str]:
    """``config_for``'s tuple and the kernel maker it implies: ``"rows"`` (``MAKERS[kind]``),
    ``"layer_norm_long"`` or ``"rms_norm_long"``; the one place the layout is chosen."""
    vec = 16 // dtype.bytes
    unit = 32 * vec
    narrow = n % vec != 0  # (``rows_odd`` takes most of these) the narrow variant: one-element runs
    if n > (8 * unit if narrow else max(RUNS_PER_WAVE * MAX_WAVES_PER_ROW * unit, MAX_TILE_ELEMENTS)):
        return 8 * unit, True, vec, 1, "rows"
    while vec > 1 and 16 * vec >= n:
        vec //= 2
    tile = 32 * vec
    while tile < n:
        tile *= 2
    if narrow:
        return tile, False, vec, 1, "rows"
    if kind == "layer_norm" and tile >= LN_LONG_UNITS * unit:  # f32 keeps its row: fewer runs a lane
        runs = LN_REREAD_RUNS if one_pass(dtype) else RUNS_PER_WAVE
        return tile, False, vec, min(MAX_WAVES_PER_ROW, max(1, tile // (runs * unit))), "layer_norm_long"
    waves = min(MAX_WAVES_PER_ROW, max(1, tile // (RUNS_PER_WAVE * unit)))
    long_tile = tile > RUNS_PER_WAVE * MAX_WAVES_PER_ROW * unit  # (f32 past 8192: two rows would spill)
    if kind == "rms_norm" and (waves == RMS_LONG_UNITS // RUNS_PER_WAVE or long_tile) and vec == 16 // dtype.bytes:
        return tile, False, vec, waves, "rms_norm_long"
    return tile, False, vec, waves, "rows"


_COMPILED: dict = {}


def kernel_for(kind: str, dtype, n: int) -> tuple[wc.WaveKernel, dict]:
    """(kernel, subs) of the aligned-row kernel ``config_for`` picks for rows of ``n`` (also the perf model's)."""
    block_n, loop, vec, waves, layout = plan_for(dtype, n, kind)
    if layout == "layer_norm_long":
        return make_layer_norm_long(dtype, waves, vec=vec, reread=one_pass(dtype)), {BLOCK_N: block_n}
    if layout == "rms_norm_long":
        return make_rms_norm_long(dtype, waves, vec=vec), {BLOCK_N: block_n}
    extra = {"block_n": block_n} if kind == "layer_norm" else {}
    return MAKERS[kind](dtype, loop=loop, vec=vec, waves_per_row=waves, **extra), {BLOCK_N: block_n}


def _kernel(kind: str, dtype, n: int, backend: str | None):
    key = (kind, dtype.name, *config_for(dtype, n, kind), backend)
    if key not in _COMPILED:
        _COMPILED[key] = wc.compile(*kernel_for(kind, dtype, n), backend=backend)
    return _COMPILED[key]


def _rows(op: str, x: Any, dim: int = -1) -> tuple[Any, Any, Any]:
    """(wavec dtype, ``x`` as [rows, N] with N the last dim, ``per_call``: ``fastpath.as_rows``) or a
    ``WavecError`` naming ``x``.  Rows keep their pitch (a slice ``x[:, :N]``, a head of a packed projection:
    a view, launched with its strides); rows whose elements are not adjacent are copied."""
    import torch

    if not isinstance(x, torch.Tensor):
        raise wc.WavecError(message=f"{op}: x must be a torch.Tensor, got {type(x).__name__}")
    name = str(x.dtype).removeprefix("torch.")
    if name not in DTYPES or x.dim() == 0:
        raise wc.WavecError(
            message=f"{op}: x must be a tensor of at least one dim of {sorted(DTYPES)}, got {x.dim()}-D {name}"
        )
    if dim not in range(-x.dim(), x.dim()) or (dim % x.dim()) != x.dim() - 1:
        raise wc.WavecError(message=f"{op}: dim must be the last dim (-1 or {x.dim() - 1}), got {dim}")
    return (DTYPES[name], *as_rows(x, (-1, x.shape[-1])))


def _vector(op: str, name: str, v: Any, x: Any) -> Any:
    """A weight or bias: ``None`` is ones (or zeros for a bias); else [N] of x's dtype and device."""
    import torch

    n = x.shape[-1]
    if v is None:
        return (torch.ones if name == "weight" else torch.zeros)(n, dtype=x.dtype, device=x.device)
    if not isinstance(v, torch.Tensor) or tuple(v.shape) != (n,) or v.dtype != x.dtype or v.device != x.device:
        got = f"{tuple(v.shape)} {v.dtype} on {v.device}" if isinstance(v, torch.Tensor) else type(v).__name__
        raise wc.WavecError(message=f"{op}: {name} must be [{n}] {x.dtype} on {x.device}, got {got}")
    return v.contiguous()


def _eps(op: str, eps: Any) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0:
        raise wc.WavecError(message=f"{op}: eps must be a float >= 0, got {eps!r}")
    return float(eps)


def softmax(x, dim: int = -1, *, backend: str | None = None):
    """``torch.softmax(x, dim)`` along the last dim, any row length; f16, bf16 or f32, computed in f32 and
    returned in x's dtype.  Rows with any pitch run in place (``_rows``)."""
    key = ("softmax", tensor_key(x), dim, backend)
    run = _DECIDED.get(key)
    if run is None:
        run = _DECIDED.remember(key, _runner("softmax", x, dim, backend))
    return run(x)


def rms_norm(x, weight=None, eps: float = 1e-6, *, backend: str | None = None):
    """``x * rsqrt(mean(x**2, -1) + eps) * weight`` over the last dim (``weight`` None: ones), as
    ``torch.nn.functional.rms_norm(x, (N,), weight, eps)``; statistics in f32."""
    key = ("rms_norm", tensor_key(x), tensor_key(weight), eps, backend)
    run = _DECIDED.get(key)
    if run is None:
        run = _DECIDED.remember(key, _runner("rms_norm", x, -1, backend, weight, None, eps))
    return run(x, weight)


def layer_norm(x, weight=None, bias=None, eps: float = 1e-5, *, backend: str | None = None):
    """``torch.nn.functional.layer_norm(x, (N,), weight, bias, eps)`` over the last dim (biased variance,
    statistics in f32: in one tile ``row_stats`` (f16/bf16: sums of x less the row's first element); Chan's merge of
    per-tile means and sums of squares across loop tiles)."""
    key = ("layer_norm", tensor_key(x), tensor_key(weight), tensor_key(bias), eps, backend)
    run = _DECIDED.get(key)
    if run is None:
        run = _DECIDED.remember(key, _runner("layer_norm", x, -1, backend, weight, bias, eps))
    return run(x, weight, bias)


# (op, tensor keys, options) -> run(x[, weight[, bias]]): what a row op decided for them
_DECIDED = Decisions("rows")


def _runner(op: str, x: Any, dim: Any, backend: str | None, weight: Any = None, bias: Any = None, eps: Any = None):
    """Validate one call (errors name the argument) and return ``run(x[, weight[, bias]])`` for calls with
    the same tensor keys: allocate the output, launch the prepared kernel (contiguous copies where the
    first call needed them, the ones / zeros made here for a missing weight / bias)."""
    import torch

    dtype, rows, per_call = _rows(op, x, dim)
    given = (weight, bias)[: 0 if op == "softmax" else 1 if op == "rms_norm" else 2]
    vectors = [_vector(op, name, v, x) for name, v in zip(("weight", "bias"), given)]
    e, inv_n = (0.0, 0.0) if op == "softmax" else (_eps(op, eps), 1.0 / rows.shape[1])
    shape, tdtype, device, empty = x.shape, x.dtype, x.device, torch.empty
    if not rows.numel():
        return lambda x, *_: empty(shape, dtype=tdtype, device=device)
    scalars = () if op == "softmax" else (e, inv_n)
    pitch = rows.stride(0) if rows.shape[0] > 1 else rows.shape[1]
    fits = rows_odd.starts_fit(rows.shape[0], rows.shape[1], pitch)
    if fits and rows_odd.odd_config(dtype, rows.shape[1], op, pitch) is not None:
        odd = rows_odd.odd_runner(op, dtype, rows, shape, per_call, scalars, backend)
        return lambda x, *g: odd(x, *(v if w is None else w.contiguous() for v, w in zip(vectors, g)))
    out = empty(shape, dtype=tdtype, device=device)
    launch = _kernel(op, dtype, rows.shape[1], backend).prepare(
        rows, *vectors, out.view(rows.shape), *(() if op == "softmax" else (e, inv_n)), fresh_outputs=True
    )
    # per vector: the tensor made here for a missing one, else whether a given one is copied per call
    made = [v if g is None else None for v, g in zip(vectors, given)]
    copy = [g is not None and not g.is_contiguous() for g in given]

    def vector(i: int, g: Any) -> Any:
        return made[i] if g is None else g.contiguous() if copy[i] else g

    def fresh() -> Any:
        return empty(shape, dtype=tdtype, device=device)

    if op == "softmax":

        def run(x: Any) -> Any:
            out = fresh()
            launch(per_call(x), out)
            return out

        return run
    if op == "rms_norm":

        def run_rms(x: Any, w: Any) -> Any:
            out = fresh()
            launch(per_call(x), vector(0, w), out, e, inv_n)
            return out

        return run_rms

    def run_ln(x: Any, w: Any, b: Any) -> Any:
        out = fresh()
        launch(per_call(x), vector(0, w), vector(1, b), out, e, inv_n)
        return out

    return run_ln
