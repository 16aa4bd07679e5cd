"""GPU tier: the library's PyTorch operators (``torch.ops.wavec.*``) on CUDA tensors against torch, and
inside a CUDA graph."""

from __future__ import annotations

import pytest
import torch

import wavec.kernels.torch_ops  # noqa: F401 - registers torch.ops.wavec.*

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_ops_match_torch(dtype) -> None:
    x = torch.randn(4000, 768, dtype=dtype, device="cuda")
    i = torch.randint(0, 4000, (2049,), device="cuda")
    assert torch.equal(torch.ops.wavec.index_select(x, i), x[i])
    ids = torch.randint(0, 4000, (8, 33), dtype=torch.int32, device="cuda")
    assert torch.equal(torch.ops.wavec.embedding(ids, x), torch.nn.functional.embedding(ids.long(), x))
    out, src = torch.randn(100, 768, device="cuda"), torch.randn(2049, 768, device="cuda")
    j = torch.randint(0, 100, (2049,), device="cuda")
    want = out.double().index_add_(0, j, src.double())
    torch.ops.wavec.index_add_(out, j, src)
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-3)


def test_opcheck_and_cuda_graph() -> None:
    x = torch.randn(512, 256, dtype=torch.float16, device="cuda")
    i = torch.randint(0, 512, (300,), dtype=torch.int32, device="cuda")
    torch.library.opcheck(torch.ops.wavec.index_select.default, (x, i))
    torch.ops.wavec.index_select(x, i)  # compile and warm up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = torch.ops.wavec.index_select(x, i)
    i.copy_(torch.randint(0, 512, (300,), dtype=torch.int32, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, x[i.long()])


def test_paged_attention_op() -> None:
    import wavec as wc
    from tests import dyn_kernels as dk

    q, kc, vc, bt, lens = dk.paged_kv_inputs([7, 300], 1, 8, 2, 128, 16, wc.bf16, "cuda")
    out = torch.ops.wavec.paged_attention(q, kc, vc, bt, lens, None)
    want = dk.reference_paged_attention(q, kc, vc, bt, lens)
    torch.testing.assert_close(out.float(), want, rtol=1.6e-2, atol=1.6e-2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("t, m, n, k, top_k", [(1000, 2048, 384, 256, 2), (37, 37, 200, 72, 1)])
def test_gather_scatter_matmul(dtype, t: int, m: int, n: int, k: int, top_k: int) -> None:

    x, w = torch.randn(t, k, dtype=dtype, device="cuda"), torch.randn(n, k, dtype=dtype, device="cuda")
    ids = torch.randint(0, top_k * t, (m,), dtype=torch.int32, device="cuda")
    weights, out = torch.rand(m, device="cuda"), torch.randn(t, n, device="cuda")
    rows = (ids // top_k).long()
    want = out.double().index_add_(0, rows, weights.double()[:, None] * (x[rows].double() @ w.double().T))
    torch.ops.wavec.gather_scatter_matmul(x, ids, w, weights, out, top_k)
    tol = 2e-3 if dtype == torch.float16 else 1e-2
    torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol * k**0.5)
