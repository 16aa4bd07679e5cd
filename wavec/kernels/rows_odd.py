"""Rows whose length the 16-byte run does not divide (``softmax`` / ``rms_norm`` / ``layer_norm`` at N = 2049,
4097, ...) at the speed of aligned rows: each row is read and written through the 16-byte chunks of the flat
buffer that lie wholly inside it, and only its two partial edges element by element.  (Contiguous f32 rows
past 8192 that the run divides take it too, ``odd_config``: nothing here needs the run not to divide N.)

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
identity; LayerNorm's in one pass, ``row_stats``); the weight and bias are gathered by column (their
alignment differs per row; they come from L1/L2).  Rows per workgroup: ``odd_config``'s.  The
contiguous output starts at the input's offset within 16 bytes and where the pitch differs from N by whole
chunks (``gap``) row ``m``'s output chunk is its input chunk less ``m * gap / V`` (``back``; over one row
a workgroup the row comes from its start); other gaps drift, and the makers' ``drift`` stores the output
through ``rows_odd_drift``'s variant instead (``_store``).

Requires: the launcher (``odd_runner`` / ``odd_args``) passes the chunk and flat views of ``x``, ``starts``
(i32), ``inner`` of ``K`` elements, the output as chunks, ``N`` and ``gap``; ``N >= 2V``.  Guarantees:
every element of each output row is written once with a value (identical rewrites of one element aside),
nothing outside the rows is written.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import wavec as wc
from wavec import Memory, f32
from wavec.compiler import default_backend
from wavec.kernels.row_stats import one_pass, shifted_stats, two_sum
from wavec.kernels.rows_odd_drift import Q, write_scatter, write_shared
from wavec.kernels.rows_odd_rules import odd_config, odd_full, odd_plan, rows_per_workgroup

M, N = wc.sym.M, wc.sym.N
R, F, R2, J, E, V = wc.sym.R, wc.sym.F, wc.sym.R2, wc.sym.J, wc.sym.E, wc.sym.V
HR = wc.sym.HR  # a vector's shifted table [HR, V]: V head offsets of K chunks (``shifted_table``)
LOG2E = 1.0 / math.log(2.0)
NEG_INF = float("-inf")
EDGE = 32  # edge slots per row: a head of < V plus a tail of < 2V elements, V <= 8


def odd_constraints(block_j: int, waves: int, vec: int, tpw: int, rows: int, bound: int | None = None) -> list:
    """``block_j`` interior chunks per row tile (a power of two >= K), split over ``waves`` waves, ``rows``
    per workgroup (the makers': ``odd_config``'s, else ``rows_per_workgroup``'s); ``bound``: a launch bound
    of that many workgroups an SM (``odd_bound``'s)."""
    split = [wc.WaveConstraint(J, block_j // waves)] if waves > 1 else []
    sched = [wc.SchedulingConstraint(min_workgroups_per_sm=bound)] if bound else []
    return [
        wc.WorkgroupConstraint(M, rows, 0),
        wc.WaveConstraint(M, 1),
        wc.WorkgroupConstraint(J, block_j, 1),
        *split,
        wc.WorkgroupConstraint(V, V, None),
        wc.WorkgroupConstraint(E, E, None),
        wc.HardwareConstraint(threads_per_wave=tpw, vector_shapes={M: 1, J: tpw, V: vec, E: tpw}, per_thread=(V,)),
        *sched,
    ]


class _Row:
    """The traced pieces of one row: its first flat position ``start`` [M], the interior chunks ``v``
    [M, J, V] (f32), their chunk indices and column indices, the edge values ``e`` [M, E] (f32, every slot
    a real element of the row), their flat positions ``at``, columns and validity ``ok``."""

    def __init__(self, x, xf, starts, n, vec: int, full: bool = False) -> None:
        s = self.start = wc.read(starts)
        c0 = (s + (vec - 1)) // vec
        if full:  # J is the whole tile: lanes past K reread the row's last chunk, unmasked (``FULL``)
            self.k = (n - (vec - 1)) // vec
            self.j = wc.minimum(wc.index(J), self.k - 1)
            self.inside = wc.index(J) < self.k
        else:
            self.k, self.j = J, wc.index(J)
            self.inside = wc.index(J) < J  # lanes past K: masked loads, the identity here
        self.chunk = c0 + self.j
        self.v = wc.cast(wc.read(x, mapping={R: self.chunk}), f32)
        self.vec = vec
        self.head = c0 * vec - s
        slot = wc.index(E)
        end = s + n
        head = self.head
        at = wc.where(slot < vec, s + slot, ((c0 + self.k) * vec) + slot - vec)
        self.ok = wc.where(slot < vec, head > slot, end > at)
        # a slot past the row takes the row's first head element (or its last): its owner's value
        self.at = wc.where(self.ok, at, wc.where(head > 0, s, end - 1))
        self.ecol = self.at - s
        self.e = wc.cast(wc.read(xf, mapping={F: self.at}), f32)

    def interior(self, fill: float):
        return wc.where(self.inside, self.v, fill)

    def edge(self, value, fill: float):
        return wc.where(self.ok, value, fill)

    def total(self, main, edge):
        """The row sum of ``main`` [M, J, V] (past-K lanes already the identity) and ``edge`` [M, E]."""
        return wc.sum(wc.sum(main, V), J) + wc.sum(edge, E)

    def write(self, main, edge, out, back, dtype, vec: int) -> None:
        """Row ``m`` of the contiguous output lies ``back`` (``back``'s ``m * gap``: whole chunks) elements
        before the input's; ``back`` None: at the input's (contiguous rows over one row a workgroup)."""
        chunk, at = self.chunk, self.at
        if back is not None:
            chunk, at = chunk - back // vec, at - back
        wc.write(wc.cast(main, dtype), out, mapping={R2: chunk})
        wc.write(wc.cast(edge, dtype), out, mapping={R2: at // vec, V: at % vec})


def _store(row: _Row, main, edge, out, gap, n, dtype, drift: str | None, rows: int, block_j: int, sliced: bool) -> None:
    """The row's values into the output: ``row.write`` (``drift`` None: the output row at the input's offset
    within 16 bytes), else through ``rows_odd_drift``'s variant of that name (a slice whose offset drifts).
    The output rows lie ``back`` before the input's where rows a workgroup, ``sliced`` or ``drift`` say a
    pitch other than ``n`` may come; contiguous rows over one row a workgroup ignore ``gap`` (0)."""
    vec = row.vec
    behind = back(row, gap, n) if rows > 1 or sliced or drift else None
    if drift is None:
        row.write(main, edge, out, behind, dtype, vec)
    elif drift == "scatter":
        write_scatter(row, main, edge, out, behind, dtype, vec)
    else:
        write_shared(row, main, edge, out, behind, n, dtype, vec, rows, block_j)


def back(row: _Row, gap, n):
    """How far row ``m`` of the contiguous output lies before the input's, ``m * gap`` elements.  Over one
    row a workgroup the row coordinate is no traced value, but the row's start ``shift + m * (n + gap)``
    (``odd_args``; ``shift`` < V <= n) gives it: one division a row."""
    m = wc.index(M) if row.start.shape else row.start // (n + gap)
    return m * gap


def _first(row: _Row, xf):
    """The row's first element, f32 (LayerNorm's shift).  One row per workgroup: ``start`` is rank 0, which
    a mapping does not take, so the [E] read of that element reduced by a max (exact: equal values)."""
    if row.start.shape:
        return wc.cast(wc.read(xf, mapping={F: row.start}), f32)
    return wc.max(wc.cast(wc.read(xf, mapping={F: row.start + wc.index(E) * 0}), f32), E)


def _deviations(row: _Row, xf, eps, inv_n, dtype, again=None) -> tuple[Any, Any, Any]:
    """(interior, edge deviations from the row's mean, rsqrt(var + eps)): one pass over ``x - first``
    (f16/bf16) or its mean and then the squared deviations (f32), ``row_stats``.  The edge deviations of
    every slot (those past the row rewrite their owner's value) and of every interior lane (those past K
    rewrite the row's last chunk under ``full``: its owner's value).  ``again``: the interior read a
    second time (as f32), from which the output's deviations are taken instead of the first read's (the
    statistics keep the first)."""
    shift = _first(row, xf)
    c = wc.where(row.inside, row.v - shift, 0.0)
    ce = row.e - shift
    if not one_pass(dtype):
        hi, lo = two_sum(shift, row.total(c, row.edge(ce, 0.0)) * inv_n)
        dv, de = (row.v - hi) - lo, (row.e - hi) - lo
        d = wc.where(row.inside, dv, 0.0)
        fix = row.total(d, row.edge(de, 0.0)) * inv_n  # the corrected two-pass mean (``row_stats``)
        var = row.total(d * d, row.edge(de * de, 0.0)) * inv_n - fix * fix
        out = dv if again is None else (again - hi) - lo
        return out - fix, de - fix, wc.rsqrt(wc.maximum(var, 0.0) + eps)
    ce_in = row.edge(ce, 0.0)
    m1, r = shifted_stats(row.total(c, ce_in), row.total(c * c, ce_in * ce_in), eps, inv_n)
    return ((row.v if again is None else again) - shift) - m1, ce - m1, r


def _vectors(row: _Row, mem, table=None) -> tuple[Any, Any]:
    """A [N] weight or bias at the interior and edge columns, f32.  The interior from ``table``
    (``shifted_table``: the row's columns as aligned 16-byte chunks at its head offset) when given, else
    gathered element by element (a row's columns sit at a different offset within 16 bytes than its
    chunks; from L1, every row reads them); the edge element by element."""
    if table is None:
        col = row.head + row.j * row.vec + wc.index(V)
        interior = wc.read(mem, mapping={N: col})
    else:
        interior = wc.read(table, mapping={HR: row.head * row.k + row.j})
    return wc.cast(interior, f32), wc.cast(wc.read(mem, mapping={N: row.ecol}), f32)


def shifted_table(v: Any, vec: int, chunks: int) -> Any:
    """``t[h * chunks + j, e] = v[h + j * vec + e]`` for ``h < vec``, ``j < chunks`` (``chunks * vec + vec - 2
    < len(v)`` for ``chunks = K``): a vector at every head offset, so a row reads its interior columns 16
    bytes at a time.  One copy of ``vec * chunks * vec`` elements (8 N for bf16)."""
    return v.as_strided((vec, chunks * vec), (1, 1)).contiguous().view(vec * chunks, vec)


def make_softmax_odd(
    dtype, block_j: int, waves: int, rows: int | None = None, tpw: int = 32, drift: str | None = None,
    sliced: bool = False,
) -> wc.WaveKernel:  # fmt: skip
    """``drift``: the output of slices whose offset within 16 bytes drifts (``_store``); ``sliced``: rows of
    a pitch other than ``n`` over one row a workgroup (the output's rows ``back``; implied by ``drift``)."""
    vec = 16 // dtype.bytes
    rows = rows or rows_per_workgroup(waves, tpw)

    @wc.wave(odd_constraints(block_j, waves, vec, tpw, rows))
    def softmax_odd(
        x: Memory[R, V, dtype], xf: Memory[F, dtype], starts: Memory[M, wc.i32], inner: Memory[J, wc.i8],
        out: Memory[R2, V, dtype], n: wc.Scalar[wc.i32], gap: wc.Scalar[wc.i32],
    ):  # fmt: skip
        row = _Row(x, xf, starts, n, vec)
        big = wc.maximum(wc.max(wc.max(row.interior(NEG_INF), V), J), wc.max(row.edge(row.e, NEG_INF), E))
        p = wc.exp2((row.v - big) * LOG2E)
        pe = wc.exp2((row.e - big) * LOG2E)
        inv = wc.reciprocal(row.total(wc.where(row.inside, p, 0.0), row.edge(pe, 0.0)))
        _store(row, p * inv, pe * inv, out, gap, n, dtype, drift, rows, block_j, sliced)

    return softmax_odd


def make_rms_norm_odd(
    dtype, block_j: int, waves: int, rows: int | None = None, tpw: int = 32, tables: bool = False, full: bool = False,
    bound: int | None = None, drift: str | None = None, sliced: bool = False,
) -> wc.WaveKernel:  # fmt: skip
    """``tables``: the weight's interior read from its ``shifted_table`` ``ws`` (after ``w``).  ``rows`` a
    workgroup (default ``rows_per_workgroup``'s).  ``full``: J is the tile (``RULES.full_tile``; bind ``J: block_j``).
    ``bound``: ``odd_constraints``'.  ``drift``, ``sliced``: ``make_softmax_odd``'s."""
    vec = 16 // dtype.bytes
    rows = rows or rows_per_workgroup(waves, tpw)
    constraints = odd_constraints(block_j, waves, vec, tpw, rows, bound)

    def body(x, xf, starts, w, ws, out, n, gap, eps, inv_n) -> None:
        row = _Row(x, xf, starts, n, vec, full)
        v = row.interior(0.0)
        ss = row.total(v * v, row.edge(row.e * row.e, 0.0))
        r = wc.rsqrt(ss * inv_n + eps)
        w_in, w_edge = _vectors(row, w, ws)
        _store(row, row.v * w_in * r, row.e * w_edge * r, out, gap, n, dtype, drift, rows, block_j, sliced)

    if tables:

        @wc.wave(constraints)
        def rms_norm_odd_tables(
            x: Memory[R, V, dtype], xf: Memory[F, dtype], starts: Memory[M, wc.i32], inner: Memory[J, wc.i8],
            w: Memory[N, dtype], ws: Memory[HR, V, dtype], out: Memory[R2, V, dtype], n: wc.Scalar[wc.i32],
            gap: wc.Scalar[wc.i32], eps: wc.Scalar[f32], inv_n: wc.Scalar[f32],
        ):  # fmt: skip
            body(x, xf, starts, w, ws, out, n, gap, eps, inv_n)

        return rms_norm_odd_tables

    @wc.wave(constraints)
    def rms_norm_odd(
        x: Memory[R, V, dtype], xf: Memory[F, dtype], starts: Memory[M, wc.i32], inner: Memory[J, wc.i8],
        w: Memory[N, dtype], out: Memory[R2, V, dtype], n: wc.Scalar[wc.i32], gap: wc.Scalar[wc.i32],
        eps: wc.Scalar[f32], inv_n: wc.Scalar[f32],
    ):  # fmt: skip
        body(x, xf, starts, w, None, out, n, gap, eps, inv_n)

    return rms_norm_odd


def make_layer_norm_odd(
    dtype, block_j: int, waves: int, rows: int | None = None, tpw: int = 32, tables: bool = False, full: bool = False,
    bound: int | None = None, reread: bool = False, drift: str | None = None, sliced: bool = False,
) -> wc.WaveKernel:  # fmt: skip
    """``tables``: the weight's and bias's interiors read from their ``shifted_table`` ``ws``, ``bs``.
    ``rows`` a workgroup (default ``rows_per_workgroup``'s).  ``full``, ``bound``: as ``make_rms_norm_odd``'s.
    ``reread`` (with ``tables``): the chunks read a second time after the statistics through
    ``xr``, x's chunk view passed again (``odd_args``), so no chunk lives in registers across the
    reduction; through x itself the compiler would merge the two reads.  ``drift``, ``sliced``:
    ``make_softmax_odd``'s."""
    vec = 16 // dtype.bytes
    rows = rows or rows_per_workgroup(waves, tpw)
    constraints = odd_constraints(block_j, waves, vec, tpw, rows, bound)

    def body(x, xf, starts, w, b, ws, bs, out, n, gap, eps, inv_n, xr=None) -> None:
        row = _Row(x, xf, starts, n, vec, full)
        again = None if xr is None else wc.cast(wc.read(xr, mapping={R: row.chunk}), f32)
        d, de, r = _deviations(row, xf, eps, inv_n, dtype, again)
        w_in, w_edge = _vectors(row, w, ws)
        b_in, b_edge = _vectors(row, b, bs)
        main, edge = d * r * w_in + b_in, de * r * w_edge + b_edge
        _store(row, main, edge, out, gap, n, dtype, drift, rows, block_j, sliced)

    if tables and reread:

        @wc.wave(constraints)
        def layer_norm_odd_reread(
            x: Memory[R, V, dtype], xr: Memory[R, V, dtype], xf: Memory[F, dtype], starts: Memory[M, wc.i32],
            inner: Memory[J, wc.i8], w: Memory[N, dtype], b: Memory[N, dtype], ws: Memory[HR, V, dtype],
            bs: Memory[HR, V, dtype], out: Memory[R2, V, dtype], n: wc.Scalar[wc.i32],
            gap: wc.Scalar[wc.i32], eps: wc.Scalar[f32], inv_n: wc.Scalar[f32],
        ):  # fmt: skip
            body(x, xf, starts, w, b, ws, bs, out, n, gap, eps, inv_n, xr)

        return layer_norm_odd_reread

    if tables:

        @wc.wave(constraints)
        def layer_norm_odd_tables(
            x: Memory[R, V, dtype], xf: Memory[F, dtype], starts: Memory[M, wc.i32], inner: Memory[J, wc.i8],
            w: Memory[N, dtype], b: Memory[N, dtype], ws: Memory[HR, V, dtype],
            bs: Memory[HR, V, dtype], out: Memory[R2, V, dtype], n: wc.Scalar[wc.i32],
            gap: wc.Scalar[wc.i32], eps: wc.Scalar[f32], inv_n: wc.Scalar[f32],
        ):  # fmt: skip
            body(x, xf, starts, w, b, ws, bs, out, n, gap, eps, inv_n)

        return layer_norm_odd_tables

    @wc.wave(constraints)
    def layer_norm_odd(
        x: Memory[R, V, dtype], xf: Memory[F, dtype], starts: Memory[M, wc.i32], inner: Memory[J, wc.i8],
        w: Memory[N, dtype], b: Memory[N, dtype], out: Memory[R2, V, dtype], n: wc.Scalar[wc.i32],
        gap: wc.Scalar[wc.i32], eps: wc.Scalar[f32], inv_n: wc.Scalar[f32],
    ):  # fmt: skip
        body(x, xf, starts, w, b, None, None, out, n, gap, eps, inv_n)

    return layer_norm_odd


MAKERS: dict[str, Callable[..., wc.WaveKernel]] = {
    "softmax": make_softmax_odd, "rms_norm": make_rms_norm_odd, "layer_norm": make_layer_norm_odd,
}  # fmt: skip

_COMPILED: dict = {}


def odd_bound(dtype, n: int, kind: str, pitch: int, tables: bool = True) -> int | None:
    """The launch bound (workgroups an SM) of the odd kernel ``odd_plan`` picks, or None."""
    plan = odd_plan(dtype, n, kind, pitch, tables)
    return plan.bound if plan else None


def odd_reread(dtype, n: int, kind: str, pitch: int, tables: bool = True) -> bool:
    """Whether the odd kernel ``odd_plan`` picks re-reads its chunks (LayerNorm over one row, tables)."""
    plan = odd_plan(dtype, n, kind, pitch, tables)
    return bool(plan and plan.reread)


def inner_size(kind: str, dtype, n: int, pitch: int, full: bool | None = None) -> int:
    """The elements of the ``inner`` argument (the launch value ``J``): K, or the tile under ``odd_full``."""
    vec = 16 // dtype.bytes
    config = odd_config(dtype, n, kind, pitch)
    return config[0] if config is not None and odd_full(kind, full) else (n - vec + 1) // vec


def odd_kernel(
    kind: str, dtype, n: int, pitch: int, backend: str | None, tables: bool = False, full=None, target=None
):  # fmt: skip
    """The compiled odd-row kernel of ``kind`` for rows of ``n`` (``odd_config`` must apply); ``tables``
    (the norms): the variant reading the vectors' ``shifted_table`` beside them; ``full``: ``odd_full``'s;
    ``target``: an explicit one (the performance model's, ``perf.library``), else the backend's."""
    plan = odd_plan(dtype, n, kind, pitch, tables, full)
    assert plan is not None
    config, full, reread, drift = plan.config, plan.full, plan.reread, plan.drift
    # a launch bound is PTX's (``.minnctapersm``); gfx942 has none
    ptx = (backend or default_backend()) != "rocm" and not (target or "").startswith("gfx")
    bound = plan.bound if ptx else None
    sliced = pitch != n and config[2] == 1
    key = (kind, dtype.name, *config, backend, tables, full, bound, reread, target, *(("sliced",) if sliced else ()))
    key += (drift,) if drift else ()
    if key not in _COMPILED:
        vec = 16 // dtype.bytes
        extra: dict[str, Any] = {"tables": True} if tables else {}
        if full:
            extra["full"] = True
        if bound:
            extra["bound"] = bound
        if reread:
            extra["reread"] = True
        if drift:
            extra["drift"] = drift
        if sliced:
            extra["sliced"] = True
        kernel = MAKERS[kind](dtype, *config, **extra)
        subs = {V: vec, E: EDGE, **({J: config[0]} if full else {})}
        if drift == "shared":
            subs[Q] = config[0] + 3  # the shared row buffer's slot rows (``rows_odd_drift``)
        _COMPILED[key] = wc.compile(kernel, subs, backend=backend, **({"target": target} if target else {}))
    return _COMPILED[key]


# x of this many bytes or more reads the norms' vectors through ``shifted_table``s, built per call (one
# copy kernel of 8 N elements per vector, a few microseconds: paid back where the kernel runs long)
TABLE_MIN_BYTES = 32 << 20


def uses_tables(kind: str, m: int, n: int, element_bytes: int) -> bool:
    """Whether the runner of ``kind`` for rows [m, n] reads its vectors through ``shifted_table``s."""
    return kind != "softmax" and m * n * element_bytes >= TABLE_MIN_BYTES


def starts_fit(m: int, n: int, pitch: int) -> bool:
    """Whether the row starts of rows [m, n] at ``pitch`` (and the 16-byte shift) fit the kernel's i32."""
    return (m - 1) * pitch + n + 16 < 2**31


def odd_args(
    rows: Any, out_buf: Any, shift: int, starts: Any, inner: Any, vectors: tuple, scalars: tuple, reread: bool = False
) -> tuple:
    """The kernel's arguments for ``rows`` [M, N] (pitch ``P``) whose first element lies ``shift`` elements
    past a 16-byte boundary: its buffer from that boundary as chunks (twice for a ``reread`` kernel) and
    flat, ``starts`` (``shift + m * P``), ``inner`` (K elements, ``block_j`` for a ``full`` kernel), the
    vectors, the output buffer as chunks (row ``m`` at ``shift + m * N``)."""
    m, n = rows.shape
    pitch = rows.stride(0) if m > 1 else n
    vec = 16 // rows.element_size()
    span = shift + (m - 1) * pitch + n
    base = rows.storage_offset() - shift
    if base < 0:
        raise wc.WavecError(message="x's storage does not start at a 16-byte boundary")
    flat = rows.as_strided((span,), (1,), base)
    chunks = rows.as_strided((span // vec, vec), (vec, 1), base)
    views = (chunks, chunks, flat) if reread else (chunks, flat)
    return (*views, starts, inner, *vectors, out_buf.view(-1, vec), n, pitch - n, *scalars)


def odd_runner(kind: str, dtype, rows: Any, shape: tuple, per_call, scalars: tuple, backend, full=None):
    """``run(x, *vectors) -> out`` for rows ``[M, N]`` of pitch ``P`` (``odd_config`` applies): per call the
    buffer's views (``odd_args``), an output buffer in which the rows lie at the input's offset within 16
    bytes, a launch prepared per offset (at most ``V``: the views' shapes depend on it), and for the norms
    of at least ``TABLE_MIN_BYTES`` the vectors' ``shifted_table``s (read when the runner is made);
    ``full``: ``odd_full``'s."""
    import torch

    m, n = rows.shape
    pitch = rows.stride(0) if m > 1 else n
    vec = 16 // dtype.bytes
    es = rows.element_size()
    tables = uses_tables(kind, m, n, es)
    plan = odd_plan(dtype, n, kind, pitch, tables, full)
    assert plan is not None
    full, reread = plan.full, plan.reread
    kernel = odd_kernel(kind, dtype, n, pitch, backend, tables, full)
    chunks = (n - vec + 1) // vec
    inner = torch.empty(inner_size(kind, dtype, n, pitch, full), dtype=torch.int8, device=rows.device)
    launches: dict[int, Any] = {}
    starts: dict[int, Any] = {}

    def run(x: Any, *vectors: Any) -> Any:
        r = per_call(x).reshape(m, n)  # a view (``as_rows`` decided so), or the dense copy
        shift = r.data_ptr() // es % vec
        out_buf = torch.empty(-(-(shift + m * n) // vec) * vec, dtype=r.dtype, device=r.device)
        if shift not in starts:
            starts[shift] = torch.arange(m, dtype=torch.int32, device=r.device) * pitch + shift
        if tables:
            vectors = (*vectors, *(shifted_table(v, vec, chunks) for v in vectors))
        a = odd_args(r, out_buf, shift, starts[shift], inner, vectors, scalars, reread)
        if shift not in launches:
            launches[shift] = kernel.prepare(*a, fresh_outputs=True)
        launches[shift](*a)
        return out_buf[shift : shift + m * n].view(shape)

    return run
