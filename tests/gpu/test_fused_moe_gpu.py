"""GPU tier for ``fused_experts`` / ``fused_moe`` at model-like sizes against an f32 torch reference on the
device: Mixtral-like E = 8, k = 2 and Qwen-like E = 64, k = 6..8 over T = 1..1024 with balanced and skewed
routing, both combines, ``expert_map``, the router weight on the input, outputs pre-filled with NaN;
the deterministic combine is bitwise reproducible; the whole operator replays in a CUDA graph (no host
synchronisation); ``WAVEC_CHECK_BOUNDS=1`` reports a bad expert id naming ``topk_ids`` with ``out``
untouched."""

from __future__ import annotations

import pytest
import torch

from wavec.errors import ArgumentError
from wavec.kernels import fused_moe as fm

pytestmark = pytest.mark.gpu
TOL = 2e-2  # bf16 inputs, intermediate and output (outputs are O(1))


def inputs(t: int, h: int, i: int, e: int, k: int, skew: float = 0.0, seed: int = 0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(t, h, device="cuda", generator=g).bfloat16()
    w1 = (torch.randn(e, 2 * i, h, device="cuda", generator=g) / h**0.5).bfloat16()
    w2 = (torch.randn(e, h, i, device="cuda", generator=g) / i**0.5).bfloat16()
    logits = torch.randn(t, e, device="cuda", generator=g) - skew * torch.arange(e, device="cuda")
    weights, ids = torch.topk(torch.softmax(logits, -1), k)
    return x, w1, w2, weights, ids.to(torch.int32)


def check(got: torch.Tensor, want: torch.Tensor) -> None:
    assert torch.isfinite(got).all(), "an output element was not written"
    torch.testing.assert_close(got.float(), want, rtol=TOL, atol=TOL)


SHAPES = [  # h, i, e, k
    (1024, 512, 8, 2),
    (1024, 256, 64, 6),
    (2048, 768, 64, 8),
]


@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("t", [1, 3, 16, 64, 129, 512, 1024])
@pytest.mark.parametrize("h, i, e, k", SHAPES)
def test_fused_experts_model_sizes(h: int, i: int, e: int, k: int, t: int, deterministic: bool) -> None:
    x, w1, w2, wts, ids = inputs(t, h, i, e, k, seed=t)
    out = torch.full((t, h), float("nan"), dtype=torch.bfloat16, device="cuda")
    fm.fused_experts(x, w1, w2, wts, ids, deterministic=deterministic, out=out)
    check(out, fm.reference(x, w1, w2, wts, ids))


@pytest.mark.parametrize("skew", [1.0, 4.0])
@pytest.mark.parametrize("block_m", [16, 32, 64, 128])
def test_skewed_routing_every_token_block(block_m: int, skew: float) -> None:
    """Skewed routing (a few experts take most rows, many none) with every token block."""
    x, w1, w2, wts, ids = inputs(300, 1024, 512, 64, 8, skew=skew, seed=block_m)
    cfg = fm.tiles_for_block(block_m)
    for det in (True, False):
        out = torch.full((300, 1024), float("nan"), dtype=torch.bfloat16, device="cuda")
        check(
            fm.fused_experts(x, w1, w2, wts, ids, config=cfg, deterministic=det, out=out),
            fm.reference(x, w1, w2, wts, ids),
        )


def test_deterministic_is_bitwise_reproducible() -> None:
    x, w1, w2, wts, ids = inputs(1024, 1024, 512, 8, 2, seed=1)
    first = fm.fused_experts(x, w1, w2, wts, ids, deterministic=True)
    for _ in range(3):
        assert torch.equal(fm.fused_experts(x, w1, w2, wts, ids, deterministic=True), first)


@pytest.mark.parametrize("deterministic", [True, False])
def test_expert_map_and_weight_on_input(deterministic: bool) -> None:
    t, ge, local = 200, 64, 16
    x, w1, w2, wts, _ = inputs(t, 1024, 512, local, 1, seed=2)
    ids = torch.randint(0, ge, (t, 1), dtype=torch.int32, device="cuda")
    emap = torch.full((ge,), -1, dtype=torch.int32, device="cuda")
    emap[torch.randperm(ge, device="cuda")[:local]] = torch.arange(local, dtype=torch.int32, device="cuda")
    for on_input in (False, True):
        out = torch.full((t, 1024), float("nan"), dtype=torch.bfloat16, device="cuda")
        fm.fused_experts(x, w1, w2, wts * 2, ids, expert_map=emap, global_num_experts=ge,
                         apply_router_weight_on_input=on_input, deterministic=deterministic, out=out)  # fmt: skip
        check(out, fm.reference(x, w1, w2, wts * 2, ids, expert_map=emap, apply_router_weight_on_input=on_input))


def test_fused_moe_and_operator() -> None:
    from wavec.kernels import torch_ops  # noqa: F401

    x, w1, w2, _, _ = inputs(100, 1024, 512, 8, 2, seed=3)
    logits = torch.randn(100, 8, device="cuda")
    wts, ids = torch.topk(torch.softmax(logits, -1), 2)
    want = fm.reference(x, w1, w2, wts / wts.sum(-1, keepdim=True), ids)
    check(fm.fused_moe(x, w1, w2, logits, 2, True), want)
    check(torch.ops.wavec.fused_moe(x, w1, w2, logits, 2, True), want)


@pytest.mark.parametrize("deterministic", [True, False])
def test_cuda_graph_replay(deterministic: bool) -> None:
    """The whole operator (routing included) captures and replays: nothing synchronises with the host;
    new routing and activations in the captured buffers give the new answer."""
    x, w1, w2, wts, ids = inputs(64, 1024, 512, 64, 8, seed=4)
    out = torch.empty(64, 1024, dtype=torch.bfloat16, device="cuda")
    fm.fused_experts(x, w1, w2, wts, ids, deterministic=deterministic, out=out)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fm.fused_experts(x, w1, w2, wts, ids, deterministic=deterministic, out=out)
    x2, _, _, wts2, ids2 = inputs(64, 1024, 512, 64, 8, skew=2.0, seed=5)
    x.copy_(x2), wts.copy_(wts2), ids.copy_(ids2)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    check(out, fm.reference(x, w1, w2, wts, ids))


def test_check_bounds_reports_bad_ids(monkeypatch) -> None:
    """WAVEC_CHECK_BOUNDS=1: an id outside [0, E) is an error naming topk_ids after the routing's first
    launch, before anything writes ``out``; good ids run as usual."""
    monkeypatch.setenv("WAVEC_CHECK_BOUNDS", "1")
    x, w1, w2, wts, ids = inputs(40, 1024, 512, 8, 2, seed=6)
    check(fm.fused_experts(x, w1, w2, wts, ids), fm.reference(x, w1, w2, wts, ids))
    out = torch.full((40, 1024), float("nan"), dtype=torch.bfloat16, device="cuda")
    for bad in (8, -1, 1000):
        ids[17, 1] = bad
        with pytest.raises(ArgumentError, match=r"(?s)argument 'topk_ids': holds an expert id outside \[0, 8\)"):
            fm.fused_experts(x, w1, w2, wts, ids, out=out)
        assert out.isnan().all()


def test_exit_if_gemm_on_the_device() -> None:
    """``wc.exit_if`` before a pipelined GEMM (barriers inside the uniform branch): exited row blocks keep
    the sentinel, the others match torch."""
    import wavec as wc
    from tests.emulator.test_exit_if import SUBS, make_skipping_gemm

    kernel = wc.compile(make_skipping_gemm(), SUBS, backend="cuda")
    a = torch.randn(256, 512, dtype=torch.float16, device="cuda")
    b = torch.randn(192, 512, dtype=torch.float16, device="cuda")
    flags = torch.randint(0, 2, (8,), dtype=torch.int32, device="cuda")
    c = torch.full((256, 192), float("nan"), device="cuda")
    kernel(a, b, flags, c)
    want = a.float() @ b.float().T
    for blk, skip in enumerate(flags.tolist()):
        rows = slice(32 * blk, 32 * (blk + 1))
        if skip:
            assert c[rows].isnan().all(), blk
        else:
            torch.testing.assert_close(c[rows], want[rows], rtol=2e-3, atol=2e-2)
