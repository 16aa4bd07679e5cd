"""GPU tier: ``wavec.kernels.softmax`` / ``rms_norm`` / ``layer_norm`` against torch in f64 at row lengths
from 1 to 16384, odd ones included (``rows_odd``; the narrow variant below 257 and past one tile), f16, bf16
and f32, and the torch operators."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from wavec.kernels import layer_norm, rms_norm, rows, softmax

pytestmark = pytest.mark.gpu
F = torch.nn.functional
TOL = {torch.float16: (2e-3, 4e-3), torch.bfloat16: (1.6e-2, 3e-2), torch.float32: (2e-6, 2e-6)}


def _layer_norm_close(got: torch.Tensor, xd: torch.Tensor, w: torch.Tensor, b: torch.Tensor, dtype) -> None:
    """LayerNorm against torch in f64: ``TOL``, and in f32 also two roundings of ``xhat * w`` (up to ~20
    at five spreads and a weight of 4, an ulp 2e-6: 1 output in 8.4M missed 2e-6 alone on an H200)."""
    n = xd.shape[-1]
    want = F.layer_norm(xd, (n,), w.double(), b.double(), 1e-5)
    rtol, atol = TOL[dtype]
    bound = atol + rtol * want.abs()
    if dtype == torch.float32:
        bound = bound + 2.0**-22 * (F.layer_norm(xd, (n,), eps=1e-5) * w.double()).abs()
    excess = (got.double() - want).abs() - bound
    assert excess.max().item() <= 0, f"{int((excess > 0).sum())} outputs past the bound, worst by {excess.max():.3g}"


def check_kinds(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> None:
    """softmax, rms_norm and layer_norm of rows ``x`` against torch in f64 (``TOL``): contiguous outputs of
    ``x``'s dtype, LayerNorm's finite and within ``_layer_norm_close``."""
    dtype, n, xd = x.dtype, x.shape[-1], x.double()
    rtol, atol = TOL[dtype]
    for got, want in [
        (softmax(x), torch.softmax(xd, -1)),
        (rms_norm(x, w, 1e-6), F.rms_norm(xd, (n,), w.double(), 1e-6)),
    ]:
        assert got.dtype == dtype and got.is_contiguous()
        torch.testing.assert_close(got.double(), want, rtol=rtol, atol=atol)
    got = layer_norm(x, w, b, 1e-5)  # (its f32 rounding scales with xhat * w, not the output: + b cancels)
    assert got.dtype == dtype and got.is_contiguous() and torch.isfinite(got).all()
    _layer_norm_close(got, xd, w, b, dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n", [1, 96, 128, 300, 1000, 1024, 2049, 4096, 4097, 8192, 12288, 12289, 16384, 20000])
def test_rows_match_torch(dtype: torch.dtype, n: int) -> None:
    x = (torch.randn(1031, n, device="cuda") * 2 + 1).to(dtype)
    w, b = torch.randn(n, device="cuda").to(dtype), torch.randn(n, device="cuda").to(dtype)
    check_kinds(x, w, b)


@pytest.mark.parametrize("n", [4096, 8191, 12288, 16384, 20000])
def test_f32_layer_norm_as_accurate_as_torch(n: int) -> None:
    """f32 LayerNorm within 2x torch's own f32 error (both against f64, per ``1 + |xhat * w|``) where the
    shift (the row's first element) lies four spreads from the mean, on every statistics path (one tile,
    odd, loops with and without a masked last tile): the corrected means of ``row_stats`` / ``rows``."""
    torch.manual_seed(n)
    x = torch.randn(1031, n, device="cuda") * 2 + 1
    x[::2, 0] = torch.tensor([9.0, -7.0], device="cuda").repeat(258)[: x[::2].shape[0]]
    w, b = torch.randn(n, device="cuda") * 2, torch.randn(n, device="cuda")
    xd = x.double()
    want = F.layer_norm(xd, (n,), w.double(), b.double(), 1e-5)
    scale = 1 + (F.layer_norm(xd, (n,), eps=1e-5) * w.double()).abs()
    ours, theirs = (
        ((g.double() - want).abs() / scale).max().item()
        for g in (layer_norm(x, w, b, 1e-5), F.layer_norm(x, (n,), w, b, 1e-5))
    )
    assert ours <= max(2 * theirs, 4 * 2.0**-23), (ours, theirs)


@pytest.mark.parametrize("loop", [True, False])
def test_every_element_written(loop: bool) -> None:
    n, block = (3000, 1024) if loop else (1000, 1024)
    x = torch.randn(777, n, device="cuda", dtype=torch.bfloat16)
    k = wc.compile(rows.make_softmax_rows(wc.bf16, loop), {rows.BLOCK_N: block}, backend="cuda")
    out = torch.full_like(x, float("nan"))
    k(x, out)
    torch.testing.assert_close(out.double(), torch.softmax(x.double(), -1), rtol=1.6e-2, atol=1e-4)


def test_torch_ops_on_cuda() -> None:
    import wavec.kernels.torch_ops  # noqa: F401 - registers torch.ops.wavec.*

    x = torch.randn(4, 64, 4096, device="cuda", dtype=torch.float16)
    w = torch.randn(4096, device="cuda", dtype=torch.float16)
    got = torch.ops.wavec.rms_norm(x, w, 1e-5)
    torch.testing.assert_close(got.double(), F.rms_norm(x.double(), (4096,), w.double(), 1e-5), rtol=2e-3, atol=4e-3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("d", [1, 300, 4096, 14336])
def test_silu_and_mul(dtype: torch.dtype, d: int) -> None:
    from wavec.kernels import silu_and_mul

    x = (torch.randn(3, 77, 2 * d, device="cuda") * 3).to(dtype)
    want = F.silu(x[..., :d].double()) * x[..., d:].double()
    rtol = 2e-3 if dtype == torch.float16 else 1.6e-2
    torch.testing.assert_close(silu_and_mul(x).double(), want, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear(dtype: torch.dtype, with_bias: bool) -> None:
    from wavec.kernels import linear

    x, w = torch.randn(2, 333, 4096, device="cuda").to(dtype), torch.randn(1000, 4096, device="cuda").to(dtype)
    b = torch.randn(1000, device="cuda").to(dtype) if with_bias else None
    got = linear(x, w, b)
    want = F.linear(x.double(), w.double(), None if b is None else b.double())
    assert got.dtype == dtype and ((got.double() - want).norm() / want.norm()).item() < (
        2e-3 if dtype == torch.float16 else 1e-2
    )


ODD_N = [263, 1025, 2049, 4097, 8191, 16383]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n", ODD_N)
@pytest.mark.parametrize("offset", [0, 3])
def test_odd_rows_take_the_chunked_kernel(dtype: torch.dtype, n: int, offset: int) -> None:
    """Odd lengths (``kernels/rows_odd.py``), rows starting ``offset`` elements past a 16-byte boundary:
    torch's result in f64, and no narrow variant launched (16-byte accesses for the rows' interiors)."""
    from wavec.kernels import rows_odd
    from wavec.runtime.variants import reset_variant_report, variant_report

    m = 1031
    x = ((torch.randn(offset + m * n, device="cuda") * 2 + 1).to(dtype))[offset:].view(m, n)
    w, b = torch.randn(n, device="cuda").to(dtype), torch.randn(n, device="cuda").to(dtype)
    reset_variant_report()
    check_kinds(x, w, b)
    torch.cuda.synchronize()
    # past one tile (16384 bf16, 8192 f32) rows loop in the narrow variant
    if all(rows_odd.odd_config(rows.DTYPES[str(dtype)[6:]], n, k, n) is not None for k in rows.KINDS):
        assert variant_report() == {}, variant_report()


@pytest.mark.parametrize("n", [1000, 1024, 2048, 4096, 8192, 2049, 4097, 5001, 6000, 20000])
def test_layer_norm_of_a_large_mean(n: int) -> None:
    """f32 rows 1e4 + randn, one row's first element (the one-pass shift, ``row_stats``) 30 spreads out:
    every LayerNorm path (one tile, one row per workgroup, odd rows over two and one rows a workgroup,
    loops) keeps the unit variance that ``E[x^2] - E[x]^2`` would cancel."""
    x = torch.randn(257, n, device="cuda", dtype=torch.float64) + 1e4
    x[1, 0] = 1e4 + 30.0
    x = x.float()
    got = layer_norm(x).double()
    # shifted by the row's first element, f32 keeps ~1e-6 (an unshifted f32 mean near 1e4: 2-3e-3)
    torch.testing.assert_close(got, F.layer_norm(x.double(), (n,)), rtol=1e-4, atol=1e-4)
    assert (got.std(-1) - 1).abs().max().item() < 0.01


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("n", ODD_N[1:])
@pytest.mark.parametrize("offset", [0, 5])
def test_odd_norms_through_shifted_tables(
    monkeypatch: pytest.MonkeyPatch, dtype: torch.dtype, n: int, offset: int
) -> None:
    """``TABLE_MIN_BYTES`` 0: the norms read the weight and bias interiors from per-call ``shifted_table``s
    (what inputs of 32 MB or more take), against torch in f64."""
    from wavec.kernels import rows_odd

    monkeypatch.setattr(rows_odd, "TABLE_MIN_BYTES", 0)
    monkeypatch.setattr(rows, "_DECIDED", rows.Decisions("rows"))  # not the runners decided before
    m = 1031
    x = ((torch.randn(offset + m * n, device="cuda") * 2 + 1).to(dtype))[offset:].view(m, n)
    w, b = torch.randn(n, device="cuda").to(dtype), torch.randn(n, device="cuda").to(dtype)
    xd, (rtol, atol) = x.double(), TOL[dtype]
    torch.testing.assert_close(
        rms_norm(x, w, 1e-6).double(), F.rms_norm(xd, (n,), w.double(), 1e-6), rtol=rtol, atol=atol
    )
    _layer_norm_close(layer_norm(x, w, b, 1e-5), xd, w, b, dtype)


@pytest.mark.parametrize("pitch", [8, 24])
def test_odd_row_slices(pitch: int) -> None:
    """``x[:, :n]`` of rows ``pitch`` elements longer (a 16-byte multiple: same path) and a large mean."""
    n, m = 4097, 513
    x = (1000 + torch.randn(m, n + pitch, device="cuda")).to(torch.bfloat16)[:, :n]
    w, b = torch.randn(n, device="cuda").to(torch.bfloat16), torch.randn(n, device="cuda").to(torch.bfloat16)
    xd = x.double()
    torch.testing.assert_close(softmax(x).double(), torch.softmax(xd, -1), rtol=1.6e-2, atol=3e-2)
    want = F.layer_norm(xd, (n,), w.double(), b.double(), 1e-5)
    torch.testing.assert_close(layer_norm(x, w, b, 1e-5).double(), want, rtol=1.6e-2, atol=3e-2)


@pytest.mark.parametrize("kind", rows.KINDS)
@pytest.mark.parametrize("n", [2049, 16383])
def test_odd_rows_write_every_element_and_nothing_else(kind: str, n: int) -> None:
    """The odd-row kernel into a NaN-filled buffer: the rows finite and right, the elements around them
    still NaN (16383: the norms one row per workgroup)."""
    from wavec.kernels import rows_odd

    m, shift = 777, 5
    x = torch.randn(shift + m * n, device="cuda", dtype=torch.bfloat16)[shift:].view(m, n)
    w, b = torch.randn(n, device="cuda", dtype=torch.bfloat16), torch.randn(n, device="cuda", dtype=torch.bfloat16)
    kernel = rows_odd.odd_kernel(kind, wc.bf16, n, n, "cuda")
    out_buf = torch.full((-(-(shift + m * n) // 8) * 8,), float("nan"), device="cuda", dtype=torch.bfloat16)
    starts = torch.arange(m, dtype=torch.int32, device="cuda") * n + shift
    inner = torch.empty(rows_odd.inner_size(kind, wc.bf16, n, n), dtype=torch.int8, device="cuda")
    vectors, scalars = {"softmax": ((), ()), "rms_norm": ((w,), (1e-6, 1 / n)), "layer_norm": ((w, b), (1e-5, 1 / n))}[
        kind
    ]
    kernel(*rows_odd.odd_args(x, out_buf, shift, starts, inner, vectors, scalars))
    xd = x.double()
    want = {
        "softmax": lambda: torch.softmax(xd, -1),
        "rms_norm": lambda: F.rms_norm(xd, (n,), w.double(), 1e-6),
        "layer_norm": lambda: F.layer_norm(xd, (n,), w.double(), b.double(), 1e-5),
    }[kind]()
    torch.testing.assert_close(out_buf[shift : shift + m * n].view(m, n).double(), want, rtol=1.6e-2, atol=3e-2)
    assert out_buf[:shift].isnan().all() and out_buf[shift + m * n :].isnan().all()
