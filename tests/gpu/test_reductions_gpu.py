"""GPU tier: wc.sum / max / min (f32, i32, i64, f16 and bf16 in f32), wc.argmax / argmin (ties, NaN) and
wc.scan (add / max / min, inclusive and exclusive) on the device against torch, fresh random inputs,
sentinel-filled outputs."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import reduce_kernels as rk

pytestmark = pytest.mark.gpu


def _cuda(kernel, n: int):
    return wc.compile(kernel, {rk.N: n}, backend="cuda")


def _sentinel(shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    return torch.full(shape, 77 if not dtype.is_floating_point else float("nan"), dtype=dtype, device="cuda")


@pytest.mark.parametrize("kind", ["sum", "max", "min"])
@pytest.mark.parametrize("dtype", ["f32", "i32", "i64", "f16", "bf16"])
def test_row_reduction(kind: str, dtype: str) -> None:
    # rows of one workgroup tile (512): partials of a row split over workgroups never meet
    x = rk.random_values((37, 512), dtype, torch.Generator().manual_seed(1), ties=False).cuda()
    out = _sentinel((37,), rk.TORCH[dtype])
    _cuda(rk.make_reduce(kind, getattr(wc, dtype)), 512)(x, out)
    ref = rk.torch_reduce(kind, x.cpu(), rk.TORCH[dtype]).cuda()
    if dtype in ("i32", "i64") or kind != "sum":
        assert torch.equal(out, ref)
    else:
        tol = {"f32": 1e-5, "f16": 1e-3, "bf16": 8e-3}[dtype]
        torch.testing.assert_close(out.double(), ref.double(), rtol=tol, atol=tol)


@pytest.mark.parametrize("kind", ["argmax", "argmin"])
@pytest.mark.parametrize("dtype", ["f32", "i32", "f16", "bf16"])
def test_arg_reduction(kind: str, dtype: str) -> None:
    x = rk.random_values((37, 512), dtype, torch.Generator().manual_seed(2))
    if x.is_floating_point():
        x[1, 100] = x[1, 300] = float("nan")
        x[2, 5], x[3, 400] = float("-inf"), float("inf")
        x[4] = 0.0
        x[4, 7] = -0.0
    x = x.cuda()
    values, indices = _sentinel((37,), rk.TORCH[dtype]), torch.full((37,), -1, dtype=torch.int32, device="cuda")
    _cuda(rk.make_arg(kind, getattr(wc, dtype)), 512)(x, values, indices)
    want = x.cpu().max(-1) if kind == "argmax" else x.cpu().min(-1)  # CPU torch: the first index on ties
    assert torch.equal(indices.cpu(), want.indices.int())
    torch.testing.assert_close(values.cpu(), want.values, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("kind", ["add", "max", "min"])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("dtype", ["f32", "i32", "i64", "f16"])
@pytest.mark.parametrize("waves", [1, 4])
def test_scan(kind: str, exclusive: bool, dtype: str, waves: int) -> None:
    shape = (9, 768) if waves == 1 else (768,)
    x = rk.random_values(shape, dtype, torch.Generator().manual_seed(3), ties=False)
    y = _sentinel(shape, rk.TORCH[dtype])
    _cuda(rk.make_scan(kind, exclusive, getattr(wc, dtype), waves=waves), 768)(x.cuda(), y)
    ref = rk.torch_scan(kind, exclusive, x.reshape(-1, 3, 256)).reshape(shape)
    if kind == "add" and x.is_floating_point():
        tol = {"f32": 1e-5, "f16": 2e-3}[dtype]
        torch.testing.assert_close(y.cpu().double(), ref, rtol=tol, atol=tol * 64)
    else:
        assert torch.equal(y.cpu(), ref.to(y.dtype))
