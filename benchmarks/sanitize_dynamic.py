"""One call of every data-dependent library kernel, for compute-sanitizer (memcheck, racecheck) on the GPU:
``compute-sanitizer --tool racecheck --report-api-errors no python benchmarks/sanitize_dynamic.py``.
Each result is checked against torch, so a run that the sanitizer passes is also a correct one."""

from __future__ import annotations

import torch

import wavec as wc
from tests import control_kernels as ck
from tests import dyn_kernels as dk
from wavec.kernels import gather_scatter_matmul, index_add_, index_select, moe_align_block_size
from wavec.kernels.moe_align import check_alignment, reference
from wavec.kernels.moe_routing import topk_softmax
from wavec.kernels.paged_attention import paged_attention


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(3000, 512, device="cuda", dtype=torch.bfloat16)
    i = torch.randint(0, 3000, (2048,), device="cuda")
    assert torch.equal(index_select(x, i), x[i])
    for dtype in (torch.float32, torch.bfloat16):
        out, src = torch.zeros(100, 512, device="cuda", dtype=dtype), torch.randn(2048, 512, device="cuda")
        src = src.to(dtype)
        want = out.double().index_add_(0, i % 100, src.double())
        index_add_(out, i % 100, src)
        torch.testing.assert_close(out.double(), want, rtol=2e-2, atol=5e-1)
    for t, e, b in [(256, 512, 64), (7, 8, 16), (40000, 64, 16)]:  # single launch, and three launches
        ids = torch.randint(0, e, (t, 8), dtype=torch.int32, device="cuda")
        check_alignment(moe_align_block_size(ids, e, b), reference(ids, e, b), b)
    xa, w = torch.randn(500, 256, device="cuda", dtype=torch.float16), torch.randn(384, 256, device="cuda").half()
    ids = torch.randint(0, 1000, (1024,), dtype=torch.int32, device="cuda")
    weights, c = torch.rand(1024, device="cuda"), torch.zeros(500, 384, device="cuda")
    rows = (ids // 2).long()
    want = c.double().index_add_(0, rows, weights.double()[:, None] * (xa[rows].double() @ w.double().T))
    torch.testing.assert_close(
        gather_scatter_matmul(xa, ids, w, weights, c, top_k=2).double(), want, rtol=2e-3, atol=2e-2
    )
    logits = torch.randn(300, 128, device="cuda")
    vals, idx = topk_softmax(logits, 8)
    ref = torch.softmax(logits, -1).topk(8, -1)
    torch.testing.assert_close(vals, ref.values, rtol=1e-5, atol=1e-6)
    q, kc, vc, bt, lens = dk.paged_kv_inputs([300, 2, 48], 2, 8, 2, 128, 16, wc.bf16, "cuda")  # seq_len >= q_len
    out = paged_attention(q, kc, vc, bt, lens)
    torch.testing.assert_close(out.float(), dk.reference_paged_attention(q, kc, vc, bt, lens), rtol=2e-2, atol=2e-2)
    for dtype, kind in [(wc.f16, "add"), (wc.bf16, "add"), (wc.bf16, "max")]:  # shared-memory half atomics
        k = wc.compile(ck.make_shared_index_add(dtype, kind, 8, True), {wc.sym.R: 5, ck.X: 256}, backend="cuda")
        src = torch.randint(-9, 10, (41, 256), device="cuda").to(dtype.torch())
        index = torch.randint(0, 5, (41,), dtype=torch.int32, device="cuda")
        out = torch.full((11, 5, 256), float("nan"), dtype=dtype.torch(), device="cuda")
        old = torch.full_like(src, float("nan"))
        k(src, index, out, old)
        ck.check_shared_index_add(src, index, out, old, kind, True)
    torch.cuda.synchronize()
    print("sanitize_dynamic: every kernel ran and matched torch")


if __name__ == "__main__":
    main()
