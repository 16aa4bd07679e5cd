"""GPU tier: wavec kernels as PyTorch operators under ``torch.compile`` and CUDA graph capture.

Needs a CUDA GPU, CUDA torch and ``cuda-bindings``; skipped elsewhere (``pytestmark = pytest.mark.gpu``).
"""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from wavec.kernels.elementwise import DEFAULT_SUBS as EW_SUBS
from wavec.kernels.elementwise import make_scale_shift
from wavec.kernels.gemm import make_gemm
from wavec.runtime.torch_op import register_torch_op
from wavec.tuning.plan import DEFAULT_SUBS

pytestmark = pytest.mark.gpu

M, N, K = 256, 1024, 128  # multiples of the GEMM tiles (64, 64, 32) and of scale_shift's (4, 512)


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WAVEC_CACHE_DIR", str(tmp_path_factory.mktemp("wavec-cache")))
        gemm = wc.compile(make_gemm(wc.f16), DEFAULT_SUBS, backend="cuda")
        ss = wc.compile(make_scale_shift(wc.f32), EW_SUBS, backend="cuda")
    return (register_torch_op(gemm, "wavec_gpu_test::gemm"), register_torch_op(ss, "wavec_gpu_test::scale_shift"))


class GemmScaleShift(torch.nn.Module):
    """``(x @ w.T) * y + bias`` through the two wavec ops."""

    def __init__(self, op_gemm, op_ss) -> None:
        super().__init__()
        self.op_gemm, self.op_ss = op_gemm, op_ss
        self.w = torch.nn.Parameter(torch.randn(N, K, device="cuda", dtype=torch.float16), requires_grad=False)
        self.bias = torch.nn.Parameter(torch.randn(N, device="cuda"), requires_grad=False)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.op_ss(self.op_gemm(x, self.w), y, self.bias)


def _inputs(m: int = M, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(m, K, device="cuda", generator=g).half(), torch.randn(m, N, device="cuda", generator=g))


def _reference(model: GemmScaleShift, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x.double() @ model.w.double().T) * y.double() + model.bias.double()[None, :]


def _check(out: torch.Tensor, ref: torch.Tensor) -> None:
    assert not out.isnan().any()
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert err < 1e-5, err


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph_matches_eager(ops, dynamic):
    torch._dynamo.reset()
    model = GemmScaleShift(*ops)
    compiled = torch.compile(model, fullgraph=True, dynamic=dynamic)
    for m in (M, 2 * M) if dynamic else (M,):
        x, y = _inputs(m, seed=m)
        with torch.no_grad():
            eager, got = model(x, y), compiled(x, y)
        torch.cuda.synchronize()
        torch.testing.assert_close(got, eager, rtol=0, atol=0)
        _check(got, _reference(model, x, y))


def test_cuda_graph_capture_and_replay(ops):
    model = GemmScaleShift(*ops)
    x, y = _inputs()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():  # warm up: load the modules before capturing
        for _ in range(2):
            model(x, y)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        out = model(x, y)
    for seed in (1, 2):
        nx, ny = _inputs(seed=seed)
        x.copy_(nx)
        y.copy_(ny)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check(out, _reference(model, nx, ny))
        with torch.no_grad():
            torch.testing.assert_close(out, model(nx, ny), rtol=0, atol=0)


def test_in_place_op_under_cuda_graph(ops):
    """``ns::op_out`` writes a caller-owned output; captured and replayed like any mutating op."""
    x, y = _inputs()
    w = torch.randn(N, K, device="cuda", dtype=torch.float16)
    c = torch.empty(M, N, device="cuda")
    torch.ops.wavec_gpu_test.gemm_out(x, w, c)  # warm-up (loads the module)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch.ops.wavec_gpu_test.gemm_out(x, w, c)
    x.copy_(_inputs(seed=3)[0])
    c.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    _check(c, x.double() @ w.double().T)


def test_torch_compile_reduce_overhead(ops):
    """Inductor's CUDA-graph trees (``mode="reduce-overhead"``) around the two ops match eager."""
    torch._dynamo.reset()
    model = GemmScaleShift(*ops)
    compiled = torch.compile(model, fullgraph=True, mode="reduce-overhead")
    for seed in range(4):  # the first calls record, later ones replay
        x, y = _inputs(seed=seed)
        with torch.no_grad():
            got = compiled(x, y).clone()
            eager = model(x, y)
        torch.cuda.synchronize()
        torch.testing.assert_close(got, eager, rtol=0, atol=0)
