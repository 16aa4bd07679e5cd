"""GPU tier: softmax / RMSNorm / LayerNorm of slices ``x[:, :n]`` whose offset within 16 bytes drifts from
row to row against the contiguous output's (``kernels/rows_odd_drift.py``; bf16 4097 of 4104 is the issue's),
f16 / bf16 / f32, both output variants (``OddRules.drift``), against torch in f64: contiguous outputs, no
narrow variant launched, every element of a NaN-filled output buffer written and its guard untouched."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import wavec as wc
from tests.gpu.test_rows_gpu import TOL, _layer_norm_close, check_kinds
from wavec.kernels import layer_norm, rms_norm, rows, rows_odd, rows_odd_rules

pytestmark = pytest.mark.gpu
F = torch.nn.functional
WC = {torch.float16: wc.f16, torch.bfloat16: wc.bf16, torch.float32: wc.f32}
LIBRARY = rows_odd_rules.RULES
# (n, pitch): the slice, gaps of several residues, four rows of one wave (1025 16-bit), 16 waves a
# row (the norms at 8191 16-bit, 4097 f32: the longest slices the odd path takes)
SLICES = [(4097, 4104), (1025, 1030), (2049, 2052), (2049, 2051), (3001, 3003)]
CASES = [(dt, n, p) for dt in (torch.float16, torch.bfloat16, torch.float32) for n, p in SLICES]
CASES += [(torch.bfloat16, 8191, 8196), (torch.float16, 8191, 8193)]


@pytest.fixture(params=rows_odd_rules.DRIFTS)
def variant(request, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(rows_odd_rules, "RULES", dataclasses.replace(LIBRARY, drift=request.param))
    monkeypatch.setattr(rows, "_DECIDED", rows.Decisions("rows"))
    return request.param


@pytest.mark.parametrize("dtype, n, pitch", CASES)
def test_drifting_slices_match_torch(variant: str, dtype: torch.dtype, n: int, pitch: int) -> None:
    """1031 rows (a partial last workgroup), a mean of 1 and spread 2; the drift kernel serves every kind
    (no narrow variant), the input untouched."""
    from wavec.runtime.variants import reset_variant_report, variant_report

    m = 1031
    x = (torch.randn(m, pitch, device="cuda") * 2 + 1).to(dtype)[:, :n]
    w, b = torch.randn(n, device="cuda").to(dtype), torch.randn(n, device="cuda").to(dtype)
    before = x.clone()
    for kind in rows.KINDS:
        plan = rows_odd_rules.odd_plan(WC[dtype], n, kind, pitch)
        assert plan is not None and plan.drift is not None
    reset_variant_report()
    check_kinds(x, w, b)
    torch.cuda.synchronize()
    assert variant_report() == {}, variant_report()
    assert torch.equal(x, before)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n, pitch", [(4097, 4104), (2049, 2054)])
def test_drifting_norms_through_shifted_tables(
    monkeypatch: pytest.MonkeyPatch, variant: str, dtype: torch.dtype, n: int, pitch: int
) -> None:
    """``TABLE_MIN_BYTES`` 0: the norms' vectors through per-call ``shifted_table``s (inputs of 32 MB or
    more), a large mean (LayerNorm's shifted statistics)."""
    monkeypatch.setattr(rows_odd, "TABLE_MIN_BYTES", 0)
    m = 777
    x = (1000 + torch.randn(m, pitch, device="cuda")).to(dtype)[:, :n]
    w, b = torch.randn(n, device="cuda").to(dtype), torch.randn(n, device="cuda").to(dtype)
    xd, (rtol, atol) = x.double(), TOL[dtype]
    torch.testing.assert_close(
        rms_norm(x, w, 1e-6).double(), F.rms_norm(xd, (n,), w.double(), 1e-6), rtol=rtol, atol=atol
    )
    _layer_norm_close(layer_norm(x, w, b, 1e-5), xd, w, b, dtype)


@pytest.mark.parametrize("kind", rows.KINDS)
@pytest.mark.parametrize("dtype, n, pitch", [(torch.bfloat16, 4097, 4104), (torch.float32, 2049, 2054)])
def test_drift_kernel_writes_every_element_and_nothing_else(
    variant: str, kind: str, dtype: torch.dtype, n: int, pitch: int
) -> None:
    """The library's drift kernel into a NaN-filled buffer, rows 5 elements past a 16-byte boundary: the
    rows finite and right, the elements before them and a guard of 19 after them still NaN."""
    wdt, vec, m, shift = WC[dtype], 16 // dtype.itemsize, 777, 5
    x = torch.randn(shift + m * pitch, device="cuda").to(dtype)[shift:].view(m, pitch)[:, :n]
    w, b = torch.randn(n, device="cuda").to(dtype), torch.randn(n, device="cuda").to(dtype)
    plan = rows_odd_rules.odd_plan(wdt, n, kind, pitch, tables=False)
    assert plan is not None and plan.drift == variant
    kernel = rows_odd.odd_kernel(kind, wdt, n, pitch, "cuda")
    out_buf = torch.full((-(-(shift + m * n + 19) // vec) * vec,), float("nan"), device="cuda", dtype=dtype)
    starts = torch.arange(m, dtype=torch.int32, device="cuda") * pitch + shift
    inner = torch.empty(rows_odd.inner_size(kind, wdt, n, pitch), dtype=torch.int8, device="cuda")
    vectors, scalars = {"softmax": ((), ()), "rms_norm": ((w,), (1e-6, 1 / n)), "layer_norm": ((w, b), (1e-5, 1 / n))}[
        kind
    ]
    kernel(*rows_odd.odd_args(x, out_buf, shift, starts, inner, vectors, scalars, plan.reread))
    got = out_buf[shift : shift + m * n].view(m, n)
    assert not got.isnan().any()
    assert out_buf[:shift].isnan().all() and out_buf[shift + m * n :].isnan().all()
    xd, (rtol, atol) = x.double(), TOL[dtype]
    if kind == "layer_norm":
        _layer_norm_close(got, xd, w, b, dtype)
        return
    want = torch.softmax(xd, -1) if kind == "softmax" else F.rms_norm(xd, (n,), w.double(), 1e-6)
    torch.testing.assert_close(got.double(), want, rtol=rtol, atol=atol)
