"""GPU tier: i8, u8, i16 and the fp8 formats on the device: memory round trips, ``wc.cast`` between every
pair of them and f16/bf16/f32/i32/i64 against torch (saturating to fp8 and to integers, NaN to 0, integer
narrowing wrapping), every fp8 code, the rounding of every fp8 midpoint, and u8's unsigned operators.
Every output element is checked: outputs start as the expected bytes XOR 0xA5 (``garbage_like``), so an
element the kernel does not write fails."""

from __future__ import annotations

import functools

import pytest
import torch

import wavec as wc
from tests.dtype_kernels import (
    CASTS,
    FP8,
    STORAGE,
    cast_kernel,
    cast_reference,
    copy_kernel,
    garbage_like,
    same,
    source,
    u8_kernel,
    u8_reference,
)
from wavec.kernels.elementwise import BLOCK_M, BLOCK_N

pytestmark = pytest.mark.gpu

SUBS = {BLOCK_M: 4, BLOCK_N: 512}
SHAPE = (1003, 1024)


@functools.cache
def _cast(src, dst) -> wc.WaveKernel:
    return wc.compile(cast_kernel(src, dst), SUBS, backend="cuda")


@pytest.mark.parametrize("dtype", STORAGE, ids=str)
def test_memory_round_trip_is_bitwise(dtype) -> None:
    x = source(dtype, SHAPE, device="cuda")
    out = garbage_like(x)
    wc.compile(copy_kernel(dtype), SUBS, backend="cuda")(x, out)
    torch.cuda.synchronize()
    assert torch.equal(out.view(torch.uint8), x.view(torch.uint8))


@pytest.mark.parametrize(("src", "dst"), CASTS, ids=str)
def test_cast_matches_torch(src, dst) -> None:
    x = source(src, SHAPE, device="cuda")
    if dst == wc.bf16 and src in (wc.i32, wc.i64):
        x = (x.long() % 2**25 - 2**24).to(x.dtype)  # where torch rounds once
    want = cast_reference(x, src, dst)
    out = garbage_like(want)
    _cast(src, dst)(x, out)
    torch.cuda.synchronize()
    if not same(out, want):
        o, w = out.double().view(-1), want.double().view(-1)
        bad = ~((o == w) | (o.isnan() & w.isnan()))
        pytest.fail(f"{int(bad.sum())} differ: {x.view(-1)[bad][:4].tolist()} -> {o[bad][:4]}, want {w[bad][:4]}")


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_fp8_rounding_ties_subnormals_and_saturation(dtype) -> None:
    vals = torch.arange(256, dtype=torch.uint8).view(dtype.torch()).float()
    vals = vals[vals.isfinite()].unique()
    mids = (vals[1:] + vals[:-1]) / 2
    eps = mids.abs() * 2.0**-20
    x = torch.cat([mids, mids + eps, mids - eps, vals, torch.tensor([1e30, -1e30, dtype.max * 1.01])])
    x = torch.cat([x, torch.zeros(2048 - x.numel())]).view(2, 1024).cuda()
    want = x.clamp(-dtype.max, dtype.max).to(dtype.torch())
    out = garbage_like(want)
    _cast(wc.f32, dtype)(x, out)
    torch.cuda.synchronize()
    assert same(out, want)


def test_u8_operators_are_unsigned() -> None:
    x = torch.randint(0, 256, SHAPE, dtype=torch.uint8, device="cuda")
    y = torch.randint(0, 256, SHAPE, dtype=torch.uint8, device="cuda")
    want = u8_reference(x, y)
    out = garbage_like(want)
    wc.compile(u8_kernel(), {BLOCK_M: 4, BLOCK_N: 128}, backend="cuda")(x, y, out)
    torch.cuda.synchronize()
    assert torch.equal(out, want)
