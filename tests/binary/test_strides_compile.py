"""Binary tier, issue #20 item 1 (strides): the strided variants compile for sm_80, sm_90a and gfx942 —
every tensor's outer strides launch values, an inner-strided argument (a transposed view) read element by
element, a capped one (a row pitch the vector width does not divide) — while the dense kernel keeps its
identity layouts (its golden MLIR is unchanged: tests/golden) and the strided one its wide accesses."""

import re

import pytest

import wavec as wc
from wavec.codegen import ptxas as ptxas_mod
from wavec.kernels import elementwise as ew
from wavec.kernels import gemm as gm
from wavec.tuning.plan import schedule

pytest.importorskip("iree.compiler")

SUBS = {gm.BLOCK_M: 64, gm.BLOCK_N: 64, gm.BLOCK_K: 32, gm.NUM_STAGES: 2, gm.GROUP_M: 1}


def _gemm(target: str, wgmma: bool = False):
    if target == "gfx942":
        return gm.make_gemm(wc.f16, 64, wc.MMAType.F32_16x16x16_F16, (2, 2))
    if wgmma:
        return gm.make_gemm(wc.f16, 32, wc.MMAType.NV_WGMMA_F32_64xNx16_F16, (1, 1), sched=schedule())
    return gm.make_gemm(wc.f16, 32, wc.MMAType.NV_F32_16x8x16_F16, (2, 2))


def _copy_widths(kernel) -> set[int]:
    return {int(n) for n in re.findall(r"nvgpu\.device_async_copy [^\n]*?\], (\d+)", kernel.mlir)}


@pytest.mark.parametrize("target,wgmma", [("sm_80", False), ("sm_90a", False), ("sm_90a", True), ("gfx942", False)])
@pytest.mark.parametrize("strided", [{}, {"b": 0}, {"a": 2, "c": 1}], ids=["outer", "b_inner", "capped"])
def test_strided_gemm_compiles(target: str, wgmma: bool, strided: dict) -> None:
    dense = wc.compile(_gemm(target, wgmma), SUBS, backend="emulator", target=target, cache=False)
    kernel = wc.compile(_gemm(target, wgmma), SUBS, backend="emulator", target=target, cache=False, strided=strided)
    assert kernel.artifact.format in ("cubin", "ptx", "hsaco") and kernel.artifact.binary
    args = {a.name: a for a in kernel.metadata.args}
    assert all(not a.strides for a in dense.metadata.args) and "reinterpret_cast" not in dense.mlir
    for name, a in args.items():
        inner = strided.get(name) == 0
        assert a.strides == (f"{name}.stride0", f"{name}.stride1" if inner else 1), a
        assert set(c for c in a.strides if isinstance(c, str)) <= set(kernel.metadata.constants)
    assert kernel.metadata.constants[:3] == dense.metadata.constants  # the strides come after the sizes
    assert kernel.mlir.count("memref.reinterpret_cast") == 3
    if strided.get("b") == 0:  # B read element by element: scalar loads, no wide vector load of B
        assert args["b"].multiple == 1 and "memref.load" in kernel.mlir
    if "a" in strided:
        assert args["a"].multiple == strided["a"]
    if target == "sm_80" and not strided:  # outer strides alone keep the 16-byte copies
        assert _copy_widths(kernel) == _copy_widths(dense) == {8}
        assert args["a"].multiple == 8


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "gfx942"])
def test_strided_copy_compiles(target: str, monkeypatch) -> None:
    """A transposed src: 2-byte scalar loads of it, 16-byte stores of the dense-rowed dst."""
    tpw = 64 if target == "gfx942" else 32

    def compile_copy(**options):
        return wc.compile(ew.make_copy(wc.f16, tpw), ew.DEFAULT_SUBS, backend="emulator", target=target, **options)

    kernel = compile_copy(cache=False, strided={"src": 0})
    assert kernel.artifact.binary and kernel.metadata.args[0].multiple == 1 and kernel.metadata.args[1].multiple == 8
    if target == "gfx942":
        return
    with monkeypatch.context() as mp:  # the PTX IREE emits (ptxas bypassed)
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        ptx = compile_copy(cache=False, strided={"src": 0}).artifact.binary.decode()
        dense = compile_copy(cache=False).artifact.binary.decode()
    assert re.search(r"ld\.global(\.nc)?\.(b|u)16", ptx) and not re.search(r"ld\.global(\.nc)?\.v4", ptx)
    assert re.search(r"st\.global\.v4", ptx) and re.search(r"ld\.global(\.nc)?\.v4", dense)


def test_unknown_strided_argument_is_an_option_error() -> None:
    with pytest.raises(wc.WavecError, match="strided"):
        wc.compile(ew.make_copy(wc.f16), ew.DEFAULT_SUBS, backend="emulator", strided={"nope": 0})
