"""GPU tier: the odd-K pad kernel (``kernels/pad.py``) and ``matmul``'s padded path on a CUDA device: the
padded operands bit for bit against ``F.pad`` (every residue of K the run does not divide, f16 / bf16 /
f32 / int8, views, the workspace poisoned between calls), padded GEMMs against torch in f64 (int8
exactly), two streams at once (each its own workspace) and a CUDA graph replayed with fresh inputs."""

from __future__ import annotations

import pytest
import torch

from wavec.kernels import gemm as gm
from wavec.kernels import pad

pytestmark = pytest.mark.gpu
UNIT = {torch.float16: 8, torch.bfloat16: 8, torch.float32: 4, torch.int8: 16}


def _random(shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.int8:
        return torch.randint(-128, 128, shape, device="cuda", dtype=torch.int8)
    return (torch.randn(shape, device="cuda") * 3).to(dtype)


def _same_bits(got: torch.Tensor, x: torch.Tensor, kp: int, what: str) -> None:
    want = torch.nn.functional.pad(x, (0, kp - x.shape[1])).contiguous()
    assert got.shape == want.shape and torch.equal(got.view(torch.uint8), want.view(torch.uint8)), what


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int8], ids=str)
def test_pad_every_residue(dtype: torch.dtype) -> None:
    unit = UNIT[dtype]
    for r in [x for x in range(1, 16) if x % unit]:
        k = 16 * 64 + r
        kp = k + -k % unit
        a, b = _random((1032, k), dtype), _random((520, k), dtype)
        run = pad.pad_runner(a, b, unit, "cuda")
        for call in range(2):
            pa, pb = run(a, b)
            torch.cuda.synchronize()
            _same_bits(pa, a, kp, f"A {dtype} K={k} call {call}")
            _same_bits(pb, b, kp, f"B {dtype} K={k} call {call}")
            pa.view(torch.uint8).fill_(0xFF)  # NaN / -1: the next call must write every element again
            pb.view(torch.uint8).fill_(0xFF)
            a, b = _random(a.shape, dtype), _random(b.shape, dtype)


@pytest.mark.parametrize("offset, gap", [(1, 0), (3, 5), (0, 11)])
def test_pad_views(offset: int, gap: int) -> None:
    k, m = 4095, 600
    buf = _random((offset + m * (k + gap) + 16,), torch.bfloat16)
    before = buf.clone()
    a = buf[offset : offset + m * (k + gap)].view(m, k + gap)[:, :k]
    b = _random((520, k), torch.bfloat16)
    pa, pb = pad.pad_runner(a, b, 8, "cuda")(a, b)
    torch.cuda.synchronize()
    _same_bits(pa, a, 4096, f"view offset={offset} gap={gap}")
    _same_bits(pb, b, 4096, "B")
    assert torch.equal(buf, before)


def _product_check(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    if a.dtype == torch.int8:  # (no integer matmul on CUDA: the exact reference on the CPU)
        assert torch.equal(c.cpu(), (a.cpu().long() @ b.cpu().long().T).int()), what
        return
    ref = a.double() @ b.double().T
    assert not c.isnan().any(), what
    err = ((c.double() - ref).norm() / ref.norm()).item()
    # tf32 products (about 1e-3, docs/dsl_reference.md); f16 / bf16 products are exact in f32: the f32 sums
    assert err < (2e-3 if a.dtype == torch.float32 else 5e-5), f"{what}: relative error {err:.2e}"


@pytest.mark.parametrize("mma", ["mma_sync", "auto"])
@pytest.mark.parametrize(
    "dtype, k", [(torch.float16, 4095), (torch.bfloat16, 4094), (torch.int8, 1001), (torch.float32, 1001)], ids=str
)
def test_matmul_padded(dtype: torch.dtype, k: int, mma: str) -> None:
    m, n = 1032, 520
    assert gm.pads_k(m, n, k, UNIT[dtype])
    out = torch.int32 if dtype == torch.int8 else torch.float32
    for _ in range(2):
        a, b = _random((m, k), dtype), _random((n, k), dtype)
        c = gm.matmul(a, b, mma=mma, out_dtype=out, allow_tf32=dtype == torch.float32)
        torch.cuda.synchronize()
        _product_check(c, a, b, f"matmul {mma} {dtype} K={k}")


def test_two_streams_take_their_own_workspace() -> None:
    """Both streams' padded GEMMs in flight at once: neither overwrites the other's padded operands."""
    m, n, k = 2048, 2048, 4095
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    ops = [(_random((m, k), torch.float16), _random((n, k), torch.float16)) for _ in range(2)]
    torch.cuda.synchronize()
    results = []
    for _ in range(3):
        for s, (a, b) in zip((s1, s2), ops):
            with torch.cuda.stream(s):
                results.append((gm.matmul(a, b, out_dtype=torch.float32), a, b))
    torch.cuda.synchronize()
    for i, (c, a, b) in enumerate(results):
        _product_check(c, a, b, f"stream call {i}")


def test_cuda_graph_replays_with_fresh_inputs() -> None:
    m, n, k = 1024, 1024, 4095
    a, b = _random((m, k), torch.float16), _random((n, k), torch.float16)
    gm.matmul(a, b, out_dtype=torch.float32)  # decided (and compiled) before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        c = gm.matmul(a, b, out_dtype=torch.float32)
    for _ in range(2):
        a.copy_(_random((m, k), torch.float16))
        b.copy_(_random((n, k), torch.float16))
        eager = gm.matmul(a, b, out_dtype=torch.float32)  # the eager workspace, beside the graph's
        graph.replay()
        torch.cuda.synchronize()
        _product_check(c, a, b, "graph replay")
        _product_check(eager, a, b, "eager between replays")
