"""GPU tier, issue #20 item 2 (values part): values with fewer elements than a wave's lanes, and wave tiles
smaller than ``vector_shapes``, replicated over the lanes, on a CUDA device against torch (outputs
poisoned with NaN, every element written)."""

import pytest
import torch

import wavec as wc
from tests.small_kernels import CASES, N, rows_kernel

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("wm,vm,vn,waves", CASES, ids=[f"wave{c[0]}-vs{c[1]}x{c[2]}-w{c[3]}" for c in CASES])
def test_small_values_replicate(wm: int, vm: int, vn: int, waves: int) -> None:
    kernel = wc.compile(rows_kernel(wm, vm, vn, waves, 32), {N: vn}, backend="cuda")
    for m in (1, 3 * wm * waves + 1, 4097):
        x, v = torch.randn(m, vn, device="cuda"), torch.randn(vn, device="cuda")
        o = torch.full((m, vn), float("nan"), device="cuda")
        s, mx = torch.full((m,), float("nan"), device="cuda"), torch.full((m,), float("nan"), device="cuda")
        kernel(x, v, o, s, mx)
        torch.cuda.synchronize()
        # the GPU contracts x * v + 1 into one fma (one rounding), torch rounds twice: compare with f64
        y = x.double() * v.double() + 1.0
        assert torch.allclose(o.double(), y, rtol=1e-6, atol=1e-6), f"M={m}"
        assert torch.allclose(s.double(), y.sum(1), rtol=1e-5, atol=1e-5), f"M={m}"
        assert torch.equal(mx, o.max(1).values), f"M={m}"
