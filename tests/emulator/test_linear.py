"""``wavec.kernels.linear`` on the emulator against ``torch.nn.functional.linear`` in f64: leading dims, odd
feature counts, with and without a bias, both dtypes; the bias pass writes every element; bad arguments
named; its torch operator."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
import wavec.kernels.torch_ops  # noqa: F401 - registers torch.ops.wavec.*
from wavec.kernels import dense, linear
from wavec.kernels import elementwise as ew

F = torch.nn.functional
TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.double() - want).norm() / want.norm()).item()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(5, 64, 48), (2, 3, 40, 24), (7, 33, 17)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_matches_torch(dtype: torch.dtype, shape: tuple, with_bias: bool) -> None:
    *lead, k, n = shape
    x, w = torch.randn(*lead, k).to(dtype), torch.randn(n, k).to(dtype)
    b = torch.randn(n).to(dtype) if with_bias else None
    got = linear(x, w, b, backend="emulator")
    assert got.dtype == dtype and got.shape == (*lead, n)
    want = F.linear(x.double(), w.double(), None if b is None else b.double())
    assert _rel(got, want) < TOL[dtype]


def test_bias_pass_writes_every_element() -> None:
    k = wc.compile(dense.make_bias_cast(wc.bf16), {ew.BLOCK_M: 4, ew.BLOCK_N: 128}, backend="emulator")
    c, b = torch.randn(9, 300), torch.randn(300).to(torch.bfloat16)
    out = torch.full((9, 300), float("nan"), dtype=torch.bfloat16)
    k(c, b, out)
    torch.testing.assert_close(out.double(), (c.double() + b.double()).to(torch.bfloat16).double())


@pytest.mark.parametrize(
    "args, match",
    [
        ((torch.zeros(3, 8), torch.zeros(4, 8)), "x must be a float16 or bfloat16 tensor"),
        ((torch.zeros(3, 8).half(), torch.zeros(4, 8)), "weight must be a 2-D torch.float16 tensor"),
        ((torch.zeros(3, 8).half(), torch.zeros(4, 9).half()), r"in = x.shape\[-1\] = 8"),
        ((torch.zeros(3, 8).half(), torch.zeros(4, 8).half(), torch.zeros(5).half()), r"bias must be \[4\]"),
    ],
)
def test_bad_arguments_are_named(args: tuple, match: str) -> None:
    with pytest.raises(wc.WavecError, match=match):
        linear(*args)


def test_torch_op() -> None:
    x, w, b = torch.randn(6, 32).half(), torch.randn(16, 32).half(), torch.randn(16).half()
    got = torch.ops.wavec.linear(x, w, b)
    assert _rel(got, F.linear(x.double(), w.double(), b.double())) < 2e-3
    torch.library.opcheck(torch.ops.wavec.linear.default, (x, w, b))
