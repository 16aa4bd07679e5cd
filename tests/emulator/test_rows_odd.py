"""Odd row lengths (``kernels/rows_odd.py``): softmax / RMSNorm / LayerNorm of rows the 16-byte run does not
divide, on the emulator against torch in f64: every dtype, rows starting at every offset within 16 bytes,
slices, every output element written and nothing outside the rows (NaN-filled buffers), a large mean."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from wavec.kernels import layer_norm, rms_norm, rows, rows_odd, rows_odd_rules, softmax

F = torch.nn.functional
TOL = {torch.float16: (2e-3, 4e-3), torch.bfloat16: (1.6e-2, 3e-2), torch.float32: (2e-6, 2e-6)}
WC = {torch.float16: wc.f16, torch.bfloat16: wc.bf16, torch.float32: wc.f32}


def _check(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    assert got.dtype == dtype and got.shape == want.shape
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(got.double(), want, rtol=rtol, atol=atol)


def _all(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> None:
    n, dtype, xd = x.shape[-1], x.dtype, x.double()
    _check(softmax(x, backend="emulator"), torch.softmax(xd, -1), dtype)
    _check(rms_norm(x, w, 1e-6, backend="emulator"), F.rms_norm(xd, (n,), w.double(), 1e-6), dtype)
    _check(layer_norm(x, w, b, 1e-5, backend="emulator"), F.layer_norm(xd, (n,), w.double(), b.double(), 1e-5), dtype)
    _check(layer_norm(x, backend="emulator"), F.layer_norm(xd, (n,), eps=1e-5), dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n", [1, 7, 97, 1025, 2049, 4097])
def test_odd_rows_match_torch(dtype: torch.dtype, n: int) -> None:
    """5 rows (a partial workgroup); the row starts walk through every offset within 16 bytes."""
    g = torch.Generator().manual_seed(n)
    x = (torch.randn(5, n, generator=g) * 2 + 1).to(dtype)
    w, b = torch.randn(n, generator=g).to(dtype), torch.randn(n, generator=g).to(dtype)
    applies = rows_odd.odd_config(WC[dtype], n, "softmax", n) is not None
    assert applies == (n > 512 // dtype.itemsize)  # longer than one wave's 16-byte runs
    _all(x, w, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("offset, pitch", [(1, 0), (3, 0), (0, 8), (5, 16), (0, 3)])
def test_views_at_any_offset_and_pitch(dtype: torch.dtype, offset: int, pitch: int) -> None:
    """Rows starting ``offset`` elements into the buffer, ``pitch`` elements apart beyond the row (a slice
    ``x[:, :n]``): a pitch whose offset within 16 bytes matches the row's (8, 16) runs the odd-row kernel,
    others (3) it too with the output at its own alignment (``rows_odd_drift``); both correct, ``x``
    untouched."""
    n, m = 1031, 6
    buf = torch.randn(offset + m * (n + pitch) + 8).to(dtype)
    x = buf[offset : offset + m * (n + pitch)].view(m, n + pitch)[:, :n]
    before = buf.clone()
    w, b = torch.randn(n).to(dtype), torch.randn(n).to(dtype)
    vec = 16 // dtype.itemsize
    plan = rows_odd_rules.odd_plan(WC[dtype], n, "rms_norm", n + pitch)
    assert plan is not None and (plan.drift is None) == (pitch % vec == 0)
    _all(x, w, b)
    assert torch.equal(buf, before)


def _into_nan_buffer(
    kind: str, dtype: torch.dtype, n: int, m: int, shift: int, tables: bool = False, full: bool | None = None,
    reread: bool | None = None, seed: int | None = None,
) -> torch.Tensor:  # fmt: skip
    """The kernel itself into a NaN-filled output buffer: the rows' elements all finite and right, the
    buffer's elements before, between (none) and after the rows still NaN; ``tables``: the norms' variant
    reading the vectors' ``shifted_table``s; ``full``: the norms' whole-tile variant (``odd_full``'s);
    ``reread``: LayerNorm's second read of its chunks (default ``odd_reread``'s); ``seed``: the inputs'
    (two kernels on the same inputs).  Returns the rows."""
    if seed is not None:
        torch.manual_seed(seed)
    wdt, vec = WC[dtype], 16 // dtype.itemsize
    x = (torch.randn(shift + m * n + 5) * 2 + 1).to(dtype)[shift : shift + m * n].view(m, n)
    w, b = torch.randn(n).to(dtype), torch.randn(n).to(dtype)
    block_j, waves, per_wg = rows_odd.odd_config(wdt, n, kind, n) or (0, 0, 0)
    full = rows_odd.odd_full(kind, full)
    extra: dict = {"tables": True} if tables else {}
    if kind != "softmax" and rows_odd.odd_bound(wdt, n, kind, n, tables):  # the library's launch bound
        extra["bound"] = rows_odd.odd_bound(wdt, n, kind, n, tables)
    reread = rows_odd.odd_reread(wdt, n, kind, n, tables) if reread is None else reread
    if reread:
        extra["reread"] = True
    kernel = wc.compile(
        rows_odd.MAKERS[kind](wdt, block_j, waves, per_wg, **extra, **({"full": True} if full else {})),
        {rows_odd.V: vec, rows_odd.E: 32, **({rows_odd.J: block_j} if full else {})},
        backend="emulator",
    )
    out_buf = torch.full((-(-(shift + m * n) // vec) * vec,), float("nan"), dtype=dtype)
    starts = torch.arange(m, dtype=torch.int32) * n + shift
    inner = torch.empty(block_j if full else (n - vec + 1) // vec, dtype=torch.int8)
    vectors, scalars = {"softmax": ((), ()), "rms_norm": ((w,), (1e-6, 1 / n)), "layer_norm": ((w, b), (1e-5, 1 / n))}[
        kind
    ]
    if tables:
        vectors = (*vectors, *(rows_odd.shifted_table(v, vec, (n - vec + 1) // vec) for v in vectors))
    kernel(*rows_odd.odd_args(x, out_buf, shift, starts, inner, vectors, scalars, reread))
    xd = x.double()
    want = {
        "softmax": lambda: torch.softmax(xd, -1),
        "rms_norm": lambda: F.rms_norm(xd, (n,), w.double(), 1e-6),
        "layer_norm": lambda: F.layer_norm(xd, (n,), w.double(), b.double(), 1e-5),
    }[kind]()
    _check(out_buf[shift : shift + m * n].view(m, n), want, dtype)
    assert out_buf[:shift].isnan().all() and out_buf[shift + m * n :].isnan().all()
    return out_buf[shift : shift + m * n].view(m, n)


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("kind", ["softmax", "rms_norm", "layer_norm"])
@pytest.mark.parametrize("shift", [0, 3, 7])
def test_every_element_written_and_nothing_else(kind: str, shift: int, full: bool) -> None:
    """(``full``: the norms' whole-tile variant, whose lanes past K rewrite the row's last chunk; softmax
    has only the masked one.)"""
    _into_nan_buffer(kind, torch.bfloat16, 2049, 7, shift, full=full)


@pytest.mark.parametrize("tables", [False, True])
@pytest.mark.parametrize("kind", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize(
    "dtype, n, shift", [(torch.bfloat16, 16383, 5), (torch.float16, 13001, 0), (torch.float32, 5001, 3)]
)
@pytest.mark.parametrize("full", [False, True])
def test_norms_one_row_per_workgroup(
    kind: str, dtype: torch.dtype, n: int, shift: int, tables: bool, full: bool
) -> None:
    """Rows of 2048 chunks: one row per workgroup (the row values rank 0), RMSNorm at ``one_row_runs``
    (16 waves), LayerNorm at ``ln_long_runs`` (8 waves) under a launch bound of 3 where it reads tables,
    f16/bf16 re-reading its chunks (``one_row_bounds``, ``reread_tiles``); every element
    written; a slice of such rows (pitch != n) takes the same layout (its output rows: ``rows_odd.back``)."""
    _block_j, waves, per_wg = rows_odd.odd_config(WC[dtype], n, kind, n) or (0, 0, 0)
    runs = rows_odd_rules.RULES.ln_long_runs if kind == "layer_norm" else rows_odd_rules.RULES.one_row_runs
    assert per_wg == 1 and waves == 2048 // (32 * runs)
    bound = rows_odd.odd_bound(WC[dtype], n, kind, n, tables)
    half = dtype != torch.float32
    assert bound == (3 if kind == "layer_norm" and tables else None)
    assert rows_odd.odd_reread(WC[dtype], n, kind, n, tables) == (kind == "layer_norm" and tables and half)
    assert rows_odd.odd_config(WC[dtype], n, kind, n + 16 // dtype.itemsize) == (_block_j, waves, per_wg)
    _into_nan_buffer(kind, dtype, n, 3, shift, tables, full)


@pytest.mark.parametrize("kind", ["softmax", "rms_norm", "layer_norm"])
def test_f32_rows_past_8192_at_8_chunks_a_lane(kind: str) -> None:
    """Contiguous f32 rows of 8193-16383 take the odd-row kernel (the norms one row a workgroup, softmax
    two; LayerNorm at 8 chunks a lane through tables under a bound of two workgroups an SM); 12289 at the
    three-quarter tile of 3072 chunks (``short_tiles``: LayerNorm 12 waves, the others 16 at 6 chunks a
    lane); slices of them too, in the same layout."""
    n = 12289
    waves = 12 if kind == "layer_norm" else 16
    assert rows_odd.odd_config(wc.f32, n, kind, n) == (3072, waves, 2 if kind == "softmax" else 1)
    assert rows_odd.odd_bound(wc.f32, n, kind, n) == (2 if kind == "layer_norm" else None)  # (through tables)
    assert rows_odd.odd_config(wc.f32, n, kind, n + 4) == (3072, waves, 2 if kind == "softmax" else 1)
    _into_nan_buffer(kind, torch.float32, n, 3, 1, tables=kind != "softmax")


@pytest.mark.parametrize("kind", ["softmax", "rms_norm", "layer_norm"])
@pytest.mark.parametrize(
    "dtype, n, block_j", [(torch.bfloat16, 9001, 1280), (torch.float16, 12289, 1536), (torch.float32, 9000, 2560)]
)
def test_shorter_tiles(kind: str, dtype: torch.dtype, n: int, block_j: int) -> None:
    """Rows whose chunks fit five eighths or three quarters of the power of two take that tile
    (``short_tiles``): the same chunks a lane over fewer waves (softmax: ``softmax_one_row``, at fewer
    chunks), every element written; one more chunk takes the next tile."""
    config = rows_odd.odd_config(WC[dtype], n, kind, n)
    assert config is not None and config[0] == block_j
    chunks = (n - 16 // dtype.itemsize + 1) // (16 // dtype.itemsize)
    assert config[0] >= chunks and config[0] % (32 * config[1]) == 0
    longer = (block_j + 1) * (16 // dtype.itemsize) + 16 // dtype.itemsize - 1
    assert rows_odd.odd_config(WC[dtype], longer, kind, longer)[0] > block_j
    _into_nan_buffer(kind, dtype, n, 3, 1, tables=kind != "softmax")


@pytest.mark.parametrize("dtype, n", [(torch.bfloat16, 4097), (torch.float16, 8191), (torch.float32, 4097)])
def test_layer_norm_reread_equals_one_read(dtype: torch.dtype, n: int) -> None:
    """LayerNorm re-reading its chunks after the statistics (``reread``, through x's chunk view passed
    again) gives bit for bit the rows of the kernel that keeps them, and writes nothing else."""
    once = _into_nan_buffer("layer_norm", dtype, n, 3, 5, tables=True, reread=False, seed=n)
    again = _into_nan_buffer("layer_norm", dtype, n, 3, 5, tables=True, reread=True, seed=n)
    assert torch.equal(once, again)


@pytest.mark.parametrize("kind", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("shift", [0, 3, 7])
def test_norms_through_shifted_tables(kind: str, shift: int) -> None:
    """The norms' variant for large inputs: each vector's interior read 16 bytes at a time from its
    ``shifted_table`` (rows at every head offset within 16 bytes), into NaN-filled outputs."""
    _into_nan_buffer(kind, torch.bfloat16, 2049, 9, shift, tables=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n, pitch", [(1025, 1025), (2049, 2049 + 8), (4097, 4097)])
def test_norms_launch_tables_past_the_threshold(
    monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype, n: int, pitch: int
) -> None:
    """``rms_norm`` / ``layer_norm`` with ``TABLE_MIN_BYTES`` 0: the runner builds the tables per call (a
    slice of longer rows too) and matches torch in f64; the tables kernel is the one compiled."""
    monkeypatch.setattr(rows_odd, "TABLE_MIN_BYTES", 0)
    monkeypatch.setattr(rows, "_DECIDED", rows.Decisions("rows"))  # not the runners decided before
    g = torch.Generator().manual_seed(n)
    x = (torch.randn(5, pitch, generator=g) * 2 + 1).to(dtype)[:, :n]
    w, b = torch.randn(n, generator=g).to(dtype), torch.randn(n, generator=g).to(dtype)
    xd = x.double()
    _check(rms_norm(x, w, 1e-6, backend="emulator"), F.rms_norm(xd, (n,), w.double(), 1e-6), dtype)
    _check(layer_norm(x, w, b, 1e-5, backend="emulator"), F.layer_norm(xd, (n,), w.double(), b.double(), 1e-5), dtype)
    config = rows_odd.odd_config(WC[dtype], n, "layer_norm", pitch)
    bound = rows_odd.odd_bound(WC[dtype], n, "layer_norm", pitch)
    reread = rows_odd.odd_reread(WC[dtype], n, "layer_norm", pitch)
    assert config is not None
    sliced = ("sliced",) if pitch != n and config[2] == 1 else ()  # (a slice over one row a workgroup)
    key = ("layer_norm", WC[dtype].name, *config, "emulator", True, True, bound, reread, None, *sliced)
    assert key in rows_odd._COMPILED


@pytest.mark.parametrize(
    "dtype, n, mean",
    [
        (torch.bfloat16, 4097, 1000.0),
        (torch.float16, 16383, 1000.0),
        (torch.float32, 2049, 1000.0),
        (torch.float32, 2049, 1e4),
        (torch.float32, 5001, 1e4),
    ],
)
def test_layer_norm_of_a_large_mean(dtype: torch.dtype, n: int, mean: float) -> None:
    """x = mean + randn keeps its unit variance, also with a row's first element 30 spreads out
    (``row_stats``: bf16 one pass over x less that element, f32 the mean then the deviations; E[x^2] -
    E[x]^2 in f32 would cancel it to noise).  Every length takes the odd-row kernel (5001 f32: one row per
    workgroup)."""
    assert rows_odd.odd_config(WC[dtype], n, "layer_norm", n) is not None
    x = mean + torch.randn(5, n, generator=torch.Generator().manual_seed(n))
    x[2, 0] = mean + 30.0
    x = x.to(dtype)
    got, want = layer_norm(x, backend="emulator"), F.layer_norm(x.double(), (n,))
    if dtype == torch.float32:  # shifted: ~1e-6 (an unshifted f32 mean of values near 1e4: 1-3e-3)
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)
    else:
        _check(got, want, dtype)
    # a variance lost to cancellation would leave |y| far from unit spread, or NaN
    assert (got.double().std(-1) - 1).abs().max() < 0.05


def test_softmax_extremes_on_odd_rows() -> None:
    """-inf entries (in the interior and the edges) and a huge spread."""
    x = torch.randn(3, 1029)
    x[0, ::3] = float("-inf")
    x[1, 0] = x[1, -1] = 80.0
    x[2] = -1e30
    x[2, 513] = 5.0
    _check(softmax(x, backend="emulator"), torch.softmax(x.double(), -1), torch.float32)


@pytest.mark.parametrize("kind", ["softmax", "rms_norm", "layer_norm"])
@pytest.mark.parametrize("n, shift", [(12288, 0), (16384, 3)])
def test_aligned_f32_rows_past_8192_take_the_odd_kernel(kind: str, n: int, shift: int) -> None:
    """Contiguous f32 rows of 8193-16384 that the 16-byte run divides take the odd-row kernel too
    (``aligned_elements``): at a 16-byte boundary the last chunk is the edge's tail, at ``shift`` 3 a
    head and a tail; every element written.  Slices of them and 8192 do not.  LayerNorm's 4096-chunk tile
    takes 8 waves (``ln_tile_runs``) re-reading its chunks."""
    block_j, waves = (3072, 12 if kind == "layer_norm" else 16) if n == 12288 else (4096, 16)
    waves = 8 if (block_j, kind) == (4096, "layer_norm") else waves
    assert rows_odd.odd_config(wc.f32, n, kind, n) == (block_j, waves, 2 if kind == "softmax" else 1)
    assert rows_odd.odd_reread(wc.f32, n, kind, n) == (waves == 8)
    assert rows_odd.odd_config(wc.f32, n, kind, n + 4) is None
    assert rows_odd.odd_config(wc.f32, 8192, kind, 8192) is None
    _into_nan_buffer(kind, torch.float32, n, 3, shift, tables=kind != "softmax")


@pytest.mark.parametrize("n, runs", [(4097, 4), (8191, 8)])
def test_f32_softmax_one_row_over_8_waves(n: int, runs: int) -> None:
    """Contiguous f32 softmax at tiles of 1024 and 2048 chunks: one row a workgroup over 8 waves
    (``softmax_one_row``), slices too; 16383 keeps two rows over 16 waves."""
    block_j, waves, per_wg = rows_odd.odd_config(wc.f32, n, "softmax", n)
    assert (waves, per_wg) == (8, 1) and block_j == waves * 32 * runs
    assert rows_odd.odd_config(wc.f32, 16383, "softmax", 16383) == (4096, 16, 2)
    assert rows_odd.odd_config(wc.f32, n, "softmax", n + 4) == (block_j, 8, 1)
    _into_nan_buffer("softmax", torch.float32, n, 3, 1)


@pytest.mark.parametrize("kind", ["softmax", "rms_norm", "layer_norm"])
@pytest.mark.parametrize("dtype, n", [(torch.bfloat16, 16384), (torch.float16, 12288)])
def test_aligned_16_bit_rows_past_8192_take_the_odd_kernel(kind: str, dtype: torch.dtype, n: int) -> None:
    """Contiguous 16-bit rows past 8192 that the run divides take the odd-row kernel (``aligned_elements``),
    softmax one row a workgroup over 8 waves (``softmax_one_row``), every element written; slices
    and 8192 keep the aligned kernels."""
    wdt = wc.bf16 if dtype == torch.bfloat16 else wc.f16
    config = rows_odd.odd_config(wdt, n, kind, n)
    assert config is not None and (config[1:] == (8, 1) or kind != "softmax")
    assert rows_odd.odd_config(wdt, n, kind, n + 8) is None
    assert rows_odd.odd_config(wdt, 8192, kind, 8192) is None
    _into_nan_buffer(kind, dtype, n, 2, 0, tables=kind != "softmax")
