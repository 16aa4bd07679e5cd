"""Rows whose length the 16-byte run does not divide (``softmax`` / ``rms_norm`` / ``layer_norm`` at N = 2049,
4097, ...) at the speed of aligned rows: each row is read and written through the 16-byte chunks of the flat
buffer that lie wholly inside it, and only its two partial edges element by element.

The buffer ``x`` is passed twice: as chunks ``[R, V]`` (``V`` elements = 16 bytes, the base rounded down to
16 bytes) and flat ``[F]``.  Row ``m`` starts at element ``s = starts[m]`` of the flat view; its first
whole chunk is ``c0 = ceil(s / V)``; chunks ``c0 .. c0 + K - 1`` with ``K = (N - V + 1) // V`` (the size
of ``J``, a launch value given by the shape of the never-read ``inner`` argument) lie inside the row
whatever ``s mod V``.  The register tile ``[M, J, V]`` reads them with a gather along ``R`` whose last
dim ``V`` stays affine, so ``coarsen_loads`` keeps 16-byte loads and stores.  The rest of the row (a head
of ``c0 * V - s < V`` elements, a tail of fewer than ``2V``) is the edge register ``[M, E]`` (``E`` = one
wave's lanes), gathered element by element; an edge slot past the row rereads and rewrites the row's own
first head element (or last element), the same value as its owner, so no store is masked and nothing
outside the row is touched.  Statistics combine both registers (slots outside the row masked to the
identity); the weight and bias are gathered by column (their alignment differs per row; they come from
L1/L2).  The contiguous output starts at the input's offset within 16 bytes and the pitch differs from
N by whole chunks (``gap``), so row ``m``'s output chunk is its input chunk less ``m * gap / V``.

Requires: the launcher (``odd_runner`` / ``odd_args``) passes the chunk and flat views of ``x``, ``starts``
(i32), ``inner`` of ``K`` elements, the output as chunks, ``N`` and ``gap``; ``N >= 2V``.  Guarantees:
every element of each output row is written once with a value (identical rewrites of one element aside),
nothing outside the rows is written.
"""

from __future__ import annotations

import math
from typing import Any

import wavec as wc
from wavec import Memory, f32
from wavec.kernels.row_stats import shifted_stats

M, N = wc.sym.M, wc.sym.N
R, F, R2, J, E, V = wc.sym.R, wc.sym.F, wc.sym.R2, wc.sym.J, wc.sym.E, wc.sym.V
LOG2E = 1.0 / math.log(2.0)
NEG_INF = float("-inf")
MAX_WAVES = 16  # two rows of 16 waves: 1024 threads, a workgroup's limit
EDGE = 32  # edge slots per row: a head of < V plus a tail of < 2V elements, V <= 8


def odd_constraints(block_j: int, waves: int, vec: int, tpw: int = 32) -> list:
    """``block_j`` interior chunks per row tile (a power of two >= K), split over ``waves`` waves; two rows
    per workgroup past one wave, four below (as ``rows.row_constraints``)."""
    split = [wc.WaveConstraint(J, block_j // waves)] if waves > 1 else []
    return [
        wc.WorkgroupConstraint(M, 4 if waves == 1 else 2, 0),
        wc.WaveConstraint(M, 1),
        wc.WorkgroupConstraint(J, block_j, 1),
        *split,
        wc.WorkgroupConstraint(V, V, None),
        wc.WorkgroupConstraint(E, E, None),
        wc.HardwareConstraint(threads_per_wave=tpw, vector_shapes={M: 1, J: tpw, V: vec, E: tpw}, per_thread=(V,)),
    ]


class _Row:
    """The traced pieces of one row: its first flat position ``start`` [M], the interior chunks ``v``
    [M, J, V] (f32), their chunk indices and column indices, the edge values ``e`` [M, E] (f32, every slot
    a real element of the row), their flat positions ``at``, columns and validity ``ok``."""

    def __init__(self, x, xf, starts, n, vec: int) -> None:
        s = self.start = wc.read(starts)
        c0 = (s + (vec - 1)) // vec
        self.chunk = c0[:, None] + wc.index(J)[None, :]
        self.inside = wc.index(J)[None, :, None] < J  # lanes past K: masked loads, the identity here
        self.v = wc.cast(wc.read(x, mapping={R: self.chunk}), f32)
        self.vec = vec
        self.head = c0 * vec - s
        slot = wc.index(E)[None, :]
        end = s + n
        head = self.head
        at = wc.where(slot < vec, s[:, None] + slot, ((c0 + J) * vec)[:, None] + slot - vec)
        self.ok = wc.where(slot < vec, slot < head[:, None], at < end[:, None])
        # a slot past the row takes the row's first head element (or its last): its owner's value
        self.at = wc.where(self.ok, at, wc.where(head > 0, s, end - 1)[:, None])
        self.ecol = self.at - s[:, None]
        self.e = wc.cast(wc.read(xf, mapping={F: self.at}), f32)

    def interior(self, fill: float):
        return wc.where(self.inside, self.v, fill)

    def edge(self, value, fill: float):
        return wc.where(self.ok, value, fill)

    def total(self, main, edge):
        """The row sum of ``main`` [M, J, V] (past-K lanes already the identity) and ``edge`` [M, E]."""
        return wc.sum(wc.sum(main, V), J) + wc.sum(edge, E)

    def write(self, main, edge, out, gap, dtype, vec: int) -> None:
        """Row ``m`` of the contiguous output lies ``m * gap`` elements (whole chunks) before the input's."""
        back = wc.index(M) * gap
        wc.write(wc.cast(main, dtype), out, mapping={R2: self.chunk - (back // vec)[:, None]})
        at = self.at - back[:, None]
        wc.write(wc.cast(edge, dtype), out, mapping={R2: at // vec, V: at % vec})


def _vectors(row: _Row, mem) -> tuple[Any, Any]:
    """A [N] weight or bias at the interior and edge columns, f32 (gathered element by element: a row's
    columns sit at a different offset within 16 bytes than its chunks; from L1, every row reads them)."""
    col = wc.index(J)[None, :, None] * row.vec + wc.index(V)[None, None, :] + row.head[:, None, None]
    return (wc.cast(wc.read(mem, mapping={N: col}), f32), wc.cast(wc.read(mem, mapping={N: row.ecol}), f32))


def make_softmax_odd(dtype, block_j: int, waves: int, tpw: int = 32) -> wc.WaveKernel:
    vec = 16 // dtype.bytes

    @wc.wave(odd_constraints(block_j, waves, vec, tpw))
    def softmax_odd(
        x: Memory[R, V, dtype], xf: Memory[F, dtype], starts: Memory[M, wc.i32], inner: Memory[J, wc.i8],
        out: Memory[R2, V, dtype], n: wc.Scalar[wc.i32], gap: wc.Scalar[wc.i32],
    ):  # fmt: skip
        row = _Row(x, xf, starts, n, vec)
        big = wc.maximum(wc.max(wc.max(row.interior(NEG_INF), V), J), wc.max(row.edge(row.e, NEG_INF), E))
        p = wc.exp2((row.v - big[:, None, None]) * LOG2E)
        pe = wc.exp2((row.e - big[:, None]) * LOG2E)
        inv = wc.reciprocal(row.total(wc.where(row.inside, p, 0.0), row.edge(pe, 0.0)))
        row.write(p * inv[:, None, None], pe * inv[:, None], out, gap, dtype, vec)

    return softmax_odd


def make_rms_norm_odd(dtype, block_j: int, waves: int, tpw: int = 32) -> wc.WaveKernel:
    vec = 16 // dtype.bytes

    @wc.wave(odd_constraints(block_j, waves, vec, tpw))
    def rms_norm_odd(
        x: Memory[R, V, dtype], xf: Memory[F, dtype], starts: Memory[M, wc.i32], inner: Memory[J, wc.i8],
        w: Memory[N, dtype], out: Memory[R2, V, dtype], n: wc.Scalar[wc.i32], gap: wc.Scalar[wc.i32],
        eps: wc.Scalar[f32], inv_n: wc.Scalar[f32],
    ):  # fmt: skip
        row = _Row(x, xf, starts, n, vec)
        v = row.interior(0.0)
        ss = row.total(v * v, row.edge(row.e * row.e, 0.0))
        r = wc.rsqrt(ss * inv_n + eps)
        w_in, w_edge = _vectors(row, w)
        row.write(row.v * w_in * r[:, None, None], row.e * w_edge * r[:, None], out, gap, dtype, vec)

    return rms_norm_odd


def make_layer_norm_odd(dtype, block_j: int, waves: int, tpw: int = 32) -> wc.WaveKernel:
    vec = 16 // dtype.bytes

    @wc.wave(odd_constraints(block_j, waves, vec, tpw))
    def layer_norm_odd(
        x: Memory[R, V, dtype], xf: Memory[F, dtype], starts: Memory[M, wc.i32], inner: Memory[J, wc.i8],
        w: Memory[N, dtype], b: Memory[N, dtype], out: Memory[R2, V, dtype], n: wc.Scalar[wc.i32],
        gap: wc.Scalar[wc.i32], eps: wc.Scalar[f32], inv_n: wc.Scalar[f32],
    ):  # fmt: skip
        row = _Row(x, xf, starts, n, vec)
        # one pass over x - (the row's first element): ``row_stats``
        s = wc.cast(wc.read(xf, mapping={F: row.start}), f32)
        c = wc.where(row.inside, row.v - s[:, None, None], 0.0)
        ce_all = row.e - s[:, None]  # every slot (those past the row rewrite their owner's value)
        ce = row.edge(ce_all, 0.0)
        m1, r = shifted_stats(row.total(c, ce), row.total(c * c, ce * ce), eps, inv_n)
        w_in, w_edge = _vectors(row, w)
        b_in, b_edge = _vectors(row, b)
        main = (c - m1[:, None, None]) * r[:, None, None] * w_in + b_in
        edge = (ce_all - m1[:, None]) * r[:, None] * w_edge + b_edge
        row.write(main, edge, out, gap, dtype, vec)

    return layer_norm_odd


MAKERS = {"softmax": make_softmax_odd, "rms_norm": make_rms_norm_odd, "layer_norm": make_layer_norm_odd}

RUNS_PER_WAVE = 4  # chunks per lane and wave, as the aligned one-tile rows (``rows.RUNS_PER_WAVE``)
NORM_RUNS = 2  # the norms' (up to 16 waves a row): 64 registers or fewer, see ``odd_config``


def odd_config(dtype, n: int, kind: str, pitch: int) -> tuple[int, int] | None:
    """(``block_j``, waves per row) for rows of ``n`` elements at a row pitch of ``pitch`` elements, or None
    where this path does not apply: rows the 16-byte run divides (the aligned kernels), rows of one wave's
    unit or less (one narrowed tile serves them), rows past one tile (16384 bf16; LayerNorm 8192: they loop),
    and a pitch whose offset within 16 bytes drifts from row to row against the contiguous output's.
    The norms give a lane ``NORM_RUNS`` chunks while two rows of the waves that takes fit a workgroup: their
    weight (and bias) gathered element by element hold a register each, so 4 chunks took 80-86 (RMSNorm)
    and 127-168 (LayerNorm) registers, 8-24 warps an SM; 2 chunks take 52-64, 32 warps."""
    vec = 16 // dtype.bytes
    unit = 32 * vec
    waves_cap = 8 if kind == "layer_norm" else 16
    if n % vec == 0 or n <= unit or n > RUNS_PER_WAVE * waves_cap * unit or (pitch - n) % vec:
        return None
    chunks = (n - vec + 1) // vec
    block_j = 32
    while block_j < chunks:
        block_j *= 2
    runs = NORM_RUNS if kind != "softmax" and block_j <= NORM_RUNS * 32 * MAX_WAVES else RUNS_PER_WAVE
    return block_j, max(1, block_j // (runs * 32))


_COMPILED: dict = {}


def odd_kernel(kind: str, dtype, n: int, pitch: int, backend: str | None):
    """The compiled odd-row kernel of ``kind`` for rows of ``n`` (``odd_config`` must apply)."""
    config = odd_config(dtype, n, kind, pitch)
    assert config is not None
    key = (kind, dtype.name, *config, backend)
    if key not in _COMPILED:
        vec = 16 // dtype.bytes
        _COMPILED[key] = wc.compile(MAKERS[kind](dtype, *config), {V: vec, E: EDGE}, backend=backend)
    return _COMPILED[key]


def odd_args(rows: Any, out_buf: Any, shift: int, starts: Any, inner: Any, vectors: tuple, scalars: tuple) -> tuple:
    """The kernel's arguments for ``rows`` [M, N] (pitch ``P``) whose first element lies ``shift`` elements
    past a 16-byte boundary: its buffer from that boundary as chunks and flat, ``starts`` (``shift + m * P``),
    ``inner`` (K elements), the vectors, the output buffer as chunks (row ``m`` at ``shift + m * N``)."""
    m, n = rows.shape
    pitch = rows.stride(0) if m > 1 else n
    vec = 16 // rows.element_size()
    span = shift + (m - 1) * pitch + n
    base = rows.storage_offset() - shift
    if base < 0:
        raise wc.WavecError(message="x's storage does not start at a 16-byte boundary")
    flat = rows.as_strided((span,), (1,), base)
    chunks = rows.as_strided((span // vec, vec), (vec, 1), base)
    return (chunks, flat, starts, inner, *vectors, out_buf.view(-1, vec), n, pitch - n, *scalars)


def odd_runner(kind: str, dtype, rows: Any, shape: tuple, per_call, scalars: tuple, backend):
    """``run(x, *vectors) -> out`` for rows ``[M, N]`` of pitch ``P`` (``odd_config`` applies): per call the
    buffer's views (``odd_args``), an output buffer in which the rows lie at the input's offset within 16
    bytes, and a launch prepared per offset (at most ``V``: the views' shapes depend on it)."""
    import torch

    m, n = rows.shape
    pitch = rows.stride(0) if m > 1 else n
    vec = 16 // dtype.bytes
    es = rows.element_size()
    kernel = odd_kernel(kind, dtype, n, pitch, backend)
    inner = torch.empty((n - vec + 1) // vec, dtype=torch.int8, device=rows.device)
    launches: dict[int, Any] = {}
    starts: dict[int, Any] = {}

    def run(x: Any, *vectors: Any) -> Any:
        r = per_call(x).reshape(m, n)  # a view (``as_rows`` decided so), or the dense copy
        shift = r.data_ptr() // es % vec
        out_buf = torch.empty(-(-(shift + m * n) // vec) * vec, dtype=r.dtype, device=r.device)
        if shift not in starts:
            starts[shift] = torch.arange(m, dtype=torch.int32, device=r.device) * pitch + shift
        a = odd_args(r, out_buf, shift, starts[shift], inner, vectors, scalars)
        if shift not in launches:
            launches[shift] = kernel.prepare(*a, fresh_outputs=True)
        launches[shift](*a)
        return out_buf[shift : shift + m * n].view(shape)

    return run
