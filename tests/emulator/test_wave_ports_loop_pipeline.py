"""Ports of Wave's ``tests/kernel/e2e/test_loop_pipeline.py`` (docs/wave_ports.md): a software-pipelined
GEMM (``C = A @ B.T``, f16 in, f32 out) whose K is a launch value, including K below the pipeline's depth
(fewer loop tiles than stages) and K no tile divides, against torch in float64, every element checked."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from wavec.kernels.gemm import BLOCK_K, BLOCK_M, BLOCK_N, make_gemm
from wavec.tuning.plan import GROUP_M, NUM_STAGES


@pytest.mark.parametrize("stages", [2, 3])
def test_gemm_pipelined_dynamic_k_and_remainder_start(stages: int) -> None:
    """Wave's test_gemm_pipelined_dynamic_K and test_gemm_pipelined_remainder_start: one binary, K of
    16 (one tile, fewer than the stages), 48, 100 and 272."""
    subs = {BLOCK_M: 32, BLOCK_N: 32, BLOCK_K: 16, NUM_STAGES: stages, GROUP_M: 1}
    k = wc.compile(make_gemm(), subs, backend="emulator", cache=False)
    g = torch.Generator().manual_seed(stages)
    for m, n, kk in ((40, 48, 16), (64, 33, 48), (37, 64, 100), (32, 32, 272)):
        a, b = torch.randn(m, kk, generator=g).half(), torch.randn(n, kk, generator=g).half()
        c = torch.full((m, n), float("nan"))
        k(a, b, c)
        torch.testing.assert_close(c.double(), a.double() @ b.double().T, rtol=1e-4, atol=1e-4)
