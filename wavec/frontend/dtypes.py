"""Element types of wavec tensors."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DType:
    name: str
    bits: int
    is_float: bool
    mlir: str

    @property
    def bytes(self) -> int:
        return self.bits // 8

    def torch(self):
        import torch

        return {
            "f16": torch.float16,
            "bf16": torch.bfloat16,
            "f32": torch.float32,
            "i32": torch.int32,
            "i64": torch.int64,
            "i1": torch.bool,
        }[self.name]

    def __repr__(self) -> str:
        return self.name


f16 = DType("f16", 16, True, "f16")
bf16 = DType("bf16", 16, True, "bf16")
f32 = DType("f32", 32, True, "f32")
i32 = DType("i32", 32, False, "i32")
i64 = DType("i64", 64, False, "i64")
i1 = DType("i1", 1, False, "i1")

DTYPES = {d.name: d for d in (f16, bf16, f32, i32, i64, i1)}
