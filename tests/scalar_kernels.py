"""A kernel scaling by a by-value scalar of each supported dtype (``wc.Scalar[f32 / i32 / i64 / f16 / bf16]``),
shared by the emulator, binary and GPU tiers, and its torch reference."""

from __future__ import annotations

import torch

import wavec as wc
from wavec import Memory
from wavec.kernels.elementwise import BLOCK_M, BLOCK_N, M, N, rowwise_constraints

SUBS = {BLOCK_M: 2, BLOCK_N: 128}
TORCH = {"f32": torch.float32, "i32": torch.int32, "i64": torch.int64, "f16": torch.float16, "bf16": torch.bfloat16}


def make_scale(dtype: str, tpw: int = 32) -> wc.WaveKernel:
    """``dst = src * scale + shift`` in ``dtype`` (the scalar first in the ``def``: any position works)."""
    d = getattr(wc, dtype)

    @wc.wave(rowwise_constraints(tpw, 4))
    def scale_by(scale: wc.Scalar[d], src: Memory[M, N, d], shift: wc.Scalar[d], dst: Memory[M, N, d]):
        wc.write(wc.read(src) * scale + shift, dst)

    return scale_by


def reference(x: torch.Tensor, scale, shift) -> torch.Tensor:
    """torch's result: the scalars converted to ``x``'s dtype as torch converts a Python number, the
    product rounded to the dtype before the sum (as the kernel's two operations are)."""
    s, t = (torch.tensor(v, dtype=x.dtype) for v in (scale, shift))
    return x * s + t


def random_input(dtype: str, shape: tuple, gen: torch.Generator) -> torch.Tensor:
    if dtype == "i32":
        return torch.randint(-1000, 1000, shape, generator=gen, dtype=torch.int32)
    if dtype == "i64":  # beyond 32 bits, so the high word matters
        return torch.randint(-(2**40), 2**40, shape, generator=gen, dtype=torch.int64)
    return (torch.randn(shape, generator=gen) * 3).to(TORCH[dtype])


def draws(dtype: str, gen: torch.Generator) -> list[tuple]:
    """Fresh (scale, shift) pairs of ``dtype``: i64 ones beyond 32 bits (negative high words included)."""
    if dtype == "i32":
        return [tuple(p) for p in torch.randint(-50, 50, (3, 2), generator=gen).tolist()]
    if dtype == "i64":
        big = [tuple(p) for p in torch.randint(-(2**62), 2**62, (3, 2), generator=gen).tolist()]
        return [(3, -5), (2**33 + 7, -(2**50) + 3), (-1, 2**62)] + big
    return [tuple(p) for p in (torch.randn(3, 2, generator=gen, dtype=torch.float64) * 4).tolist()] + [(1 / 3, -0.0)]
