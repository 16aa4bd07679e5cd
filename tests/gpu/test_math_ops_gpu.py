"""GPU tier: every ``wc.unary`` kind on the device against torch in float64, f32 / f16 / bf16 (and i32 where
integers are accepted), on fresh random inputs in each function's domain; every output element checked."""

from __future__ import annotations

import functools

import pytest
import torch

import wavec as wc
from wavec import Memory
from wavec.frontend.unary_kinds import UNARY_KINDS
from wavec.kernels.elementwise import BLOCK_M, BLOCK_N, M, N, rowwise_constraints

pytestmark = pytest.mark.gpu

SUBS = {BLOCK_M: 4, BLOCK_N: 256}
TORCH = {
    "neg": torch.neg, "abs": torch.abs, "exp2": torch.exp2, "exp": torch.exp, "log": torch.log,
    "log2": torch.log2, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "tanh": torch.tanh, "sin": torch.sin,
    "cos": torch.cos, "erf": torch.erf, "log1p": torch.log1p, "floor": torch.floor, "ceil": torch.ceil,
    "round": torch.round,
}  # fmt: skip
POSITIVE = {"log", "log2", "sqrt", "rsqrt"}
ROUNDING = {"floor", "ceil", "round"}  # inputs on quarters: exact halves test round's ties to even
DTYPES = {wc.f32: torch.float32, wc.f16: torch.float16, wc.bf16: torch.bfloat16, wc.i32: torch.int32}
# f32: the NVVM math library (2-4 ulp) and ex2.approx for exp2 (2 ulp); half types: one rounding of the result
TOL = {wc.f32: (4e-6, 1e-6), wc.f16: (2e-3, 2e-3), wc.bf16: (1.6e-2, 1e-2)}


@functools.cache
def _kernel(kind: str, dtype: wc.frontend.dtypes.DType):
    @wc.wave(rowwise_constraints(32, 16 // dtype.bytes))
    def unary(a: Memory[M, N, dtype], out: Memory[M, N, dtype]):
        wc.write(wc.unary(kind, wc.read(a)), out)

    return wc.compile(unary, SUBS, backend="cuda")


def _input(kind: str, tdtype: torch.dtype) -> torch.Tensor:
    shape = (1003, 1000)  # neither dim a multiple of the workgroup tile: masked edges too
    if tdtype == torch.int32:
        return torch.randint(-(2**30), 2**30, shape, dtype=tdtype, device="cuda")
    x = torch.randn(shape, device="cuda", dtype=torch.float64) * 3
    if kind in ROUNDING:
        x = torch.where(torch.rand_like(x) < 0.5, (x * 4).round() / 4, x)
    if kind == "log1p":  # the domain (-1, inf), with arguments near 0 where log1p beats log(1 + x)
        x = torch.where(x < 0, -torch.rand_like(x) * 0.99, x) * torch.where(x.abs() < 1, 1e-4, 1)
    return (x.abs() + 0.01 if kind in POSITIVE else x).to(tdtype)


@pytest.mark.parametrize("dtype", [wc.f32, wc.f16, wc.bf16], ids=str)
@pytest.mark.parametrize("kind", list(UNARY_KINDS))
def test_float_kind_matches_torch(kind: str, dtype) -> None:
    x = _input(kind, DTYPES[dtype])
    out = torch.full_like(x, float("nan"))
    _kernel(kind, dtype)(x, out)
    torch.cuda.synchronize()
    assert not out.isnan().any(), "an output element was not written"
    rtol, atol = TOL[dtype]
    want = TORCH[kind](x.double()).to(x.dtype).double()  # rounded once, so overflow to inf matches too
    torch.testing.assert_close(out.double(), want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("kind", [k for k, v in UNARY_KINDS.items() if v.int_op])
def test_integer_kind_matches_torch(kind: str) -> None:
    x = _input(kind, torch.int32)
    out = torch.full_like(x, torch.iinfo(torch.int32).max)  # no |x| or -x of an input reaches it
    _kernel(kind, wc.i32)(x, out)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, TORCH[kind](x), rtol=0, atol=0)
