"""GPU tier: gathers, scatters, atomics and computed indices (DESIGN §12) on the device against torch,
fresh random indices (repeats included), every output element checked."""

from __future__ import annotations

import functools

import pytest
import torch

import wavec as wc
from tests import dyn_kernels as dk
from wavec.kernels.indexing import embedding, index_add_, index_select

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore:index_reduce")]


@functools.cache
def _compiled(name: str, *args):
    if name == "gather_gemm":
        return wc.compile(dk.make_gather_gemm(dk.gemm_constraints()), dk.GEMM_SUBS, backend="cuda")
    return wc.compile(getattr(dk, f"make_{name}")(*args), {}, backend="cuda")


@pytest.mark.parametrize("t, m, n, k", [(100, 333, 96, 128), (2048, 4096, 512, 256)])
def test_gather_gemm(t: int, m: int, n: int, k: int) -> None:
    x = torch.randn(t, k, dtype=torch.float16, device="cuda")
    ids = torch.randint(0, dk.TOP_K * t, (m,), dtype=torch.int32, device="cuda")
    b = torch.randn(n, k, dtype=torch.float16, device="cuda")
    w = torch.rand(m, device="cuda")
    c = torch.randn(t, n, device="cuda")
    want = dk.reference_gather_gemm(x.double(), ids, b.double(), w.double(), c.double())
    _compiled("gather_gemm")(x, ids, b, w, c)
    torch.testing.assert_close(c.double(), want, rtol=1e-3, atol=1e-2)


def test_paged_and_relative_bias() -> None:
    pages, s_len = 64, 300
    bt = torch.stack([torch.randperm(pages)[: (s_len + dk.PAGE - 1) // dk.PAGE] for _ in range(4)]).int().cuda()
    kc = torch.randn(pages * dk.PAGE, 64, dtype=torch.float16, device="cuda")
    out = torch.full((4, s_len, 64), float("nan"), dtype=torch.float16, device="cuda")
    _compiled("paged_read")(bt, kc, out)
    assert torch.equal(out, dk.reference_paged(bt.cpu(), kc.cpu(), s_len).cuda())
    bias, x = torch.randn(2 * dk.R + 1, device="cuda"), torch.randn(200, 300, device="cuda")
    y = torch.full_like(x, float("nan"))
    _compiled("relative_bias")(bias, x, y)
    assert torch.equal(y, dk.reference_relative_bias(bias.cpu(), x.cpu()).cuda())


@pytest.mark.parametrize("kind, dtype", [("add", wc.f32), ("add", wc.i32), ("min", wc.f32), ("max", wc.i32)])
def test_atomics(kind: str, dtype) -> None:
    td = dtype.torch()
    rows = 3000
    src = (torch.randn(rows, 260) * 10).to(td).cuda()
    idx = torch.randint(0, 40, (rows,), dtype=torch.int32, device="cuda")
    out = (torch.randn(20, 260) * 10).to(td).cuda()
    t = (idx // 2).long()
    if kind == "add":
        want = out.double().index_add_(0, t, src.double())
    else:
        want = out.clone().index_reduce_(0, t, src, "amin" if kind == "min" else "amax").double()
    _compiled("atomic", kind, dtype)(src, idx, out)
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_library_index_select_embedding_index_add(dtype) -> None:
    x = torch.randn(5000, 1000, dtype=dtype, device="cuda")
    i = torch.randint(0, 5000, (3001,), device="cuda")
    assert torch.equal(index_select(x, i), x[i])
    ids = torch.randint(0, 5000, (4, 77), dtype=torch.int32, device="cuda")
    assert torch.equal(embedding(ids, x), torch.nn.functional.embedding(ids.long(), x))
    out, src = torch.randn(300, 1024, device="cuda"), torch.randn(3001, 1024, device="cuda")
    j = torch.randint(0, 300, (3001,), device="cuda")
    want = out.double().index_add_(0, j, src.double())
    torch.testing.assert_close(index_add_(out, j, src).double(), want, rtol=1e-5, atol=1e-3)
