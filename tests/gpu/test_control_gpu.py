"""GPU tier: wc.allocate / barrier / conditional / cumsum, shared-memory atomics and the routing kernel
(``moe_align_block_size``) on the device against torch, fresh random inputs, sentinel-filled outputs."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import control_kernels as ck
from wavec.kernels import moe_align as ma

pytestmark = pytest.mark.gpu


def _cuda(kernel, subs: dict | None = None):
    return wc.compile(kernel, subs or {}, backend="cuda")


@pytest.mark.parametrize("kind", ["add", "min", "max"])
@pytest.mark.parametrize("dtype", [wc.i32, wc.f32])
def test_shared_atomics(kind: str, dtype) -> None:
    n = 300
    ids = torch.randint(0, 64, (n,), dtype=torch.int32, device="cuda")
    vals = torch.randint(-9, 10, (n,), device="cuda").to(dtype.torch())
    counts = torch.full((2, 64), -77, dtype=dtype.torch(), device="cuda")
    old = torch.full((n,), -77, dtype=dtype.torch(), device="cuda")
    _cuda(ck.make_histogram(dtype, kind), {ck.E: 64})(ids, vals, counts, old)
    init = {"add": 0, "min": 1 << 20, "max": -(1 << 20)}[kind]
    red = {"add": "sum", "min": "amin", "max": "amax"}[kind]
    for g in range(2):
        sl = slice(256 * g, min(n, 256 * (g + 1)))
        want = torch.full((64,), init, dtype=dtype.torch(), device="cuda")
        want = want.scatter_reduce(0, ids[sl].long(), vals[sl], red, include_self=True)
        assert torch.equal(counts[g], want)
        if kind == "add":
            for e in ids[sl].unique().tolist():
                mine = ids[sl] == e
                o, v = old[sl][mine].tolist(), vals[sl][mine].tolist()
                assert sorted([0] + [a + b for a, b in zip(o, v)]) == sorted(o + [want[e].item()])


@pytest.mark.parametrize("waves", [1, 4])
def test_cumsum(waves: int) -> None:
    x = torch.randint(-50, 50, (600,), dtype=torch.int32, device="cuda")
    y, rev = torch.full_like(x, -7), torch.full_like(x, -7)
    _cuda(ck.make_scan(waves))(x, y, rev)
    assert torch.equal(y, torch.cat([t.cumsum(0).int() for t in x.split(256)]))
    for i, t in enumerate(x.split(256)[:2]):
        assert torch.equal(rev[256 * i : 256 * (i + 1)], (t.cumsum(0).int() - t).flip(0))


@pytest.mark.parametrize("with_when", [False, True])
def test_conditional_masked_store(with_when: bool) -> None:
    x = torch.randn(200, device="cuda")
    out = torch.full((200,), 12345.0, device="cuda")
    _cuda(ck.make_masked_store(with_when))(x, out)
    want = torch.where(x > 0, 2 * x, torch.full_like(x, 12345.0))
    if with_when:
        want[64:] = 12345.0
    assert torch.equal(out, want)


def test_exchange_and_loop_hazards() -> None:
    x = torch.randn(4096, device="cuda")
    out = torch.full_like(x, float("nan"))
    _cuda(ck.make_exchange())(x, out)
    assert torch.equal(out, torch.cat([t.flip(0) + 1 for t in x.split(128)]))
    x2 = torch.randn(17, 4096, device="cuda")
    out2 = torch.full((4096,), float("nan"), device="cuda")
    _cuda(ck.make_loop_accumulate())(x2, out2)
    want = []
    for t in x2.split(64, dim=1):
        buf = torch.zeros(64, device="cuda")
        for k in range(17):
            buf = buf.flip(0) + t[k]
        want.append(buf)
    torch.testing.assert_close(out2, torch.cat(want))


SIZES = [(1, 8), (17, 8), (256, 8), (256, 2), (511, 8), (4096, 8), (32768, 8)]


@pytest.mark.parametrize("experts", [8, 64, 128, 256, 512, 33])
@pytest.mark.parametrize("t, k", SIZES)
@pytest.mark.parametrize("block", [16, 64])
def test_moe_align_block_size(t: int, k: int, experts: int, block: int) -> None:
    ids = torch.randint(0, experts, (t, k), dtype=torch.int32, device="cuda")
    got = ma.moe_align_block_size(ids, experts, block)
    assert all(x.is_cuda for x in got)
    ma.check_alignment(got, ma.reference(ids, experts, block), block)


def test_moe_align_skewed_and_int64() -> None:
    ids = torch.zeros(3000, 8, dtype=torch.int64, device="cuda")
    ids[::5] = torch.randint(0, 256, (600, 8), device="cuda")
    got = ma.moe_align_block_size(ids, 256, 16)
    ma.check_alignment(got, ma.reference(ids, 256, 16), 16)


def test_moe_align_torch_op() -> None:
    op = ma.register_moe_align_op()
    ids = torch.randint(0, 64, (100, 8), dtype=torch.int32, device="cuda")
    ma.check_alignment(op(ids, 64, 16), ma.reference(ids, 64, 16), 16)


@pytest.mark.parametrize("used", [False, True])
@pytest.mark.parametrize("kind", ["add", "min", "max"])
@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16])
def test_shared_half_atomics(dtype, kind: str, used: bool) -> None:
    """Packed f16x2/bf16x2 shared reductions (bf16x2 on sm_90), compare-and-swap loops otherwise; exact on
    integer-valued rows so any order of the updates gives the same bits."""
    width = 512
    k = _cuda(ck.make_shared_index_add(dtype, kind, 8, used), {wc.sym.R: 5, ck.X: width})
    src = torch.randint(-9, 10, (4001, width), device="cuda").to(dtype.torch())
    index = torch.randint(0, 5, (4001,), dtype=torch.int32, device="cuda")
    out = torch.full((1001, 5, width), float("nan"), dtype=dtype.torch(), device="cuda")
    old = torch.full_like(src, float("nan"))
    k(src, index, out, old)
    ck.check_shared_index_add(src[:400], index[:400], out[:100], old[:400], kind, used)
    ck.check_shared_index_add(src[-1:], index[-1:], out[-1:], old[-1:], kind, used)
