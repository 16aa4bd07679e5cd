"""The tables of ``wc.unary`` kinds and of the integer ``wc.binary`` kinds: one line per function (its DSL
name, the MLIR op on floats and on integers).  Adding a math function is one line here, its ``wc.<name>``
stub in ``ops_math.py`` and its tests; the lowering and the type rule read this table, and the emulator
implements the MLIR op.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class UnaryKind:
    name: str
    float_op: str  # the MLIR op on float operands
    int_op: str | None = None  # the MLIR op on integer operands (None: float operands only)


UNARY_KINDS: dict[str, UnaryKind] = {
    k.name: k
    for k in (
        UnaryKind("neg", "arith.negf", "arith.subi"),  # integers: 0 - x
        UnaryKind("abs", "math.absf", "math.absi"),
        UnaryKind("exp2", "math.exp2"),  # f32 on NVIDIA: ex2.approx (codegen/lowering_ops.py)
        UnaryKind("exp", "math.exp"),
        UnaryKind("log", "math.log"),
        UnaryKind("log2", "math.log2"),
        UnaryKind("sqrt", "math.sqrt"),
        UnaryKind("rsqrt", "math.rsqrt"),
        UnaryKind("tanh", "math.tanh"),
        UnaryKind("sin", "math.sin"),
        UnaryKind("cos", "math.cos"),
        UnaryKind("erf", "math.erf"),
        UnaryKind("log1p", "math.log1p"),
        UnaryKind("floor", "math.floor"),
        UnaryKind("ceil", "math.ceil"),
        UnaryKind("round", "math.roundeven"),  # half to even, as torch.round
    )
}


BIT_KINDS: dict[str, str] = {"and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>"}
"""Integer-only ``wc.binary`` kinds beyond ``//`` and ``%`` (their Python operators); ``and``/``or``/``xor``
also combine comparison results (i1), shifts do not."""
