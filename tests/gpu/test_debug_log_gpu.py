"""GPU tier of ``wc.debug_log`` (docs/wave_ports.md, test_debug.py): the element-wise kernel's four logs
and the GEMM's per-iteration accumulator (mma.sync and, on sm_90, wgmma) on the device, against torch in
float64, logs NaN-filled so every element is checked."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import debug_log_kernels as dk
from wavec.kernels import gemm as gm
from wavec.kernels.elementwise import BLOCK_M, BLOCK_N

pytestmark = pytest.mark.gpu


def test_debug_log_core_gpu() -> None:
    seen: dict = {}
    k = wc.compile(dk.make_core(seen), {BLOCK_M: 1, BLOCK_N: 128}, backend="cuda")
    a, b = torch.randn(256, 128, device="cuda").half(), torch.randn(256, 128, device="cuda").half()
    c = k(a, b)
    torch.cuda.synchronize()
    logs = k.debug_logs
    assert torch.equal(c, a + b) and torch.equal(logs["res"]["value"], c)
    assert torch.equal(logs["debug_log_output_0"]["value"], a) and torch.equal(logs["rhslog"]["value"], b)
    assert torch.equal(logs["lhs_mapped"]["value"][:128], a[:128])
    assert logs["lhs_mapped"]["value"][128:].isnan().all()
    assert seen["printer"][0] == "debug_log_output_0" and seen["handler"] is logs


@pytest.mark.parametrize("wgmma", [False, True], ids=["mma_sync", "wgmma"])
def test_debug_log_iteration_dims_gpu(wgmma: bool) -> None:
    if wgmma and torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("wgmma needs sm_90")
    _, threads, mma, waves = dk.TARGETS[1 if wgmma else 0]
    subs = {gm.BLOCK_M: 64, gm.BLOCK_N: 64, gm.BLOCK_K: 32, gm.NUM_STAGES: 2, gm.GROUP_M: 1}
    target = "sm_90a" if wgmma else None
    k = wc.compile(dk.make_gemm(threads, mma, 4, waves, log_a=not wgmma), subs, backend="cuda", target=target)
    m, n, kk = 192, 128, 96  # three K steps for four slots: the last slot is never written
    a, b = torch.randn(m, kk, device="cuda").half(), torch.randn(n, kk, device="cuda").half()
    c = k(a, b)
    torch.cuda.synchronize()
    acc = k.debug_logs["acc"]["value"]
    for i in range(3):
        part = a[:, : 32 * (i + 1)].double() @ b[:, : 32 * (i + 1)].double().T
        torch.testing.assert_close(acc[i].double(), part, rtol=1e-4, atol=1e-4)
    assert torch.equal(acc[2], c) and acc[3].isnan().all()
    assert wgmma or torch.equal(k.debug_logs["a"]["value"], a)
