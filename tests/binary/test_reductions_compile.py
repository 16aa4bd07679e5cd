"""Binary tier: the reductions (sum/max/min of f32, i32, i64, f16), arg-reductions, scans and top-k (within
a tile and across loop tiles) compile for sm_80, sm_90a (PTX/cubin) and gfx942 (HSACO); 64-bit keys cross
lanes as two 32-bit shuffles."""

from __future__ import annotations

import pytest

import wavec as wc
from tests import reduce_kernels as rk

pytest.importorskip("iree.compiler")
TARGETS = ["sm_80", "sm_90a", "gfx942"]


def _compile(kernel, target: str):
    backend = "rocm" if target.startswith("gfx") else "cuda"
    return wc.compile(kernel, {rk.N: 512}, target=target, backend=backend, cache=False)


def _tpw(target: str) -> int:
    return 64 if target.startswith("gfx") else 32


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind,dtype", [("sum", wc.i32), ("max", wc.i64), ("min", wc.f32), ("sum", wc.bf16)])
def test_reduction_compiles(target: str, kind: str, dtype) -> None:
    k = _compile(rk.make_reduce(kind, dtype, tpw=_tpw(target)), target)
    assert k.artifact.binary and "vector.reduction" in k.mlir


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind,dtype", [("argmax", wc.f32), ("argmin", wc.i32), ("argmax", wc.f16)])
def test_arg_reduction_compiles(target: str, kind: str, dtype) -> None:
    k = _compile(rk.make_arg(kind, dtype, tpw=_tpw(target)), target)
    assert k.artifact.binary
    assert "gpu.shuffle xor" in k.mlir.replace("  ", " ") and " : i64" not in _shuffles(k.mlir)


def _shuffles(mlir: str) -> str:
    return "\n".join(line for line in mlir.splitlines() if "gpu.shuffle" in line)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("kind,exclusive,dtype,waves", [("add", True, wc.f32, 4), ("max", False, wc.i64, 1)])
def test_scan_compiles(target: str, kind: str, exclusive: bool, dtype, waves: int) -> None:
    k = _compile(rk.make_scan(kind, exclusive, dtype, tpw=_tpw(target), waves=waves), target)
    assert k.artifact.binary and "gpu.shuffle up" in k.mlir.replace("  ", " ")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype,waves,k", [(wc.f32, 2, 8), (wc.f16, 1, 16)])
def test_topk_compiles(target: str, dtype, waves: int, k: int) -> None:
    """Knock-out rounds (i64 keys as two 32-bit shuffles) and, over two waves, the shared-memory merge."""
    kern = rk.make_topk(dtype, tpw=_tpw(target), waves_n=waves)
    backend = "rocm" if target.startswith("gfx") else "cuda"
    got = wc.compile(kern, {rk.N: 512, rk.K: k}, target=target, backend=backend, cache=False)
    assert got.artifact.binary and " : i64" not in _shuffles(got.mlir)
    assert ("gpu.barrier" in got.mlir) == (waves > 1)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype,k", [(wc.f32, 128), (wc.bf16, 20)])
def test_topk_across_loop_tiles_compiles(target: str, dtype, k: int) -> None:
    """The running top-k carried through scf.for (a ragged row: the masked tail) and the bitonic merge."""
    kern = rk.make_topk_loop(dtype, tpw=_tpw(target), block=64, tiles=2)
    backend = "rocm" if target.startswith("gfx") else "cuda"
    got = wc.compile(kern, {rk.N: 1000, rk.K: k}, target=target, backend=backend, cache=False)
    assert got.artifact.binary and "scf.for" in got.mlir and "arith.minsi" in got.mlir


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("experts,k,renormalize", [(8, 2, False), (256, 8, True)])
def test_topk_softmax_compiles(target: str, experts: int, k: int, renormalize: bool) -> None:
    from wavec.kernels import moe_routing as mr

    kern = mr.make_topk_softmax(wc.bf16, experts, k, renormalize, tpw=_tpw(target))
    backend = "rocm" if target.startswith("gfx") else "cuda"
    kp = (k + 3) // 4 * 4
    got = wc.compile(kern, {mr.E: experts, mr.K: kp}, target=target, backend=backend, cache=False)
    assert got.artifact.binary
