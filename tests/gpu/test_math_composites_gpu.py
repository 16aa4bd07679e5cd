"""GPU tier: the built math functions (sigmoid, silu, gelu, pow) and the Python operators on traced values
on the device against torch in float64, f32 / f16 / bf16 and i32, on fresh random inputs; every output
element checked (the output starts as NaN / a sentinel no result takes)."""

from __future__ import annotations

import functools

import pytest
import torch

import wavec as wc
from tests.math_kernels import FLOAT_FUNCS, INT_FUNCS, float_input, float_kernel, int_kernel, reference
from wavec.kernels.elementwise import BLOCK_M, BLOCK_N

pytestmark = pytest.mark.gpu

SUBS = {BLOCK_M: 4, BLOCK_N: 256}
TORCH = {wc.f32: torch.float32, wc.f16: torch.float16, wc.bf16: torch.bfloat16}
# f32: NVVM's exp/erf/tanh (2-4 ulp) composed with a divide; half types: computed in f32, rounded once
TOL = {wc.f32: (8e-6, 1e-6), wc.f16: (1e-3, 1e-5), wc.bf16: (8e-3, 1e-5)}


@functools.cache
def _float(name: str, dtype) -> wc.WaveKernel:
    return wc.compile(float_kernel(name, dtype), SUBS, backend="cuda")


@functools.cache
def _int(name: str) -> wc.WaveKernel:
    return wc.compile(int_kernel(name), SUBS, backend="cuda")


@pytest.mark.parametrize("dtype", list(TORCH), ids=str)
@pytest.mark.parametrize("name", list(FLOAT_FUNCS))
def test_float_function_matches_torch(name: str, dtype) -> None:
    x = float_input((1003, 1000), TORCH[dtype], device="cuda")  # masked edges in both dims
    out = torch.full_like(x, float("nan"))
    _float(name, dtype)(x, out)
    torch.cuda.synchronize()
    want = reference(name, x)
    assert not (out.isnan() & ~want.isnan()).any(), "an output element was not written"
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(out.double(), want.double(), rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("name", list(INT_FUNCS))
def test_int_operator_matches_torch(name: str) -> None:
    x = torch.randint(-(2**31), 2**31, (1003, 1000), dtype=torch.int32, device="cuda")
    y = torch.randint(-(2**31), 2**31, (1003, 1000), dtype=torch.int32, device="cuda")
    y[:, ::7] = x[:, ::7]
    want = INT_FUNCS[name][1](x, y)
    sentinel = int(torch.randint(-(2**31), 2**31, ()).item())
    while (want == sentinel).any():
        sentinel += 1
    out = torch.full_like(x, sentinel)
    _int(name)(x, y, out)
    torch.cuda.synchronize()
    assert not (out == sentinel).any(), "an output element was not written"
    torch.testing.assert_close(out, want, rtol=0, atol=0)
