"""Binary tier of the Wave e2e ports (docs/wave_ports.md): the shared port kernels compile to device
code for sm_80, sm_90a and gfx942."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import wave_port_kernels as pk
from wavec.kernels import elementwise as ew


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "gfx942"])
def test_wave_port_kernels_compile(target: str) -> None:
    pytest.importorskip("iree.compiler")
    amd = target.startswith("gfx")
    tpw = 64 if amd else 32
    mma = wc.MMAType.F32_16x16x16_F16 if amd else wc.MMAType.NV_F32_16x8x16_F16
    conv_subs = pk.igemm_problem("nhwc_hwcf", 2, torch.Generator())[3]
    cases = [
        (pk.make_self_index(tpw), {ew.N: 128}),
        (pk.make_toy_online_softmax(1, tpw), {pk.TILE_N: 64}),
        (pk.make_offset_write_one(tpw), {ew.BLOCK_M: 4, ew.BLOCK_N: tpw}),
        (pk.make_igemm(False, tpw, mma), conv_subs),
    ]
    for kernel, subs in cases:
        k = wc.compile(kernel, subs, target=target, backend="rocm" if amd else "cuda", cache=False)
        assert k.artifact.binary
