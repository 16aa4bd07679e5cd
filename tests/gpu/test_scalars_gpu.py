"""GPU tier: scalar kernel arguments of every dtype (f32, i32, i64, f16, bf16) on the device, through the full
call and the prepared launch, against torch with the scalars converted as torch converts them; fresh
random inputs and scalars, sentinel-filled outputs (every element written)."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import scalar_kernels as sk

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32", "i32", "i64"])
def test_scale_by_scalar(dtype: str) -> None:
    kern = wc.compile(sk.make_scale(dtype), sk.SUBS, backend="cuda")
    gen = torch.Generator().manual_seed(sum(map(ord, dtype)))
    x = sk.random_input(dtype, (37, 1000), gen).cuda()
    out = torch.full_like(x, 77)
    launch = kern.prepare(x, out, 2, 1)  # binding order: tensors, then scalars
    for scale, shift in sk.draws(dtype, gen):
        want = sk.reference(x.cpu(), scale, shift)
        out.fill_(77)
        kern(scale, x, shift, out)
        torch.cuda.synchronize()
        assert torch.equal(out.cpu(), want), ("call", scale, shift)
        out.fill_(77)
        launch(x, out, scale, shift)
        torch.cuda.synchronize()
        assert torch.equal(out.cpu(), want), ("prepared", scale, shift)
