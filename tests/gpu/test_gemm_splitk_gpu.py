"""GPU tier: split-K ``matmul`` (decode shapes, M <= 16) against torch in float64 at real Llama/Mistral layer
sizes, with the rule's S and with forced S (ragged and empty slices), C in f32 and in the input dtype."""

import pytest
import torch

from wavec.kernels import gemm as gm
from wavec.tuning.plan import splitk_config

pytestmark = pytest.mark.gpu

# (M, N, K): the rule splits all but the last (S = 8, 8, 4, 4, 2, 1)
SHAPES = [(1, 4096, 4096), (16, 4096, 11008), (1, 8192, 8192), (16, 5120, 13824), (1, 14336, 4096), (16, 128256, 4096)]


def _rel_err(out, ref) -> float:
    return ((out.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matmul_decode_splitk(shape, dtype) -> None:
    m, n, k = shape
    a, b = torch.randn(m, k, device="cuda").to(dtype), torch.randn(n, k, device="cuda").to(dtype)
    ref = a.double() @ b.double().T
    c = gm.matmul(a, b, split="auto", out_dtype=torch.float32)
    torch.cuda.synchronize()
    assert not c.isnan().any() and _rel_err(c, ref) < 1e-5, (shape, splitk_config(m, n, k)[2])
    c = gm.matmul(a, b, split="auto", out_dtype=dtype)
    assert _rel_err(c, ref) < (2e-3 if dtype == torch.float16 else 1e-2)


@pytest.mark.parametrize("split", [1, 3, 16, 64])
def test_matmul_forced_split(split: int) -> None:
    """K = 4104 (not a multiple of BLOCK_K 128); S = 64 leaves 31 of 64 slices empty."""
    a, b = torch.randn(3, 4104, device="cuda").half(), torch.randn(4160, 4104, device="cuda").half()
    c = gm.matmul(a, b, split=split, out_dtype=torch.float32)
    torch.cuda.synchronize()
    assert _rel_err(c, a.double() @ b.double().T) < 1e-5
