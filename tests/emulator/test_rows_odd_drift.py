"""Slices whose offset within 16 bytes drifts from row to row against the contiguous output's
(``kernels/rows_odd_drift.py``: ``x[:, :n]`` of rows ``P`` long, ``(P - n) % V != 0``), on the emulator against
torch in f64: both output variants (``OddRules.drift``), softmax / RMSNorm / LayerNorm, f16 / bf16 / f32,
into NaN-filled buffers with guard elements around the rows (every output element written, nothing else),
through the public ops (a contiguous output, the drift kernel the one compiled) and the rules' choices."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import wavec as wc
from wavec.kernels import layer_norm, rms_norm, rows, rows_odd, rows_odd_rules, softmax

F = torch.nn.functional
TOL = {torch.float16: (2e-3, 4e-3), torch.bfloat16: (1.6e-2, 3e-2), torch.float32: (2e-6, 2e-6)}
WC = {torch.float16: wc.f16, torch.bfloat16: wc.bf16, torch.float32: wc.f32}
KINDS = ("softmax", "rms_norm", "layer_norm")
GUARD = 19  # NaN elements past the last row (more than a chunk and an edge tail)
LIBRARY = rows_odd_rules.RULES


@pytest.fixture
def drift(monkeypatch: pytest.MonkeyPatch):
    """``use(variant)``: the odd path's rules with ``OddRules.drift`` = ``variant``, fresh decisions."""

    def use(variant: str) -> None:
        monkeypatch.setattr(rows_odd_rules, "RULES", dataclasses.replace(LIBRARY, drift=variant))
        monkeypatch.setattr(rows, "_DECIDED", rows.Decisions("rows"))

    return use


def _want(kind: str, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    n, xd = x.shape[-1], x.double()
    if kind == "softmax":
        return torch.softmax(xd, -1)
    if kind == "rms_norm":
        return F.rms_norm(xd, (n,), w.double(), 1e-6)
    return F.layer_norm(xd, (n,), w.double(), b.double(), 1e-5)


def _check(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    assert got.dtype == dtype and got.shape == want.shape
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(got.double(), want, rtol=rtol, atol=atol)


def _slice(dtype: torch.dtype, m: int, n: int, pitch: int, shift: int, seed: int) -> tuple:
    """Rows [m, n] at ``pitch`` starting ``shift`` elements past a 16-byte boundary, and a weight and bias."""
    g = torch.Generator().manual_seed(seed)
    buf = (torch.randn(shift + m * pitch, generator=g) * 2 + 1).to(dtype)
    x = buf[shift:].view(m, pitch)[:, :n]
    return x, torch.randn(n, generator=g).to(dtype), torch.randn(n, generator=g).to(dtype)


def _kernel_into_guarded(kind: str, dtype: torch.dtype, n: int, pitch: int, m: int, shift: int, tables: bool):
    """The library's drift kernel for ``kind`` run directly (``odd_kernel`` / ``odd_args``) into an output
    buffer of NaN: the rows right, the ``shift`` elements before them and ``GUARD`` after them still NaN."""
    wdt, vec = WC[dtype], 16 // dtype.itemsize
    x, w, b = _slice(dtype, m, n, pitch, shift, seed=n + pitch + shift)
    plan = rows_odd_rules.odd_plan(wdt, n, kind, pitch, tables)
    assert plan is not None and plan.drift == (rows_odd_rules.RULES.drift if (pitch - n) % vec else None)
    kernel = rows_odd.odd_kernel(kind, wdt, n, pitch, "emulator", tables)
    out_buf = torch.full((-(-(shift + m * n + GUARD) // vec) * vec,), float("nan"), dtype=dtype)
    starts = torch.arange(m, dtype=torch.int32) * pitch + shift
    inner = torch.empty(rows_odd.inner_size(kind, wdt, n, pitch), dtype=torch.int8)
    vectors, scalars = {"softmax": ((), ()), "rms_norm": ((w,), (1e-6, 1 / n)), "layer_norm": ((w, b), (1e-5, 1 / n))}[
        kind
    ]
    if tables:
        vectors = (*vectors, *(rows_odd.shifted_table(v, vec, (n - vec + 1) // vec) for v in vectors))
    before = x.clone()
    kernel(*rows_odd.odd_args(x, out_buf, shift, starts, inner, vectors, scalars, plan.reread))
    got = out_buf[shift : shift + m * n].view(m, n)
    assert not got.isnan().any(), "an output element was not written"
    assert out_buf[:shift].isnan().all() and out_buf[shift + m * n :].isnan().all(), "written outside the rows"
    assert torch.equal(x, before)
    _check(got, _want(kind, x, w, b), dtype)


@pytest.mark.parametrize("variant", rows_odd_rules.DRIFTS)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "dtype, n, pitch, shift",
    [
        (torch.bfloat16, 1025, 1030, 3),  # gap 5: the offset walks through every residue of 8
        (torch.bfloat16, 2049, 2052, 0),  # two rows a workgroup over several waves
        (torch.float32, 2049, 2052, 1),  # gap 3 of 4
        (torch.float16, 1025, 1027, 7),
        (torch.float32, 1031, 1033, 2),  # gap 2: every other row aligned with the output's
    ],
)
def test_drift_kernel_writes_every_element_and_nothing_else(
    drift, variant: str, kind: str, dtype: torch.dtype, n: int, pitch: int, shift: int
) -> None:
    """5 rows (a partial workgroup of the 4- and 2-row layouts) into a guarded NaN buffer."""
    drift(variant)
    _kernel_into_guarded(kind, dtype, n, pitch, 5, shift, tables=False)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype, n, pitch", [(torch.bfloat16, 2049, 2057), (torch.float32, 2049, 2053)])
def test_drift_free_slices_over_one_row_a_workgroup(kind: str, dtype: torch.dtype, n: int, pitch: int) -> None:
    """Slices whose offset keeps the output's take the contiguous rows' layout, the norms one row a
    workgroup (the output row's place from the row's start, ``rows_odd.back``): every element, nothing
    else."""
    assert kind == "softmax" or rows_odd.odd_config(WC[dtype], n, kind, pitch)[2] == 1
    _kernel_into_guarded(kind, dtype, n, pitch, 5, 3, tables=False)


@pytest.mark.parametrize("variant", rows_odd_rules.DRIFTS)
@pytest.mark.parametrize("kind", ["rms_norm", "layer_norm"])
def test_drift_norms_through_shifted_tables(drift, variant: str, kind: str) -> None:
    """The norms' variant for large inputs (vectors' interiors from ``shifted_table``s at the input's head
    offsets): the output at its own alignment all the same."""
    drift(variant)
    _kernel_into_guarded(kind, torch.bfloat16, 2049, 2055, 3, 5, tables=True)


@pytest.mark.parametrize("variant", rows_odd_rules.DRIFTS)
@pytest.mark.parametrize("dtype, n, pitch", [(torch.bfloat16, 1025, 1030), (torch.float32, 2049, 2052)])
def test_public_ops_on_drifting_slices(drift, variant: str, dtype: torch.dtype, n: int, pitch: int) -> None:
    """``softmax`` / ``rms_norm`` / ``layer_norm`` of a drifting slice: contiguous outputs matching torch,
    served by the drift kernel of ``variant`` (the one compiled), the input untouched."""
    drift(variant)
    x, w, b = _slice(dtype, 4, n, pitch, 0, seed=n)
    before = x.clone()
    for kind, call in (
        ("softmax", lambda: softmax(x, backend="emulator")),
        ("rms_norm", lambda: rms_norm(x, w, 1e-6, backend="emulator")),
        ("layer_norm", lambda: layer_norm(x, w, b, 1e-5, backend="emulator")),
    ):
        got = call()
        assert got.is_contiguous()
        _check(got, _want(kind, x, w, b), dtype)
        assert any(key[0] == kind and key[-1] == variant for key in rows_odd._COMPILED)
    assert torch.equal(x, before)


def test_drift_rules() -> None:
    """Drifting slices take the odd path with the library's variant (``shared``), drift-free ones none;
    ``shared`` past ``DRIFT_SHARED_MAX`` (f32 softmax's two rows of 4096 chunks) stores by ``scatter``; an
    empty ``drift`` leaves drifting slices to the narrow kernel; slices take the contiguous rows' layouts,
    one row a workgroup included."""
    plan = rows_odd_rules.odd_plan
    assert rows_odd_rules.RULES.drift == "shared"
    assert plan(wc.bf16, 4097, "rms_norm", 4104).drift == "shared"
    assert plan(wc.bf16, 4097, "layer_norm", 4104).config == plan(wc.bf16, 4097, "layer_norm", 4097).config
    assert plan(wc.bf16, 4097, "layer_norm", 4104).config[2] == 1  # one row a workgroup
    assert plan(wc.bf16, 4097, "softmax", 4104).config == (512, 4, 1)  # drift_softmax_one_row (4 waves)
    assert plan(wc.bf16, 4097, "softmax", 4105).config == (512, 4, 2)  # drift-free: the contiguous layout
    assert plan(wc.bf16, 2049, "softmax", 2052).config == (256, 2, 2)
    assert plan(wc.bf16, 4097, "rms_norm", 4105).drift is None  # gap 8: drift-free
    assert plan(wc.bf16, 4097, "rms_norm", 4097).drift is None
    assert plan(wc.f32, 1025, "softmax", 1026).drift == "shared"
    assert plan(wc.f32, 16383, "softmax", 16390).drift == "scatter"  # 2 x 4099 x 16 bytes > 64 KB
    assert rows_odd_rules.drift_shared_bytes(2, 4096) > rows_odd_rules.DRIFT_SHARED_MAX
    assert plan(wc.bf16, 16383, "softmax", 16390).drift == "shared"  # one row of 2051 x 16 bytes
    assert plan(wc.bf16, 16383, "rms_norm", 16390).config[2] == 1
    saved = rows_odd_rules.RULES
    try:
        rows_odd_rules.RULES = dataclasses.replace(saved, drift="")
        assert plan(wc.bf16, 4097, "rms_norm", 4104) is None
        assert plan(wc.bf16, 4097, "rms_norm", 4105) is not None
        rows_odd_rules.RULES = dataclasses.replace(saved, drift="gather")
        with pytest.raises(ValueError, match="drift"):
            plan(wc.bf16, 4097, "rms_norm", 4104)
    finally:
        rows_odd_rules.RULES = saved
