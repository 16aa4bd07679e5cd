"""Binary tier: the odd-K pad kernel (``kernels/pad.py``) compiles for sm_80, sm_90a (PTX, cubin) and gfx942
(HSACO) for each word width; on NVIDIA each lane's 16-byte chunks of the workspace are 16-byte stores and
its reads single words (8 bytes where the words are), the T + 1 words each chunk spans, in each operand's
branch."""

from __future__ import annotations

import re

import pytest

import wavec as wc
import wavec.codegen.ptxas as ptxas_mod
from wavec.kernels import pad

pytest.importorskip("iree.compiler")

# (word bytes, element bytes): f16/bf16 in 8-byte words (funnel shifts), f32 and int8 likewise, and the
# narrow words of a storage that ends off an 8-byte word (4-byte f32 words and 2-byte f16 words: no shift)
WIDTHS = [(8, 2), (8, 4), (8, 1), (4, 4), (2, 2)]


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "gfx942"])
@pytest.mark.parametrize("wb, es", WIDTHS)
def test_pad_kernel_compiles(target: str, wb: int, es: int) -> None:
    gfx = target.startswith("gfx")
    block_j, waves = pad.pad_config(512)
    kernel = pad.make_pad(pad.WORDS[wb], es, block_j, waves, tpw=64 if gfx else 32)
    k = wc.compile(kernel, {pad.T: 16 // wb}, target=target, backend="rocm" if gfx else "cuda", cache=False)
    assert k.artifact.binary
    if gfx:
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)  # the PTX text, checked below
        ptx = wc.compile(kernel, {pad.T: 16 // wb}, target=target, backend="cuda", cache=False).artifact.binary.decode()
    per_lane = block_j // waves // 32  # chunks per lane
    loads = len(re.findall(rf"ld\.global(\.nc)?\.b{8 * wb}\b", ptx))
    stores = re.findall(r"st\.global\.v(\d)\.b(\d+)", ptx)
    assert stores and all(int(v) * int(bits) == 128 for v, bits in stores)  # 16 bytes each
    # (LLVM may sink the two branches' last stores into one)
    assert 2 * per_lane - 1 <= len(stores) <= 2 * per_lane
    words = 16 // wb
    # both branches; funnel-shifted chunks read their words and the next chunk's first once each
    assert loads == 2 * per_lane * (words + 1 if wb > es else words)


@pytest.mark.parametrize("target", ["sm_90a", "gfx942"])
def test_words_layout_compiles(target: str) -> None:
    """``chunked=False``: one word per lane and instruction, so 8-byte stores."""
    gfx = target.startswith("gfx")
    kernel = pad.make_pad(wc.i64, 2, *pad.pad_config(512), tpw=64 if gfx else 32, chunked=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        k = wc.compile(kernel, {pad.T: 2}, target=target, backend="rocm" if gfx else "cuda", cache=False)
    assert k.artifact.binary
    if not gfx:
        ptx = k.artifact.binary.decode()
        assert re.findall(r"st\.global\.b64", ptx) and not re.findall(r"st\.global\.v", ptx)
