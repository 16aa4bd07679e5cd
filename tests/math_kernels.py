"""Kernels of the built math functions (``wc.sigmoid``, ``wc.silu``, ``wc.gelu``, ``wc.pow``) and of the
Python operators on traced values, with their torch references; shared by the emulator, binary and GPU
tiers (``test_math_composites*.py``)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

import wavec as wc
from wavec import Memory
from wavec.kernels.elementwise import M, N, rowwise_constraints

# name -> (kernel body on a float Value, torch reference); every entry one output element per input element
FLOAT_FUNCS: dict[str, tuple[Callable, Callable]] = {
    "sigmoid": (wc.sigmoid, torch.sigmoid),
    "silu": (wc.silu, F.silu),
    "gelu": (wc.gelu, F.gelu),
    "gelu_tanh": (lambda x: wc.gelu(x, approximate="tanh"), lambda x: F.gelu(x, approximate="tanh")),
    "pow0": (lambda x: x**0, lambda x: x**0),
    "pow1": (lambda x: x**1, lambda x: x**1),
    "pow2": (lambda x: x**2, lambda x: x**2),
    "pow3": (lambda x: wc.pow(x, 3), lambda x: x**3),
    "pow7": (lambda x: x**7, lambda x: x**7),
    "pow_neg2": (lambda x: x**-2, lambda x: x**-2),
    "builtin_abs": (abs, torch.abs),
    "neg": (lambda x: -x, torch.neg),
    "pos": (lambda x: +x, lambda x: x),
    "builtin_round": (round, torch.round),
    "math_floor": (math.floor, torch.floor),
    "math_ceil": (math.ceil, torch.ceil),
}

# name -> (kernel body on two i32 Values, torch reference); shift counts are kept in [0, 32)
INT_FUNCS: dict[str, tuple[Callable, Callable]] = {
    "and": (lambda x, y: x & y, lambda x, y: x & y),
    "or": (lambda x, y: x | y, lambda x, y: x | y),
    "xor": (lambda x, y: x ^ y, lambda x, y: x ^ y),
    "and_const": (lambda x, y: x & 0x5A5A, lambda x, y: x & 0x5A5A),
    "ror_const": (lambda x, y: 12345 | x, lambda x, y: 12345 | x),
    "xor_const": (lambda x, y: x ^ -77, lambda x, y: x ^ -77),
    "shl": (lambda x, y: x << (y & 31), lambda x, y: x << (y & 31)),
    "shr": (lambda x, y: x >> (y & 31), lambda x, y: x >> (y & 31)),
    "shl_const": (lambda x, y: x << 3, lambda x, y: x << 3),
    "rshl_const": (lambda x, y: 1 << (y & 15), lambda x, y: 1 << (y & 15)),
    "shr_const": (lambda x, y: x >> 5, lambda x, y: x >> 5),
    "invert": (lambda x, y: ~x, lambda x, y: ~x),
    "pow3_wraps": (lambda x, y: x**3, lambda x, y: x**3),
    "pow0": (lambda x, y: x**0, lambda x, y: x**0),
    "builtin_abs": (lambda x, y: abs(x), lambda x, y: x.abs()),
    "neg": (lambda x, y: -x, lambda x, y: -x),
    "masks": (
        lambda x, y: wc.where(((x > 0) & (y < 0)) | ~(x == y) ^ (x < y), x, y),
        lambda x, y: torch.where(((x > 0) & (y < 0)) | ~(x == y) ^ (x < y), x, y),
    ),
}


def float_kernel(name: str, dtype, threads: int = 32) -> wc.WaveKernel:
    fn = FLOAT_FUNCS[name][0]

    @wc.wave(rowwise_constraints(threads, 16 // dtype.bytes))
    def func(a: Memory[M, N, dtype], out: Memory[M, N, dtype]):
        wc.write(fn(wc.read(a)), out)

    return func


def int_kernel(name: str, threads: int = 32) -> wc.WaveKernel:
    fn = INT_FUNCS[name][0]

    @wc.wave(rowwise_constraints(threads, 4))
    def func(a: Memory[M, N, wc.i32], b: Memory[M, N, wc.i32], out: Memory[M, N, wc.i32]):
        wc.write(fn(wc.read(a), wc.read(b)), out)

    return func


def float_input(shape: tuple, dtype: torch.dtype, device: str = "cpu") -> torch.Tensor:
    """Normal values times 4, a quarter of them on exact quarters (rounding ties), a few zeros."""
    x = torch.randn(shape, device=device, dtype=torch.float64) * 4
    x = torch.where(torch.rand_like(x) < 0.25, (x * 4).round() / 4, x)
    return x.to(dtype)


def reference(name: str, x: torch.Tensor) -> torch.Tensor:
    """The torch result in float64, rounded once to x's type (what an exact kernel returns)."""
    return FLOAT_FUNCS[name][1](x.double()).to(x.dtype)
