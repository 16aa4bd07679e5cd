"""GPU tier: gathers, scatters, atomics and computed indices (DESIGN §12) on the device against torch,
fresh random indices (repeats included), every output element checked; atomics on scalar (sm_80/sm_90) and sm_90a PTX
(scalar, packed and vector ``red``), their old values, and ``WAVEC_CHECK_BOUNDS`` raising on a bad index."""

from __future__ import annotations

import functools

import pytest
import torch

import wavec as wc
from tests import dyn_kernels as dk
from wavec.errors import OutOfBoundsError
from wavec.kernels import elementwise, indexing
from wavec.kernels.indexing import embedding, index_add_, index_select

pytestmark = [pytest.mark.gpu, pytest.mark.filterwarnings("ignore:index_reduce")]


HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
# The scalar-red PTX (sm_80's, also sm_90's: PTX 8.0) on the device's own architecture (a cubin loads only on
# the architecture it was built for), and sm_90a's vector reds on Hopper.
TARGETS = [
    "sm_90" if HOPPER else "sm_80",
    pytest.param("sm_90a", marks=pytest.mark.skipif(not HOPPER, reason="sm_90a needs an H100/H200")),
]


@functools.cache
def _compiled(name: str, *args, target: str | None = None):
    if name == "gather_gemm":
        return wc.compile(dk.make_gather_gemm(dk.gemm_constraints()), dk.GEMM_SUBS, backend="cuda", target=target)
    return wc.compile(getattr(dk, f"make_{name}")(*args), {}, backend="cuda", target=target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("t, m, n, k", [(100, 333, 96, 128), (2048, 4096, 512, 256)])
def test_gather_gemm(t: int, m: int, n: int, k: int, target: str) -> None:
    x = torch.randn(t, k, dtype=torch.float16, device="cuda")
    ids = torch.randint(0, dk.TOP_K * t, (m,), dtype=torch.int32, device="cuda")
    b = torch.randn(n, k, dtype=torch.float16, device="cuda")
    w = torch.rand(m, device="cuda")
    c = torch.randn(t, n, device="cuda")
    want = dk.reference_gather_gemm(x.double(), ids, b.double(), w.double(), c.double())
    _compiled("gather_gemm", target=target)(x, ids, b, w, c)
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


# (rtol, atol) of a sum of ~150 updates per element against the f64 reference, by dtype
TOL = {"f32": (1e-5, 1e-3), "i32": (0, 0), "f16": (2e-2, 2.0), "bf16": (5e-2, 8.0)}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    "kind, dtype",
    [("add", wc.f32), ("add", wc.i32), ("min", wc.f32), ("max", wc.i32), ("add", wc.f16), ("add", wc.bf16)]
    + [("min", wc.f16), ("max", wc.bf16)],
)
def test_atomics(kind: str, dtype, target: str) -> None:
    td = dtype.torch()
    rows = 3000
    src = (torch.randn(rows, 260) * 10).to(td).cuda()
    out = (torch.randn(20, 260) * 10).to(td).cuda()
    if kind == "add" and dtype.name in ("f16", "bf16"):
        # small integers: every partial sum (|s| < 256 in practice: ~150 adds of -3..3) is exact in a half
        # type, so the sum is exact in any order of the adds and the comparison below is exact
        src = torch.randint(-3, 4, (rows, 260)).to(td).cuda()
        out = torch.randint(-10, 11, (20, 260)).to(td).cuda()
    idx = torch.randint(0, 40, (rows,), dtype=torch.int32, device="cuda")
    t = (idx // 2).long()
    if kind == "add":
        want = out.double().index_add_(0, t, src.double())
    else:
        want = out.clone().index_reduce_(0, t, src, "amin" if kind == "min" else "amax").double()
    _compiled("atomic", kind, dtype, target=target)(src, idx, out)
    rtol, atol = (0, 0) if kind == "add" and dtype.name in ("f16", "bf16") else TOL[dtype.name]
    torch.testing.assert_close(out.double(), want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("target", TARGETS)
def test_atomic_add_old_values_are_ranks(target: str) -> None:
    """Adding ones: each update's old value is its rank among the updates of its element (every rank
    0 .. count-1 exactly once), on top of the initial value; min's old values never fall below the result."""
    rows = 5000
    idx = torch.randint(0, 40, (rows,), dtype=torch.int32, device="cuda")
    ones = torch.ones(rows, 132, dtype=torch.int32, device="cuda")
    out = torch.randint(0, 1000, (20, 132), dtype=torch.int32, device="cuda")
    start, old = out.clone(), torch.full_like(ones, -1)
    _compiled("atomic_old", "add", wc.i32, target=target)(ones, idx, out, old)
    t = (idx // 2).long()
    counts = torch.bincount(t, minlength=20)
    assert torch.equal(out, start + counts[:, None].int())
    rank = old - start[t]
    for r in range(20):  # per column, the rows updating row r of out hold ranks 0 .. count - 1
        mine = rank[t == r].sort(dim=0).values
        assert torch.equal(
            mine, torch.arange(int(counts[r]), device="cuda", dtype=torch.int32)[:, None].expand_as(mine)
        )
    src = torch.randint(-999, 999, (rows, 132), dtype=torch.int32, device="cuda")
    low, old = torch.zeros(20, 132, dtype=torch.int32, device="cuda"), torch.empty_like(src)
    _compiled("atomic_old", "min", wc.i32, target=target)(src, idx, low, old)
    assert torch.equal(low, torch.zeros_like(low).index_reduce_(0, t, src, "amin"))
    assert bool((old >= low[t]).all())


def test_check_bounds_raises_after_the_kernel(monkeypatch) -> None:
    """WAVEC_CHECK_BOUNDS=1: a bad index is reported with the kernel line, the index and the bound, and is
    neither read nor written; good indices run as usual."""
    monkeypatch.setenv("WAVEC_CHECK_BOUNDS", "1")
    bm, bn = elementwise.BLOCK_M, elementwise.BLOCK_N
    sel = wc.compile(indexing.make_index_select(wc.f16, wc.i64, 8), {bm: 4, bn: 256}, backend="cuda", cache=False)
    add = wc.compile(indexing.make_index_add(wc.f32, wc.i32, 4), {bm: 4, bn: 128}, backend="cuda", cache=False)
    x = torch.randn(50, 256, dtype=torch.float16, device="cuda")
    y = torch.full((3, 256), float("nan"), dtype=torch.float16, device="cuda")
    line = r"indexing\.py:\d+: wc\.write\(wc\.read\(x, mapping=\{T: wc\.read\(index\)\}\), out\)"
    with pytest.raises(
        OutOfBoundsError,
        match=rf"(?s){line}.*wc\.read: .* to x: index 50 in dim T \(size 50\) by lane (6[4-9]|[78]\d|9[0-5]) ",
    ):
        sel(x, torch.tensor([0, 2, 50], device="cuda"), y)
    assert torch.equal(y[:2], x[[0, 2]]) and not y[2].any()
    sel(x, torch.tensor([49, 0, 7], device="cuda"), y)
    assert torch.equal(y, x[[49, 0, 7]])
    out, src = torch.zeros(7, 128, device="cuda"), torch.randn(3, 128, device="cuda")
    with pytest.raises(OutOfBoundsError, match=r"(?s)wc\.scatter_add.*to out: index -2 in dim T \(size 7\)"):
        add(src, torch.tensor([1, -2, 1], dtype=torch.int32, device="cuda"), out)
    torch.testing.assert_close(out[1], src[0] + src[2])
    assert not out[[0, 2, 3, 4, 5, 6]].any()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_library_index_select_embedding_index_add(dtype) -> None:
    x = torch.randn(5000, 1000, dtype=dtype, device="cuda")
    i = torch.randint(0, 5000, (3001,), device="cuda")
    assert torch.equal(index_select(x, i), x[i])
    ids = torch.randint(0, 5000, (4, 77), dtype=torch.int32, device="cuda")
    assert torch.equal(embedding(ids, x), torch.nn.functional.embedding(ids.long(), x))
    out, src = torch.randn(300, 1024, device="cuda", dtype=dtype), torch.randn(3001, 1024, device="cuda", dtype=dtype)
    j = torch.randint(0, 300, (3001,), device="cuda")
    want = out.double().index_add_(0, j, src.double())
    rtol, atol = {torch.float32: (1e-5, 1e-3), torch.float16: (2e-2, 0.5), torch.bfloat16: (5e-2, 2.0)}[dtype]
    torch.testing.assert_close(index_add_(out, j, src).double(), want, rtol=rtol, atol=atol)
