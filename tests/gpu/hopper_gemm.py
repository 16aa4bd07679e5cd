"""Shared by the Hopper GEMM GPU tests (warp specialization, persistent grid): device check, tile subs,
shapes (incl. masked M/N/K edges), fresh inputs and NaN-prefilled runs (every output must be written)."""

import pytest
import torch

from wavec.kernels import gemm as gm

TORCH_DT = {"f16": torch.float16, "bf16": torch.bfloat16}
SHAPES = [(256, 256, 256), (1024, 1024, 1024), (4096, 4096, 4096), (3072, 384, 512), (8192, 8192, 1024)]
MASKED = [(1, 4096, 4096), (3, 256, 520), (100, 200, 72), (4097, 1000, 264), (130, 136, 40)]


def sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def needs_sm90(what: str):
    return pytest.mark.skipif(not sm90(), reason=f"{what} needs an sm_90 device (H100/H200)")


def subs(bm: int, bn: int, bk: int, stages: int) -> dict:
    return {gm.BLOCK_M: bm, gm.BLOCK_N: bn, gm.BLOCK_K: bk, gm.NUM_STAGES: stages, gm.GROUP_M: 8}


def inputs(m: int, n: int, k: int, dt: str):
    return (torch.randn(m, k, device="cuda").to(TORCH_DT[dt]), torch.randn(n, k, device="cuda").to(TORCH_DT[dt]))


def run_poisoned(kernel, a, b) -> torch.Tensor:
    c = torch.full((a.shape[0], b.shape[0]), float("nan"), device="cuda")
    kernel(a, b, c)
    torch.cuda.synchronize()
    return c


def check_matches_torch_and(kernel, base, dt: str, what: str) -> None:
    """On every shape (masked edges included): every output written, within 1e-5 of float64 torch, and
    bit for bit equal to ``base`` (the same tile without the feature under test)."""
    for m, n, k in SHAPES + MASKED:
        a, b = inputs(m, n, k, dt)
        c = run_poisoned(kernel, a, b)
        assert not c.isnan().any(), f"M={m} N={n} K={k}: {int(c.isnan().sum())} outputs never written"
        ref = a.double() @ b.double().T
        err = ((c.double() - ref).norm() / ref.norm()).item()
        assert err < 1e-5, f"M={m} N={n} K={k} {dt}: relative error {err:.2e}"
        assert torch.equal(c, run_poisoned(base, a, b)), f"M={m} N={n} K={k}: {what}"
