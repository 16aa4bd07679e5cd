"""``wavec.kernels.silu_and_mul`` on the emulator against torch in f64: row halves of any length (16-byte,
8-byte and 2-byte runs), leading dims, every element written, bad arguments named; its torch operator."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
import wavec.kernels.torch_ops  # noqa: F401 - registers torch.ops.wavec.*
from wavec.kernels import elementwise as ew
from wavec.kernels import silu_and_mul

TOL = {torch.float16: (2e-3, 2e-3), torch.bfloat16: (1.6e-2, 1.6e-2), torch.float32: (1e-6, 1e-6)}


def _want(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return torch.nn.functional.silu(x[..., :d].double()) * x[..., d:].double()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("d", [1, 12, 256, 300, 520])
def test_matches_torch(dtype: torch.dtype, d: int) -> None:
    x = (torch.randn(2, 5, 2 * d) * 3).to(dtype)
    got = silu_and_mul(x, backend="emulator")
    assert got.shape == (2, 5, d) and got.dtype == dtype
    torch.testing.assert_close(got.double(), _want(x), rtol=TOL[dtype][0], atol=TOL[dtype][1])


def test_every_element_written() -> None:
    subs = {ew.BLOCK_M: 4, ew.BLOCK_N: 256, ew.TWO: 2}
    k = wc.compile(ew.make_silu_and_mul(wc.f16), subs, backend="emulator", cache=False)
    x = torch.randn(9, 2, 600, dtype=torch.float16)
    out = torch.full((9, 600), float("nan"), dtype=torch.float16)
    k(x, out)
    torch.testing.assert_close(out.double(), _want(x.reshape(9, 1200)), rtol=2e-3, atol=2e-3)


def test_bad_argument_is_named() -> None:
    with pytest.raises(
        wc.WavecError, match="silu_and_mul: x must be .* last dim is even, got 2-D float32 of last dim 7"
    ):
        silu_and_mul(torch.zeros(3, 7))


def test_torch_op() -> None:
    x = torch.randn(4, 64)
    torch.testing.assert_close(torch.ops.wavec.silu_and_mul(x).double(), _want(x), rtol=1e-6, atol=1e-6)
    torch.library.opcheck(torch.ops.wavec.silu_and_mul.default, (x,))
