"""``wavec.kernels.softmax`` / ``rms_norm`` / ``layer_norm`` (``kernels/rows.py``) on the emulator against
torch in f64: row lengths below, at and past a tile, odd ones (the narrow variant), each dtype; every
element written (NaN-filled outputs); bad arguments named."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from wavec.kernels import layer_norm, rms_norm, rows, rows_odd, softmax

F = torch.nn.functional
TOL = {torch.float16: (2e-3, 4e-3), torch.bfloat16: (1.6e-2, 3e-2), torch.float32: (2e-6, 2e-6)}


def _check(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    assert got.dtype == dtype and got.shape == want.shape
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(got.double(), want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n", [1, 7, 96, 256, 300, 2049, 20000])  # one tile (2049: 2 waves a row); loops
def test_rows_match_torch(dtype: torch.dtype, n: int) -> None:
    x = (torch.randn(3, 3, n) * 2 + 1).to(dtype)  # 9 rows: the last workgroup of 4 rows is partial
    w, b = torch.randn(n).to(dtype), torch.randn(n).to(dtype)
    xd = x.double()
    _check(softmax(x, backend="emulator"), torch.softmax(xd, -1), dtype)
    _check(rms_norm(x, w, 1e-6, backend="emulator"), F.rms_norm(xd, (n,), w.double(), 1e-6), dtype)
    _check(layer_norm(x, w, b, 1e-5, backend="emulator"), F.layer_norm(xd, (n,), w.double(), b.double(), 1e-5), dtype)
    _check(layer_norm(x, backend="emulator"), F.layer_norm(xd, (n,), eps=1e-5), dtype)


@pytest.mark.parametrize("loop", [True, False])
def test_every_element_written_and_tiles_chain(loop: bool) -> None:
    """Three full tiles and a ragged fourth (or one masked tile), straight through the kernel into
    NaN-filled outputs."""
    n, block = (1000, 256) if loop else (1000, 1024)
    x = torch.randn(6, n)
    k = wc.compile(rows.make_softmax_rows(wc.f32, loop), {rows.BLOCK_N: block}, backend="emulator", cache=False)
    out = torch.full_like(x, float("nan"))
    k(x, out)
    _check(out, torch.softmax(x.double(), -1), torch.float32)


@pytest.mark.parametrize("n", [1000, 3000, 6000, 20000])
def test_layer_norm_keeps_variance_under_a_large_mean(n: int) -> None:
    """f32 rows (two passes, ``row_stats``) of a mean of 1e4 with unit spread lose nothing, one row's first
    element 30 spreads out: one tile (1000), one row per workgroup over 16 and 32 waves (3000, 6000),
    looped tiles (20000, Chan's merge).  ``E[x^2] - E[x]^2`` in f32 would cancel the variance to noise."""
    x = torch.randn(4, n, generator=torch.Generator().manual_seed(n)) + 1e4
    x[1, 0] = 1e4 + 30.0
    got = layer_norm(x, backend="emulator").double()
    want = F.layer_norm(x.double(), (n,))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)  # unshifted f32 means: 1-3e-3
    assert (got.std(-1) - 1).abs().max() < 0.01  # unit spread kept in every row


@pytest.mark.parametrize("pitch", [0, 4])
@pytest.mark.parametrize("n", [12288, 16384])
def test_f32_rows_past_8192(n: int, pitch: int) -> None:
    """Aligned f32 rows of 8193-16384: slices of them (``pitch`` elements beyond the row) are one tile over
    16 waves at 8 runs a lane (``MAX_TILE_ELEMENTS``; RMSNorm one row a workgroup, ``rms_norm_long``), not
    looped tiles, 12288 leaving part of the tile masked; contiguous ones take ``rows_odd`` at 16 waves
    (``aligned_elements``).  All three ops match torch, a mean of 1e4 included (LayerNorm's two passes)."""
    for kind in ("softmax", "rms_norm", "layer_norm"):
        block_n, loop, _vec, waves, _layout = rows.plan_for(wc.f32, n, kind)
        assert (block_n, loop, waves) == (16384, False, 16)
        assert (rows_odd.odd_config(wc.f32, n, kind, n + pitch) is None) == (pitch > 0)
    assert rows.plan_for(wc.f32, n, "rms_norm")[4] == "rms_norm_long"
    g = torch.Generator().manual_seed(n)
    x = (torch.randn(3, n + pitch, generator=g) * 2 + 1)[:, :n]
    w, b = torch.randn(n, generator=g), torch.randn(n, generator=g)
    xd = x.double()
    _check(softmax(x, backend="emulator"), torch.softmax(xd, -1), torch.float32)
    _check(rms_norm(x, w, 1e-6, backend="emulator"), F.rms_norm(xd, (n,), w.double(), 1e-6), torch.float32)
    want = F.layer_norm(xd, (n,), w.double(), b.double(), 1e-5)
    _check(layer_norm(x, w, b, 1e-5, backend="emulator"), want, torch.float32)
    big = x + 1e4
    got = layer_norm(big, backend="emulator").double()
    torch.testing.assert_close(got, F.layer_norm(big.double(), (n,)), rtol=1e-4, atol=1e-4)


def test_softmax_extremes() -> None:
    x = torch.tensor([[0.0, float("-inf"), 3.0, 88.0], [-1e30, -1e30, -1e30, 5.0]])
    _check(softmax(x, backend="emulator"), torch.softmax(x.double(), -1), torch.float32)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: softmax(torch.zeros(4, 8, dtype=torch.int32)), "x must be a tensor .* int32"),
        (lambda: softmax(torch.zeros(4, 8), dim=0), "dim must be the last dim"),
        (lambda: rms_norm(torch.zeros(4, 8), torch.zeros(7)), r"weight must be \[8\]"),
        (lambda: layer_norm(torch.zeros(4, 8), None, torch.zeros(8, dtype=torch.float16)), r"bias must be \[8\]"),
        (lambda: rms_norm(torch.zeros(4, 8), None, eps=-1.0), "eps must be a float >= 0"),
    ],
)
def test_bad_arguments_are_named(call, match: str) -> None:
    with pytest.raises(wc.WavecError, match=match):
        call()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [1000, 2048, 3000, 9000])
def test_layer_norm_one_pass_keeps_a_large_mean(dtype: torch.dtype, n: int) -> None:
    """f16/bf16 rows (one pass over x less the row's first element, ``row_stats``) of 1000 + randn, one
    row's first element 30 spreads out: one tile over one and two waves (1000, 2048), one row per
    workgroup (3000, 9000).  Without the shift the f32 sums would cancel the unit variance to noise."""
    x = 1000 + torch.randn(4, n, generator=torch.Generator().manual_seed(n))
    x[1, 0] = 1030.0
    x = x.to(dtype)
    got = layer_norm(x, backend="emulator")
    _check(got, F.layer_norm(x.double(), (n,)), dtype)
    assert (got.double().std(-1) - 1).abs().max() < 0.05


@pytest.mark.parametrize("reread", [False, True])
@pytest.mark.parametrize("dtype, n", [(torch.float32, 6000), (torch.bfloat16, 9000)])
def test_layer_norm_one_row_per_workgroup(dtype: torch.dtype, n: int, reread: bool) -> None:
    """Tiles of 32 units or more (``make_layer_norm_long``: one row per workgroup, 8 waves of 8 runs a
    lane, 16 of 4 for f32; ``reread``: x read again after the statistics) into NaN-filled outputs, unit
    spread and a mean of 1000; and through ``layer_norm``."""
    wdtype = rows.DTYPES[str(dtype).removeprefix("torch.")]
    block, loop, vec, waves = rows.config_for(wdtype, n, "layer_norm")
    runs = rows.RUNS_PER_WAVE if dtype == torch.float32 else rows.LN_REREAD_RUNS  # (f32 keeps its row)
    assert (loop, waves) == (False, block // (runs * 32 * vec)) and waves == 64 // runs
    kernel = rows.make_layer_norm_long(wdtype, waves, vec=vec, reread=reread)
    k = wc.compile(kernel, {rows.BLOCK_N: block}, backend="emulator")
    for mean in (1.0, 1000.0):
        x = (mean + torch.randn(3, n) * 2).to(dtype)
        w, b = torch.randn(n).to(dtype), torch.randn(n).to(dtype)
        out = torch.full_like(x, float("nan"))
        k(x, w, b, out, 1e-5, 1 / n)
        want = F.layer_norm(x.double(), (n,), w.double(), b.double(), 1e-5)
        if dtype == torch.float32 and mean > 1:  # f32 sums of values near 1000: ~1e-4 (torch's as well)
            torch.testing.assert_close(out.double(), want, rtol=1e-3, atol=1e-3)
        else:
            _check(out, want, dtype)
    if dtype != torch.float32:
        _check(layer_norm(x, w, b, 1e-5, backend="emulator"), want, dtype)


@pytest.mark.parametrize("dtype, n, block, waves", [(torch.bfloat16, 6000, 8192, 8), (torch.float32, 3000, 4096, 8)])
def test_softmax_and_rms_norm_one_row_per_workgroup(dtype: torch.dtype, n: int, block: int, waves: int) -> None:
    """The candidate layouts ``make_softmax_long`` / ``make_rms_norm_long`` (one row per workgroup, 4 runs a
    lane; ``benchmarks/rows_sweep.py`` times them) into NaN-filled outputs, a masked tile (n < block)."""
    wdtype = rows.DTYPES[str(dtype).removeprefix("torch.")]
    vec = 16 // dtype.itemsize
    assert block == waves * rows.RUNS_PER_WAVE * 32 * vec
    x = (torch.randn(3, n) * 2 + 1).to(dtype)
    w = torch.randn(n).to(dtype)
    xd = x.double()
    for make, args, want in [
        (rows.make_softmax_long, (x,), torch.softmax(xd, -1)),
        (rows.make_rms_norm_long, (x, w), F.rms_norm(xd, (n,), w.double(), 1e-6)),
    ]:
        k = wc.compile(make(wdtype, waves, vec=vec), {rows.BLOCK_N: block}, backend="emulator", cache=False)
        out = torch.full_like(x, float("nan"))
        k(*args, out, *(() if make is rows.make_softmax_long else (1e-6, 1 / n)))
        _check(out, want, dtype)


@pytest.mark.parametrize("n", [4096, 8191, 16384, 20000])
def test_f32_layer_norm_as_accurate_as_torch(n: int) -> None:
    """f32 LayerNorm within a few ulps of ``|xhat * w|`` where the shift (the row's first element) lies
    far from the mean, on each statistics path: one tile (the corrected two-pass mean), odd lengths
    (``rows_odd``), loops over tiles with and without a masked last one (the running mean as an exact
    pair).  Before, those rows' means carried f32 rounding of the shifted sum: 0.9-1.4e-6 against torch's
    3e-7 (an H200: 1.0-2.2e-6)."""
    torch.manual_seed(n)
    x = torch.randn(48, n) * 2 + 1
    x[::2, 0] = torch.tensor([9.0, -7.0]).repeat(12)  # first elements 4 spreads from the mean
    w, b = torch.randn(n) * 2, torch.randn(n)
    xd = x.double()
    want = torch.nn.functional.layer_norm(xd, (n,), w.double(), b.double(), 1e-5)
    scale = 1 + (torch.nn.functional.layer_norm(xd, (n,), eps=1e-5) * w.double()).abs()
    got = layer_norm(x, w, b, 1e-5, backend="emulator")
    theirs = torch.nn.functional.layer_norm(x, (n,), w, b, 1e-5)
    err, torch_err = (((g.double() - want).abs() / scale).max().item() for g in (got, theirs))
    assert err <= max(2 * torch_err, 4 * 2.0**-23), (err, torch_err)
