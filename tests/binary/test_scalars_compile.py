"""Binary tier: kernels with f16 / bf16 / i64 (and f32 / i32) scalar arguments compile for sm_80, sm_90a (PTX
and cubin) and gfx942 (HSACO); in the PTX each scalar is one ``.param .b32`` after the pointers, an i64 two
(the kernel ABI of ``docs/toolchain.md``: the launcher packs a half's bits into the low half, an i64's low
and high words), rebuilt in registers."""

from __future__ import annotations

import re

import pytest

import wavec as wc
import wavec.codegen.ptxas as ptxas_mod
from tests import scalar_kernels as sk

pytest.importorskip("iree.compiler")
MLIR = {"f16": "f16", "bf16": "bf16"}


def _compile(dtype: str, target: str):
    amd = target.startswith("gfx")
    kern = sk.make_scale(dtype, tpw=64 if amd else 32)
    return wc.compile(kern, sk.SUBS, target=target, backend="rocm" if amd else "cuda", cache=False)


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "gfx942"])
@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32", "i32", "i64"])
def test_scalar_kernel_compiles(target: str, dtype: str) -> None:
    k = _compile(dtype, target)
    assert k.artifact.binary and k.metadata.scalars == (("scale", dtype), ("shift", dtype))
    halves = re.findall(r"arith\.trunci %\w+ : i32 to i16", k.mlir)
    assert len(halves) == (2 if dtype in MLIR else 0)
    if dtype in MLIR:
        assert len(re.findall(rf"arith\.bitcast %\w+ : i16 to {MLIR[dtype]}", k.mlir)) == 2
    want = ("scale", "scale.hi", "shift", "shift.hi") if dtype == "i64" else ("scale", "shift")
    assert k.metadata.constants[-len(want) :] == want


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_i64_scalars_are_two_b32_params(target: str, monkeypatch) -> None:
    with monkeypatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        k = _compile("i64", target)
    ptx = k.artifact.binary.decode()
    start = ptx.index(".entry")
    params = re.findall(r"\.param (\.\w+)", ptx[start : ptx.index(")", start)])
    assert params == [".u64"] * 2 + [".b32"] * len(k.metadata.constants) and len(k.metadata.constants) == 6


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_scalars_are_b32_params(target: str, dtype: str, monkeypatch) -> None:
    with monkeypatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        k = _compile(dtype, target)
    ptx = k.artifact.binary.decode()
    start = ptx.index(".entry")
    params = re.findall(r"\.param (\.\w+)", ptx[start : ptx.index(")", start)])
    assert params == [".u64"] * 2 + [".b32"] * len(k.metadata.constants)
    assert "ld.param.b16" not in ptx and "ld.param.u16" not in ptx
