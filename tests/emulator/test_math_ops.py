"""Every ``wc.unary`` kind on the emulator against torch, f32 and f16 (and i32 where integers are
accepted), on fresh random inputs in each function's domain; every output element is checked."""

from __future__ import annotations

import functools

import pytest
import torch

import wavec as wc
from wavec import Memory
from wavec.frontend.unary_kinds import UNARY_KINDS
from wavec.kernels.elementwise import BLOCK_M, BLOCK_N, M, N, rowwise_constraints

SUBS = {BLOCK_M: 2, BLOCK_N: 256}
TORCH = {
    "neg": torch.neg, "abs": torch.abs, "exp2": torch.exp2, "exp": torch.exp, "log": torch.log,
    "log2": torch.log2, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "tanh": torch.tanh, "sin": torch.sin,
    "cos": torch.cos, "erf": torch.erf, "log1p": torch.log1p, "floor": torch.floor, "ceil": torch.ceil,
    "round": torch.round,
}  # fmt: skip
POSITIVE = {"log", "log2", "sqrt", "rsqrt"}
ROUNDING = {"floor", "ceil", "round"}  # inputs on quarters: exact halves test round's ties to even
DTYPES = {wc.f32: torch.float32, wc.f16: torch.float16, wc.i32: torch.int32}


@functools.cache
def _kernel(kind: str, dtype: wc.frontend.dtypes.DType):
    @wc.wave(rowwise_constraints(32, 16 // dtype.bytes))
    def unary(a: Memory[M, N, dtype], out: Memory[M, N, dtype]):
        wc.write(wc.unary(kind, wc.read(a)), out)

    return wc.compile(unary, SUBS, backend="emulator", cache=False)


def _input(kind: str, tdtype: torch.dtype) -> torch.Tensor:
    shape = (5, 200)  # neither dim a multiple of the workgroup tile: masked edges too
    if tdtype == torch.int32:
        return torch.randint(-1000, 1000, shape, dtype=tdtype)
    x = torch.randn(shape) * 3
    if kind in ROUNDING:
        x = torch.where(torch.rand_like(x) < 0.5, (x * 4).round() / 4, x)
    if kind == "log1p":  # the domain (-1, inf), with arguments near 0 where log1p beats log(1 + x)
        x = torch.where(x < 0, -torch.rand_like(x) * 0.99, x) * torch.where(x.abs() < 1, 1e-4, 1)
    return (x.abs() + 0.01 if kind in POSITIVE else x).to(tdtype)


@pytest.mark.parametrize("dtype", [wc.f32, wc.f16], ids=str)
@pytest.mark.parametrize("kind", list(UNARY_KINDS))
def test_float_kind_matches_torch(kind: str, dtype) -> None:
    x = _input(kind, DTYPES[dtype])
    out = _kernel(kind, dtype)(x)
    want = TORCH[kind](x.float()).to(x.dtype)
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == wc.f32 else {"rtol": 1e-3, "atol": 1e-3}
    torch.testing.assert_close(out, want, **tol)


@pytest.mark.parametrize("kind", [k for k, v in UNARY_KINDS.items() if v.int_op])
def test_integer_kind_matches_torch(kind: str) -> None:
    x = _input(kind, torch.int32)
    torch.testing.assert_close(_kernel(kind, wc.i32)(x), TORCH[kind](x), rtol=0, atol=0)


def test_public_functions_are_the_kinds() -> None:
    @wc.wave(rowwise_constraints(32, 4))
    def gelu(a: Memory[M, N, wc.f32], out: Memory[M, N, wc.f32]):
        x = wc.read(a)
        wc.write(x * 0.5 * (wc.erf(x * 0.7071067811865476) + 1.0) + wc.tanh(wc.sin(x) * wc.cos(x)), out)

    x = torch.randn(3, 128)
    out = wc.compile(gelu, SUBS, backend="emulator", cache=False)(x)
    want = torch.nn.functional.gelu(x) + torch.tanh(torch.sin(x) * torch.cos(x))
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
