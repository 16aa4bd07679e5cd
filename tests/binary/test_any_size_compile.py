"""Binary tier, issue #20 item 1: the kernels of odd sizes compile for sm_80, sm_90a and gfx942 — the narrow
variants a launch compiles for dynamic sizes (``run_caps``) and kernels with odd sizes bound at compile
time — with no launch-time divisibility left, and the aligned kernel keeps its wide accesses."""

import re

import pytest

import wavec as wc
from wavec.kernels import gemm as gm
from wavec.tuning.plan import schedule

pytest.importorskip("iree.compiler")

SUBS = {gm.BLOCK_M: 64, gm.BLOCK_N: 64, gm.BLOCK_K: 32, gm.NUM_STAGES: 2, gm.GROUP_M: 1}
MMA = {"sm_80": wc.MMAType.NV_F32_16x8x16_F16, "sm_90a": wc.MMAType.NV_F32_16x8x16_F16}


def _gemm(target: str, wgmma: bool = False):
    if target == "gfx942":
        return gm.make_gemm(wc.f16, 64, wc.MMAType.F32_16x16x16_F16, (2, 2))
    if wgmma:
        return gm.make_gemm(wc.f16, 32, wc.MMAType.NV_WGMMA_F32_64xNx16_F16, (1, 1), sched=schedule())
    return gm.make_gemm(wc.f16, 32, MMA[target], (2, 2))


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "gfx942"])
@pytest.mark.parametrize("caps", [{"K": 1, "N": 1}, {"K": 2}], ids=["K1N1", "K2"])
def test_narrow_gemm_variant_compiles(target: str, caps: dict) -> None:
    wide = wc.compile(_gemm(target), SUBS, backend="emulator", target=target, cache=False)
    narrow = wc.compile(_gemm(target), SUBS, backend="emulator", target=target, cache=False, run_caps=caps)
    assert narrow.artifact.format in ("cubin", "ptx", "hsaco") and narrow.artifact.binary
    assert all(dict(narrow.metadata.divisibility).get(s, 1) <= cap for s, cap in caps.items())
    assert "K" in dict(wide.metadata.divisibility)
    if target == "gfx942":  # no cp.async: the copies are loads and stores either way
        return
    # the wide kernel's cp.async copies move 16 bytes; the narrow one's the cap (2 bytes: none, synchronous)
    assert _copy_widths(wide) == {8} and _copy_widths(narrow) == ({2} if caps["K"] == 2 else set())


def _copy_widths(kernel) -> set[int]:
    """The element counts of the kernel's cp.async copies (``nvgpu.device_async_copy %src[..], %dst[..], n``)."""
    return {int(n) for n in re.findall(r"nvgpu\.device_async_copy [^\n]*?\], (\d+)", kernel.mlir)}


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "gfx942"])
@pytest.mark.parametrize("shape", [(33, 47, 29), (1, 5, 16), (7, 9, 13)], ids=str)
def test_static_odd_gemm_compiles(target: str, shape) -> None:
    m, n, k = shape
    kernel = wc.compile(
        _gemm(target), {**SUBS, gm.M: m, gm.N: n, gm.K: k}, backend="emulator", target=target, cache=False
    )
    assert kernel.metadata.divisibility == () and kernel.artifact.binary


def test_wgmma_narrow_variant_compiles_without_tma() -> None:
    """A wgmma GEMM with async_copy='auto': K not a multiple of 8 gives no tensor maps (a TMA row stride is
    a 16-byte multiple), the copies stay synchronous or cp.async."""
    subs = {**SUBS, gm.BLOCK_K: 64, gm.NUM_STAGES: 3}
    wide = wc.compile(_gemm("sm_90a", wgmma=True), subs, backend="emulator", target="sm_90a", cache=False)
    narrow = wc.compile(
        _gemm("sm_90a", wgmma=True), subs, backend="emulator", target="sm_90a", cache=False, run_caps={"K": 1}
    )
    assert wide.metadata.tensor_maps and not narrow.metadata.tensor_maps
    assert "wgmma" in narrow.mlir
