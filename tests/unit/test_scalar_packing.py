"""Packing of scalar arguments into their 32-bit launch constants (``binding.float_constant``): an f32 as
its bits, an f16 / bf16 as its bits in the low half, rounded as torch converts a Python float (to f32, then
to nearest even), an i64 as its low and high words; the full call and the prepared launch pack the same
words; a value that does not fit names the argument."""

from __future__ import annotations

import math
import struct

import pytest
import torch

from tests.unit.test_binding import gemm_args, gemm_meta
from tests.unit.test_fast_launch import _kernel
from wavec.errors import ArgumentError
from wavec.runtime.binding import float_constant
from wavec.runtime.null_driver import launches

TORCH = {
    "f32": (torch.float32, torch.int32),
    "f16": (torch.float16, torch.int16),
    "bf16": (torch.bfloat16, torch.int16),
}


def _torch_bits(dtype: str, x: float) -> int:
    fdt, idt = TORCH[dtype]
    bits = int(torch.tensor(x, dtype=fdt).view(idt).item())
    return bits if dtype == "f32" else bits & 0xFFFF


def _values() -> list[float]:
    gen = torch.Generator().manual_seed(20)
    fresh = (
        torch.randn(400, generator=gen, dtype=torch.float64) * torch.logspace(-9, 9, 400, dtype=torch.float64)
    ).tolist()
    halfway = [1 + 2**-8 + 2**-30, 1 + 2**-11 + 2**-40, 1 + 2**-9, 1 + 3 * 2**-9, 1 + 2**-11, 1 + 3 * 2**-11]
    special = [0.0, -0.0, math.inf, -math.inf, 6e-8, 1e-40, -3e-39, 65504.0, 65519.0, 3.38e38, 1, -7]
    return fresh + halfway + [-h for h in halfway] + special


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_bits_are_torchs(dtype: str) -> None:
    for x in _values():
        if dtype == "f16" and abs(x) >= 65520 and math.isfinite(x):
            continue
        assert float_constant(dtype, x) == _torch_bits(dtype, x), (dtype, x)
    nan = float_constant(dtype, math.nan)
    assert nan == (0x7FC0 if dtype == "bf16" else _torch_bits(dtype, math.nan))


@pytest.mark.parametrize(
    "dtype,x", [("f16", 65520.0), ("f16", -1e6), ("bf16", 3.4e38), ("bf16", -3.4e38), ("f32", 1e39)]
)
def test_values_that_overflow_raise(dtype: str, x: float) -> None:
    with pytest.raises(OverflowError):
        float_constant(dtype, x)


def _half_meta():
    return gemm_meta(constants=("M", "N", "h", "b"), scalars=(("h", "f16"), ("b", "bf16")))


def test_full_call_and_prepared_launch_pack_the_same_words(monkeypatch) -> None:
    record: list = []
    k = _kernel(monkeypatch, _half_meta(), record)
    args = gemm_args()
    launch = k.prepare((*args, 0.5, 0.5), fresh_outputs=True)
    for h, b in [(1 / 3, -2.7), (-0.0, 1e-40), (65504, math.inf)]:
        k(*args, h, b)
        full = launches(record)[-1][2]
        launch(*args, h, b)
        assert launches(record)[-1][2] == full == [128, 64, _torch_bits("f16", h), _torch_bits("bf16", b)]
    assert struct.pack("<i", launches(record)[-1][2][2])[2:] == b"\x00\x00"  # the high half stays zero


def test_half_scalars_that_do_not_fit_name_the_argument(monkeypatch) -> None:
    k = _kernel(monkeypatch, _half_meta(), [])
    args = gemm_args()
    launch = k.prepare((*args, 0.5, 0.5), fresh_outputs=True)
    for call in (k, launch):
        with pytest.raises(ArgumentError, match=r"argument 'h'.*70000.0 does not fit in float16"):
            call(*args, 70000.0, 1.0)
        with pytest.raises(ArgumentError, match=r"argument 'b'.*expected .*got str"):
            call(*args, 1.0, "x")


def test_i64_scalars_are_two_words(monkeypatch) -> None:
    """The low word in the scalar's slot, the high word in ``name.hi``'s, both as int32 (two's complement)."""
    record: list = []
    meta = gemm_meta(constants=("M", "N", "n", "n.hi"), scalars=(("n", "i64"),))
    k = _kernel(monkeypatch, meta, record)
    args = gemm_args()
    launch = k.prepare((*args, 1), fresh_outputs=True)
    for n in (5, -1, 2**40 + 3, -(2**63), 2**63 - 1, 0x80000000):
        words = list(struct.unpack("<ii", struct.pack("<q", n)))
        k(*args, n)
        assert launches(record)[-1][2] == [128, 64, *words]
        launch(*args, n)
        assert launches(record)[-1][2] == [128, 64, *words]
    for call in (k, launch):
        with pytest.raises(ArgumentError, match=r"argument 'n'.*int64"):
            call(*args, 2**63)
