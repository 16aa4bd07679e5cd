"""Binary tier: the element types i8, u8, i16 and the fp8 formats, and ``wc.cast`` between every pair of
them and f16/bf16/f32/i32/i64, compile through IREE to a cubin or PTX (sm_80, sm_90) and to HSACO
(gfx942); fp8 values travel as i8 bits (no ``f8E4M3FN`` type reaches IREE)."""

from __future__ import annotations

import pytest

import wavec as wc
from tests.dtype_kernels import CASTS, FP8, STORAGE, cast_kernel, copy_kernel, u8_kernel
from wavec.kernels.elementwise import BLOCK_M, BLOCK_N

pytest.importorskip("iree.compiler")

TARGETS = ["sm_80", "sm_90", "gfx942"]


def _compile(kernel: wc.WaveKernel, target: str, elem_bytes: int) -> wc.WaveKernel:
    threads = 64 if target.startswith("gfx") else 32
    backend = "rocm" if target.startswith("gfx") else "cuda"
    subs = {BLOCK_M: 2, BLOCK_N: 2 * threads * 16 // elem_bytes}
    k = wc.compile(kernel, subs, target=target, backend=backend, cache=False)
    assert k.artifact.format in (("hsaco",) if backend == "rocm" else ("cubin", "ptx"))
    assert k.artifact.binary
    return k


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", STORAGE, ids=str)
def test_copy_compiles(dtype, target: str) -> None:
    k = _compile(copy_kernel(dtype, 64 if target.startswith("gfx") else 32), target, dtype.bytes)
    assert "vector<16xi8>" in k.mlir if dtype.bytes == 1 else "vector<8xi16>" in k.mlir  # 16-byte accesses
    assert "f8E" not in k.mlir


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(("src", "dst"), CASTS, ids=str)
def test_cast_compiles(src, dst, target: str) -> None:
    threads = 64 if target.startswith("gfx") else 32
    k = _compile(cast_kernel(src, dst, threads), target, max(src.bytes, dst.bytes))
    if dst in FP8:
        assert "arith.minimumf" in k.mlir and "math.roundeven" in k.mlir  # saturate, then round
    if src.is_float and not dst.is_float:
        assert "arith.cmpf ord" in k.mlir  # NaN -> 0


@pytest.mark.parametrize("target", TARGETS)
def test_u8_kernel_compiles(target: str) -> None:
    k = _compile(u8_kernel(64 if target.startswith("gfx") else 32), target, 4)
    assert all(op in k.mlir for op in ("arith.divui", "arith.remui", "arith.shrui", "arith.maxui", "cmpi ult"))
