"""The built math functions (sigmoid, silu, gelu, pow) and the Python operators on traced values
(``abs(v)``, ``-v``, ``v ** n``, ``& | ^ << >> ~``, ``round``/``math.floor``/``math.ceil``) on the emulator
against torch in float64 on fresh random inputs, every output element checked; and their errors."""

from __future__ import annotations

import functools

import pytest
import torch

import wavec as wc
from tests.math_kernels import FLOAT_FUNCS, INT_FUNCS, float_input, float_kernel, int_kernel, reference
from wavec import Memory
from wavec.errors import DTypeError, ShapeError
from wavec.kernels.elementwise import BLOCK_M, BLOCK_N, M, N, rowwise_constraints

SUBS = {BLOCK_M: 2, BLOCK_N: 256}
TORCH = {wc.f32: torch.float32, wc.f16: torch.float16, wc.bf16: torch.bfloat16}
# f32: the composites round once per op (pow7: 4 multiplies); half types: computed in f32, rounded once
TOL = {wc.f32: (4e-6, 1e-6), wc.f16: (1e-3, 1e-5), wc.bf16: (8e-3, 1e-5)}


@functools.cache
def _float(name: str, dtype) -> wc.WaveKernel:
    return wc.compile(float_kernel(name, dtype), SUBS, backend="emulator", cache=False)


@functools.cache
def _int(name: str) -> wc.WaveKernel:
    return wc.compile(int_kernel(name), SUBS, backend="emulator", cache=False)


@pytest.mark.parametrize("dtype", list(TORCH), ids=str)
@pytest.mark.parametrize("name", list(FLOAT_FUNCS))
def test_float_function_matches_torch(name: str, dtype) -> None:
    x = float_input((5, 200), TORCH[dtype])  # neither dim a multiple of the workgroup tile
    out = _float(name, dtype)(x)
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(out.double(), reference(name, x).double(), rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("name", list(INT_FUNCS))
def test_int_operator_matches_torch(name: str) -> None:
    x = torch.randint(-(2**31), 2**31, (5, 200), dtype=torch.int32)
    y = torch.randint(-(2**31), 2**31, (5, 200), dtype=torch.int32)
    y[:, ::7] = x[:, ::7]  # equal operands for the mask comparisons
    torch.testing.assert_close(_int(name)(x, y), INT_FUNCS[name][1](x, y), rtol=0, atol=0)


def test_round_ties_to_even() -> None:
    x = torch.tensor([[0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 1e30] * 16], dtype=torch.float32)
    out = _float("builtin_round", wc.f32)(x)
    assert torch.equal(out, torch.round(x)) and torch.equal(out.signbit(), torch.round(x).signbit())


def _trace(body, dtype=wc.f32) -> None:
    @wc.wave(rowwise_constraints(32, 4))
    def k(a: Memory[M, N, dtype], out: Memory[M, N, dtype]):
        wc.write(body(wc.read(a)), out)

    wc.compile(k, SUBS, backend="emulator", cache=False)


@pytest.mark.parametrize(
    ("body", "dtype", "error", "match"),
    [
        (lambda x: x**0.5, wc.f32, ShapeError, "exponent must be a Python int.*wc.exp2"),
        (lambda x: x**-1, wc.i32, DTypeError, "negative powers"),
        (lambda x: x & 1, wc.f32, DTypeError, "and: needs integer operands, got f32"),
        (lambda x: x << 1, wc.f32, DTypeError, "shl: needs integer operands"),
        (lambda x: wc.cast((x > 0) >> 1, wc.f32), wc.f32, DTypeError, "shr: needs integer operands, got i1"),
        (lambda x: wc.sigmoid(x), wc.i32, DTypeError, "sigmoid: needs a float operand, got i32"),
        (lambda x: wc.gelu(x, approximate="fast"), wc.f32, ShapeError, "approximate must be"),
        (lambda x: wc.floor(x), wc.i32, DTypeError, "floor: needs a float operand"),
        (lambda x: wc.binary("div_approx", x, x), wc.i32, DTypeError, "div_approx: needs float operands, got i32"),
        (lambda x: round(x, 2), wc.f32, ShapeError, "ndigits"),
    ],
)
def test_bad_math_is_a_wavec_error_at_the_kernel_line(body, dtype, error, match) -> None:
    with pytest.raises(error, match=match) as e:
        _trace(body, dtype)
    assert "test_math_composites.py" in str(e.value)


def test_div_approx_divides() -> None:
    """``wc.binary("div_approx", x, y)``: the quotient (the emulator divides exactly; the GPU to ~2 ulp)."""

    @wc.wave(rowwise_constraints(32, 4))
    def div(a: Memory[M, N, wc.f32], b: Memory[M, N, wc.f32], out: Memory[M, N, wc.f32]):
        wc.write(wc.binary("div_approx", wc.read(a), wc.read(b)), out)

    x, y = torch.randn(5, 200), torch.rand(5, 200) + 0.5
    out = torch.full_like(x, float("nan"))
    wc.compile(div, SUBS, backend="emulator", cache=False)(x, y, out)
    torch.testing.assert_close(out.double(), x.double() / y.double(), rtol=1e-6, atol=0)
