"""Element types of the emulator: how each MLIR element type is held in registers and in memory.

Register values are numpy arrays with a leading lane axis.  f16 is held as ``np.float16`` (numpy computes
half-precision ufuncs in f32 and rounds to f16 per op, like the GPU), bf16 is held as ``np.float32``
values that are exactly representable in bf16 (every op rounds its f32 result to bf16 with
round-to-nearest-even), and in memory bf16 is a ``uint16`` array of bf16 bits.  Integers are held as
signed two's-complement numpy integers of their width (``index`` is int64, ``i1`` is bool).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from iree.compiler import ir

from wavec.errors import EmulatorError


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round f32 values to bf16 (round to nearest even) and return the 16-bit patterns."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    nan = (bits & 0x7FFFFFFF) > 0x7F800000
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> 16) & 1))
    out = (rounded >> 16).astype(np.uint16)
    return np.where(nan, ((bits >> 16) | 0x40).astype(np.uint16), out)


def bf16_bits_to_f32(b: np.ndarray) -> np.ndarray:
    """Widen bf16 bit patterns to f32 values (exact)."""
    return (np.asarray(b).astype(np.uint32) << 16).view(np.float32)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """Round f32 values to the nearest bf16 value, kept as f32."""
    return bf16_bits_to_f32(f32_to_bf16_bits(x))


def _ident(x: np.ndarray) -> np.ndarray:
    return x


@dataclass(frozen=True)
class ElemType:
    """One MLIR element type: register dtype, memory dtype and the per-op rounding ``fix``."""

    name: str
    reg: np.dtype
    mem: np.dtype
    bits: int
    kind: str  # "float", "int", "index", "bool"
    fix: Callable[[np.ndarray], np.ndarray] = _ident

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    def to_mem(self, x: np.ndarray) -> np.ndarray:
        """Register values -> memory representation."""
        if self.name == "bf16":
            return f32_to_bf16_bits(x)
        return np.asarray(x).astype(self.mem, copy=False)

    def from_mem(self, x: np.ndarray) -> np.ndarray:
        """Memory representation -> register values."""
        if self.name == "bf16":
            return bf16_bits_to_f32(x)
        return np.asarray(x).astype(self.reg, copy=False)

    def cast(self, x: np.ndarray) -> np.ndarray:
        """Convert numeric register values of another type to this type (rounding as the GPU does)."""
        return self.fix(np.asarray(x).astype(self.reg))


ELEM_TYPES: dict[str, ElemType] = {
    "f16": ElemType("f16", np.dtype(np.float16), np.dtype(np.float16), 16, "float"),
    "bf16": ElemType("bf16", np.dtype(np.float32), np.dtype(np.uint16), 16, "float", round_bf16),
    "f32": ElemType("f32", np.dtype(np.float32), np.dtype(np.float32), 32, "float"),
    "f64": ElemType("f64", np.dtype(np.float64), np.dtype(np.float64), 64, "float"),
    "i1": ElemType("i1", np.dtype(np.bool_), np.dtype(np.bool_), 1, "bool"),
    "i8": ElemType("i8", np.dtype(np.int8), np.dtype(np.int8), 8, "int"),
    "i16": ElemType("i16", np.dtype(np.int16), np.dtype(np.int16), 16, "int"),
    "i32": ElemType("i32", np.dtype(np.int32), np.dtype(np.int32), 32, "int"),
    "i64": ElemType("i64", np.dtype(np.int64), np.dtype(np.int64), 64, "int"),
    "index": ElemType("index", np.dtype(np.int64), np.dtype(np.int64), 64, "index"),
}


def elem_type(t: ir.Type) -> ElemType:
    """The :class:`ElemType` of an MLIR scalar type (signless, signed and unsigned ints alike)."""
    name = str(t)
    if name[:2] in ("si", "ui"):
        name = "i" + name[2:]
    et = ELEM_TYPES.get(name)
    if et is None:
        raise EmulatorError(message=f"unsupported element type {t}")
    return et


def value_type(t: ir.Type) -> tuple[tuple[int, ...], ElemType]:
    """(vector shape, element type) of a scalar or vector MLIR type; scalars have shape ()."""
    if isinstance(t, ir.VectorType):
        if any(t.is_dynamic_dim(i) for i in range(t.rank)):
            raise EmulatorError(message=f"dynamic vector type {t}")
        return tuple(t.shape), elem_type(t.element_type)
    return (), elem_type(t)


def as_signed(x: np.ndarray, et: ElemType) -> np.ndarray:
    """Values of an integer type as signed numbers (i1 true is -1)."""
    if et.kind == "bool":
        return -np.asarray(x).astype(np.int8)
    return x


def as_unsigned(x: np.ndarray, et: ElemType) -> np.ndarray:
    """Values of an integer type reinterpreted as unsigned numbers."""
    return np.asarray(x).astype(np.uint8 if et.kind == "bool" else f"uint{et.bits}")
