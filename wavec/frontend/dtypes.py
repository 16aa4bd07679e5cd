"""Element types of wavec tensors.

Integers are two's complement; ``u8`` is the one unsigned type (its comparisons, division, ``>>`` and
conversions are unsigned).  The fp8 types are storage types: read, written, selected, moved and converted
with ``wc.cast`` (saturating), computed on after a cast to f16/bf16/f32.  ``f8e4m3fn`` and ``f8e5m2`` are
NVIDIA's (OCP) formats, ``f8e4m3fnuz`` and ``f8e5m2fnuz`` AMD's MI300 formats (no negative zero, one NaN);
in MLIR an fp8 value is its bits (``i8``; ``codegen/fp8.py`` converts).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DType:
    name: str
    bits: int
    is_float: bool
    mlir: str
    signed: bool = True
    max: float = 0.0  # fp8: the largest finite value (what a saturating cast clamps to)

    @property
    def bytes(self) -> int:
        return self.bits // 8

    @property
    def is_fp8(self) -> bool:
        return self.is_float and self.bits == 8

    def torch(self):
        import torch

        return getattr(torch, TORCH_NAMES[self.name])

    def __repr__(self) -> str:
        return self.name


f16 = DType("f16", 16, True, "f16")
bf16 = DType("bf16", 16, True, "bf16")
f32 = DType("f32", 32, True, "f32")
i8 = DType("i8", 8, False, "i8")
u8 = DType("u8", 8, False, "i8", signed=False)
i16 = DType("i16", 16, False, "i16")
i32 = DType("i32", 32, False, "i32")
i64 = DType("i64", 64, False, "i64")
i1 = DType("i1", 1, False, "i1")
f8e4m3fn = DType("f8e4m3fn", 8, True, "i8", max=448.0)
f8e5m2 = DType("f8e5m2", 8, True, "i8", max=57344.0)
f8e4m3fnuz = DType("f8e4m3fnuz", 8, True, "i8", max=240.0)
f8e5m2fnuz = DType("f8e5m2fnuz", 8, True, "i8", max=57344.0)

DTYPES = {d.name: d for d in (f16, bf16, f32, i8, u8, i16, i32, i64, i1, f8e4m3fn, f8e5m2, f8e4m3fnuz, f8e5m2fnuz)}
TORCH_NAMES = {
    "f16": "float16", "bf16": "bfloat16", "f32": "float32", "i8": "int8", "u8": "uint8", "i16": "int16",
    "i32": "int32", "i64": "int64", "i1": "bool", "f8e4m3fn": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
    "f8e4m3fnuz": "float8_e4m3fnuz", "f8e5m2fnuz": "float8_e5m2fnuz",
}  # fmt: skip
"""The torch dtype (``torch.<name>``) of each wavec dtype."""
