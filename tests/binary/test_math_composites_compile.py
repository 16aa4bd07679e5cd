"""Binary tier: the built math functions and the Python operators on traced values compile through IREE
to a cubin or PTX (sm_80, sm_90) and to HSACO (gfx942), and the MLIR holds the ops they are made of."""

from __future__ import annotations

import pytest

import wavec as wc
from tests.math_kernels import FLOAT_FUNCS, INT_FUNCS, float_kernel, int_kernel
from wavec.kernels.elementwise import BLOCK_M, BLOCK_N

pytest.importorskip("iree.compiler")

TARGETS = ["sm_80", "sm_90", "gfx942"]
# what each function must lower to (beyond the read and write)
FLOAT_OPS = {
    "sigmoid": "fastmath<afn>", "silu": "fastmath<afn>", "gelu": "math.erf", "gelu_tanh": "math.tanh",
    "pow3": "arith.mulf", "pow7": "arith.mulf", "pow_neg2": "arith.divf", "builtin_round": "math.roundeven",
    "math_floor": "math.floor", "math_ceil": "math.ceil", "builtin_abs": "math.absf", "neg": "arith.negf",
}  # fmt: skip
INT_OPS = {
    "and": "arith.andi", "or": "arith.ori", "xor": "arith.xori", "shl": "arith.shli", "shr": "arith.shrsi",
    "invert": "arith.xori", "pow3_wraps": "arith.muli", "builtin_abs": "math.absi", "masks": "arith.ori",
}  # fmt: skip


def _compile(kernel: wc.WaveKernel, target: str, elem_bytes: int) -> wc.WaveKernel:
    threads = 64 if target.startswith("gfx") else 32
    backend = "rocm" if target.startswith("gfx") else "cuda"
    subs = {BLOCK_M: 2, BLOCK_N: 2 * threads * 16 // elem_bytes}
    k = wc.compile(kernel, subs, target=target, backend=backend, cache=False)
    assert k.artifact.format in (("hsaco",) if backend == "rocm" else ("cubin", "ptx"))
    assert k.artifact.binary
    return k


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [wc.f32, wc.f16, wc.bf16], ids=str)
@pytest.mark.parametrize("name", list(FLOAT_FUNCS))
def test_float_function_compiles(name: str, dtype, target: str) -> None:
    threads = 64 if target.startswith("gfx") else 32
    k = _compile(float_kernel(name, dtype, threads), target, dtype.bytes)
    assert FLOAT_OPS.get(name, "vector.store") in k.mlir


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(INT_FUNCS))
def test_int_operator_compiles(name: str, target: str) -> None:
    threads = 64 if target.startswith("gfx") else 32
    k = _compile(int_kernel(name, threads), target, 4)
    assert INT_OPS.get(name, "vector.store") in k.mlir
