"""Element types i8, u8, i16 and the fp8 formats on the emulator: memory round trips, ``wc.cast`` between
every pair of them and f16/bf16/f32/i32/i64 against torch (saturating to fp8 and to integers, NaN to 0,
integer narrowing wrapping), every fp8 code decoded, u8's unsigned operators, and the errors."""

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
from wavec import Memory
from wavec.errors import DTypeError
from wavec.kernels.elementwise import BLOCK_M, BLOCK_N, M, N, rowwise_constraints

SUBS = {BLOCK_M: 2, BLOCK_N: 512}
SHAPE = (3, 640)  # neither dim a multiple of the workgroup tile: masked edges


@functools.cache
def _cast(src, dst) -> wc.WaveKernel:
    return wc.compile(cast_kernel(src, dst), SUBS, backend="emulator", cache=False)


@pytest.mark.parametrize("dtype", STORAGE, ids=str)
def test_memory_round_trip_is_bitwise(dtype) -> None:
    x = source(dtype, SHAPE)
    out = wc.compile(copy_kernel(dtype), SUBS, backend="emulator", cache=False)(x)
    assert out.dtype == dtype.torch() and torch.equal(out.view(torch.uint8), x.view(torch.uint8))


@pytest.mark.parametrize(("src", "dst"), CASTS, ids=lambda d: str(d))
def test_cast_matches_torch(src, dst) -> None:
    x = source(src, SHAPE)
    if dst == wc.bf16 and src in (wc.i32, wc.i64):
        x = (x.long() % 2**25 - 2**24).to(x.dtype)  # where torch rounds once (int -> f32 exact -> bf16)
    want = cast_reference(x, src, dst)
    out = garbage_like(want)
    _cast(src, dst)(x, out)
    if not same(out, want):
        o, w = out.double().view(-1), want.double().view(-1)
        bad = ~((o == w) | (o.isnan() & w.isnan()))
        pytest.fail(f"{int(bad.sum())} differ: {x.view(-1)[bad][:4].tolist()} -> {o[bad][:4]}, want {w[bad][:4]}")


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_every_fp8_code_decodes_exactly(dtype) -> None:
    codes = torch.arange(256, dtype=torch.uint8).repeat(2, 2).view(dtype.torch())  # 2 x 512
    out = _cast(dtype, wc.f32)(codes)
    assert same(out, codes.float())


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_fp8_rounding_ties_subnormals_and_saturation(dtype) -> None:
    """Every midpoint between neighbouring fp8 values (ties to even), values just beside them, and
    values beyond the range (clamped to +-max)."""
    vals = torch.arange(256, dtype=torch.uint8).view(dtype.torch()).float()
    vals = vals[vals.isfinite()].unique()
    mids = (vals[1:] + vals[:-1]) / 2
    eps = mids.abs() * 2.0**-20
    x = torch.cat([mids, mids + eps, mids - eps, vals, torch.tensor([1e30, -1e30, dtype.max * 1.01])])
    x = torch.cat([x, torch.zeros(1024 - x.numel())]).view(2, 512)
    want = x.clamp(-dtype.max, dtype.max).to(dtype.torch())
    out = garbage_like(want)
    _cast(wc.f32, dtype)(x, out)
    assert same(out, want)


def test_u8_operators_are_unsigned() -> None:
    x, y = torch.randint(0, 256, SHAPE, dtype=torch.uint8), torch.randint(0, 256, SHAPE, dtype=torch.uint8)
    out = wc.compile(u8_kernel(), {BLOCK_M: 2, BLOCK_N: 128}, backend="emulator", cache=False)(x, y)
    assert torch.equal(out, u8_reference(x, y))


@pytest.mark.parametrize("dtype", FP8, ids=str)
def test_fp8_arithmetic_asks_for_a_cast(dtype) -> None:
    @wc.wave(rowwise_constraints(32, 16))
    def k(a: Memory[M, N, dtype], out: Memory[M, N, dtype]):
        wc.write(wc.read(a) * 2.0, out)

    with pytest.raises(DTypeError, match=f"mul: {dtype} is a storage type; wc.cast it to f16, bf16 or f32"):
        wc.compile(k, SUBS, backend="emulator", cache=False)


def test_wrong_torch_dtype_names_the_argument() -> None:
    k = wc.compile(copy_kernel(wc.f8e4m3fn), SUBS, backend="emulator", cache=False)
    with pytest.raises(wc.errors.ArgumentError, match="argument 'a'.*float8_e4m3fn"):
        k(torch.zeros(2, 512, dtype=torch.float8_e5m2))
