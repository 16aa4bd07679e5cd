"""Kernels and references of the element types (i8, u8, i16, the fp8 formats) and of ``wc.cast`` between
them and f16/bf16/f32/i32/i64; shared by the emulator, binary and GPU tiers (``test_dtypes*.py``)."""

from __future__ import annotations

import torch

import wavec as wc
from wavec import Memory
from wavec.kernels.elementwise import M, N, rowwise_constraints

FP8 = [wc.f8e4m3fn, wc.f8e5m2, wc.f8e4m3fnuz, wc.f8e5m2fnuz]
INTS = [wc.i8, wc.u8, wc.i16, wc.i32, wc.i64]
FLOATS = [wc.f16, wc.bf16, wc.f32]
STORAGE = FP8 + [wc.i8, wc.u8, wc.i16]  # the types item 6 adds
CASTS = [(s, d) for s in FLOATS + INTS + FP8 for d in FLOATS + INTS + FP8 if s != d]


def copy_kernel(dtype, threads: int = 32) -> wc.WaveKernel:
    @wc.wave(rowwise_constraints(threads, 16 // dtype.bytes))
    def copy(a: Memory[M, N, dtype], out: Memory[M, N, dtype]):
        wc.write(wc.read(a), out)

    return copy


def cast_kernel(src, dst, threads: int = 32) -> wc.WaveKernel:
    @wc.wave(rowwise_constraints(threads, 16 // max(src.bytes, dst.bytes)))
    def cast(a: Memory[M, N, src], out: Memory[M, N, dst]):
        wc.write(wc.cast(wc.read(a), dst), out)

    return cast


def u8_kernel(threads: int = 32) -> wc.WaveKernel:
    """Unsigned semantics of u8: comparison, maximum, //, %, >>, abs; results widened to i32."""

    @wc.wave(rowwise_constraints(threads, 4))
    def u8_ops(a: Memory[M, N, wc.u8], b: Memory[M, N, wc.u8], out: Memory[M, N, wc.i32]):
        x, y = wc.read(a), wc.read(b)
        r = wc.where(x < y, wc.maximum(x, y) // (y | 1), (x % (y | 1)) + (x >> 3)) + abs(x) - wc.minimum(x, y)
        wc.write(wc.cast(r, wc.i32), out)

    return u8_ops


def u8_reference(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    xi, yi = x.long(), y.long()
    r = torch.where(xi < yi, torch.maximum(xi, yi) // (yi | 1), (xi % (yi | 1)) + (xi >> 3))
    r = r + xi - torch.minimum(xi, yi)
    return (r % 256).to(torch.int32)  # u8 arithmetic wraps mod 256


def source(dtype, shape: tuple, device: str = "cpu") -> torch.Tensor:
    """Values of ``dtype`` that exercise a cast from it: every fp8 code; integers over their whole range;
    floats over a range wider than every target (saturation), with ties, small values, inf and NaN."""
    if dtype in FP8:
        codes = torch.randint(0, 256, shape, dtype=torch.uint8, device=device)
        codes.view(-1)[:256] = torch.arange(256, dtype=torch.uint8, device=device)
        return codes.view(dtype.torch())
    if dtype in INTS:
        info = torch.iinfo(dtype.torch())
        return torch.randint(info.min, info.max, shape, dtype=torch.int64, device=device).to(dtype.torch())
    scale = torch.exp2(torch.randint(-24, 40, shape, device=device).double())  # subnormal fp8 to beyond i32
    x = torch.randn(shape, dtype=torch.float64, device=device) * scale
    x = torch.where(torch.rand(shape, device=device) < 0.2, x.round(), x)  # integers, halves after scaling
    x = torch.where(torch.rand(shape, device=device) < 0.1, (x * 2).round() / 2, x)
    flat = x.view(-1)
    flat[:6] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 0.5], dtype=torch.float64)
    return x.to(dtype.torch())


def _int_range(dst) -> tuple[int, int]:
    info = torch.iinfo(dst.torch())
    return info.min, info.max


def cast_reference(x: torch.Tensor, src, dst) -> torch.Tensor:
    """What ``wc.cast`` guarantees (``wavec/codegen/casts.py``), computed exactly in float64 / int64
    (an integer source to bf16 must lie within +-2**24, where torch's conversion rounds once)."""
    if src in FP8:
        x, src = x.float(), wc.f32
    if dst in FP8:  # saturate, then round to nearest even (torch's conversion of in-range values)
        return x.float().clamp(-dst.max, dst.max).to(dst.torch())
    if dst in INTS and src in INTS:
        return x.to(dst.torch())  # widening extends, narrowing wraps
    if dst in INTS:  # truncate, saturate, NaN -> 0
        lo, hi = torch.iinfo(dst.torch()).min, torch.iinfo(dst.torch()).max
        f = x.double()
        f = torch.where(f.isnan(), torch.zeros_like(f), f).trunc()
        inside = f.clamp(-(2.0**63), 2.0**63 - 1024).long().clamp(lo, hi)
        return torch.where(f >= 2.0**63, hi, torch.where(f < -(2.0**63), lo, inside)).to(dst.torch())
    return x.to(dst.torch())


def garbage_like(want: torch.Tensor) -> torch.Tensor:
    """An output buffer whose every byte differs from the expected result's (an unwritten element fails)."""
    return (want.view(torch.uint8) ^ 0xA5).view(want.dtype)


def same(out: torch.Tensor, want: torch.Tensor) -> bool:
    """Equal element for element, NaN matching NaN (any NaN bits), zeros' signs included."""
    if out.dtype.is_floating_point:
        o, w = out.double(), want.double()
        nan = o.isnan() & w.isnan()
        return bool((nan | ((o == w) & (o.signbit() == w.signbit()))).all())
    return bool(torch.equal(out, want))
