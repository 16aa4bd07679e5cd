"""Binary tier: the any-length row kernels (``kernels/rows.py``) compile for sm_80, sm_90a (PTX/cubin)
and gfx942 (HSACO), with N dynamic (a launch value) and 16-byte runs along it."""

from __future__ import annotations

import pytest

import wavec as wc
from wavec.kernels import rows

pytest.importorskip("iree.compiler")


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "gfx942"])
@pytest.mark.parametrize("kind", rows.KINDS)
@pytest.mark.parametrize(
    "dtype, loop, waves", [(wc.f16, True, 1), (wc.bf16, False, 1), (wc.bf16, False, 4), (wc.f32, True, 1)]
)
def test_row_kernels_compile(target: str, kind: str, dtype, loop: bool, waves: int) -> None:
    gfx = target.startswith("gfx")
    tpw = 64 if gfx else 32
    block = 2 * waves * tpw * (16 // dtype.bytes)
    extra = {"block_n": block} if kind == "layer_norm" else {}
    kernel = rows.MAKERS[kind](dtype, loop=loop, tpw=tpw, waves_per_row=waves, **extra)
    k = wc.compile(kernel, {rows.BLOCK_N: block}, target=target, backend="rocm" if gfx else "cuda", cache=False)
    assert k.artifact.binary
    assert dict(k.artifact.metadata.divisibility).get("N") == 16 // dtype.bytes  # wide runs; a miss: narrow variant


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "gfx942"])
def test_silu_and_mul_compiles(target: str) -> None:
    from wavec.kernels import elementwise as ew

    gfx = target.startswith("gfx")
    tpw = 64 if gfx else 32
    subs = {ew.BLOCK_M: 4, ew.BLOCK_N: tpw * 8, ew.TWO: 2}
    k = wc.compile(
        ew.make_silu_and_mul(wc.bf16, tpw), subs, target=target, backend="rocm" if gfx else "cuda", cache=False
    )
    assert k.artifact.binary and dict(k.artifact.metadata.divisibility).get("N") == 8  # 16-byte runs of each half
