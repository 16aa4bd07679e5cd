"""GPU tier: scalar kernel arguments of every dtype (f32, i32, i64, f16, bf16) on the device, through the full
call and the prepared launch, against torch with the scalars converted as torch converts them; fresh
random inputs and scalars, sentinel-filled outputs (every element written)."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import scalar_kernels as sk

pytestmark = pytest.mark.gpu


def _fused(x: torch.Tensor, scale, shift) -> torch.Tensor:
    """``x * scale + shift`` rounded once (the GPU contracts the two into one fma); integers as torch."""
    if not x.dtype.is_floating_point:
        return sk.reference(x, scale, shift)
    s, t = (torch.tensor(v, dtype=x.dtype).double() for v in (scale, shift))
    return (x.double() * s + t).to(x.dtype)


def _either(out: torch.Tensor, rounded_twice: torch.Tensor, fused: torch.Tensor) -> bool:
    """Every element equals torch's two roundings or the single rounding of an fma."""
    return bool(((out == rounded_twice) | (out == fused)).all())


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32", "i32", "i64"])
def test_scale_by_scalar(dtype: str) -> None:
    kern = wc.compile(sk.make_scale(dtype), sk.SUBS, backend="cuda")
    gen = torch.Generator().manual_seed(sum(map(ord, dtype)))
    x = sk.random_input(dtype, (37, 1000), gen).cuda()
    out = torch.full_like(x, 77)
    launch = kern.prepare(x, out, 2, 1)  # binding order: tensors, then scalars
    for scale, shift in sk.draws(dtype, gen):
        want = sk.reference(x.cpu(), scale, shift)
        fused = _fused(x.cpu(), scale, shift)
        out.fill_(77)
        kern(scale, x, shift, out)
        torch.cuda.synchronize()
        assert _either(out.cpu(), want, fused), ("call", scale, shift)
        out.fill_(77)
        launch(x, out, scale, shift)
        torch.cuda.synchronize()
        assert _either(out.cpu(), want, fused), ("prepared", scale, shift)
