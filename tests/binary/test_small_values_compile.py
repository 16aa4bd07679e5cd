"""Binary tier, issue #20 item 2 (values part): kernels whose values have fewer elements than a wave's
lanes (a 4-element row on 32 or 64 lanes) compile to PTX (sm_80) and HSACO (gfx942), the replicas'
stores guarded by the lane id."""

from __future__ import annotations

import re

import pytest

import wavec as wc
import wavec.codegen.ptxas as ptxas_mod
from tests.small_kernels import N, rows_kernel

pytest.importorskip("iree.compiler")


@pytest.mark.parametrize("target,threads", [("sm_80", 32), ("gfx942", 64)], ids=["nv", "amd"])
def test_four_element_rows_compile(target: str, threads: int) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ptxas_mod, "find_ptxas", lambda: None)
        k = wc.compile(
            rows_kernel(1, 1, 4, 2, threads), {N: 4}, target=target, backend="rocm" if threads == 64 else "cuda"
        )
    art = k.artifact
    if threads == 64:
        assert art.format == "hsaco" and art.binary[:4] == b"\x7fELF"
        return
    ptx = art.binary.decode()
    assert art.format == "ptx" and re.search(r"\.entry rows", ptx)
    assert "%tid.x" in ptx and "st.global" in ptx
