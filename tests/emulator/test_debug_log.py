"""``wc.debug_log`` (``frontend/ops_debug.py``, ``runtime/debug_logs.py``) on the emulator: ports of Wave's
``tests/kernel/test_debug.py`` (docs/wave_ports.md) and the log's own contract.  Logs start NaN-filled, so
an element no workgroup wrote fails the comparisons; the GEMM logs are checked against torch in float64."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import debug_log_kernels as dk
from wavec import Memory, Register, f16, f32
from wavec.errors import ArgumentError, ConstraintError, ShapeError, TorchOpError
from wavec.kernels import gemm as gm
from wavec.kernels.elementwise import BLOCK_M, BLOCK_N, M, N

K = wc.sym.K
TARGETS = dk.TARGETS


def test_debug_log_core() -> None:
    """Every log, the default label, the printer's and the handler's arguments, a mapped log; one binary
    at two sizes, all-arguments and inputs-only calls, and the caller's ``debug_logs`` dict."""
    seen: dict = {}
    k = wc.compile(dk.make_core(seen), {BLOCK_M: 1, BLOCK_N: 128}, backend="emulator", cache=False)
    g = torch.Generator().manual_seed(0)
    for m, n in ((12, 128), (7, 300)):
        a, b = torch.randn(m, n, generator=g).half(), torch.randn(m, n, generator=g).half()
        c = torch.full((m, n), float("nan"), dtype=torch.float16)
        sink: dict = {}
        assert k(a, b, c, debug_logs=sink) is None
        logs = k.debug_logs
        assert list(logs) == ["debug_log_output_0", "rhslog", "lhs_mapped", "res"]
        assert torch.equal(c, a + b)
        assert torch.equal(logs["debug_log_output_0"]["value"], a)
        assert torch.equal(logs["rhslog"]["value"], b)
        assert torch.equal(logs["res"]["value"], c)
        mapped = logs["lhs_mapped"]["value"]
        assert torch.equal(mapped[: (m + 1) // 2], a[: (m + 1) // 2])
        assert mapped[(m + 1) // 2 :].isnan().all()  # rows no workgroup maps to stay NaN
        assert seen["printer"][0] == "debug_log_output_0"
        assert seen["printer"][1] is logs["debug_log_output_0"]["value"]
        assert seen["handler"] is logs and sink == logs
    out = k(a, b)  # inputs only: the kernel's own output is returned, the logs published
    assert torch.equal(out, a + b) and torch.equal(k.debug_logs["rhslog"]["value"], b)
    c = torch.full_like(c, float("nan"))
    assert k(a=a, b=b, c=c) is None and torch.equal(c, a + b)  # all arguments by keyword


@pytest.mark.parametrize("target,threads,mma,waves", TARGETS, ids=[t[0] for t in TARGETS])
@pytest.mark.parametrize("stages", [1, 2])
def test_debug_log_iteration_dims(target: str, threads: int, mma, waves, stages: int) -> None:
    """The accumulator after each of the first three K steps, in slots 0-2 (a K of five steps: the last
    two are not logged), and the A operand as read (each K step writes its own tile), pipelined or not."""
    subs = {gm.BLOCK_M: 64, gm.BLOCK_N: 64, gm.BLOCK_K: 32, gm.NUM_STAGES: stages, gm.GROUP_M: 1}
    wgmma = waves == (1, 1)
    k = wc.compile(
        dk.make_gemm(threads, mma, 3, waves, not wgmma), subs, backend="emulator", target=target, cache=False
    )
    g = torch.Generator().manual_seed(stages)
    m, n, kk = 128, 64, 160
    a, b = torch.randn(m, kk, generator=g).half(), torch.randn(n, kk, generator=g).half()
    c = k(a, b)
    ref = a.double() @ b.double().T
    torch.testing.assert_close(c.double(), ref, rtol=1e-4, atol=1e-4)
    log = k.debug_logs["acc"]
    assert log["iteration_dimensions"] == [K] and log["value"].shape == (3, m, n)
    for i in range(3):
        part = a[:, : 32 * (i + 1)].double() @ b[:, : 32 * (i + 1)].double().T
        torch.testing.assert_close(log["value"][i].double(), part, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(log["value"][0].double(), ref, rtol=1e-2, atol=1e-2)
    assert wgmma or torch.equal(k.debug_logs["a"]["value"], a)


def test_debug_log_named_loops_and_errors() -> None:
    """``iterations={K: n}`` names the loop; misuse is a ShapeError at the kernel line; a kernel with logs
    is not a torch operator."""

    def kernel(body):
        cons = [c for c in gm.gemm_constraints(32, wc.MMAType.NV_F32_16x8x16_F16)]
        return wc.wave(cons)(body)

    def outside(a: Memory[M, K, f16], b: Memory[N, K, f16], c: Memory[M, N, f32]) -> None:
        wc.debug_log(wc.read(a), iterations=2)

    def twice(a: Memory[M, K, f16], b: Memory[N, K, f16], c: Memory[M, N, f32]) -> None:
        x = wc.read(a)
        wc.debug_log(x, "x")
        wc.debug_log(x, "x")

    def mask(a: Memory[M, K, f16], b: Memory[N, K, f16], c: Memory[M, N, f32]) -> None:
        wc.debug_log(wc.read(a) > 0)

    def not_a_loop(a: Memory[M, K, f16], b: Memory[N, K, f16], c: Memory[M, N, f32]) -> None:
        acc = Register[M, N, f32](0.0)

        @wc.iterate(K, init_args=[acc])
        def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
            acc = wc.mma(wc.read(a), wc.read(b), acc)
            wc.debug_log(acc, iterations={N: 2})
            return acc

        wc.write(body, c)

    subs = {gm.BLOCK_M: 64, gm.BLOCK_N: 64, gm.BLOCK_K: 32, gm.NUM_STAGES: 1, gm.GROUP_M: 1}
    for fn, words in (
        (outside, "needs an enclosing wc.iterate"),
        (twice, "not used by another log"),
        (mask, "i1"),
        (not_a_loop, "not the dim of an enclosing wc.iterate"),
    ):
        with pytest.raises((ShapeError, wc.WavecError), match=words) as info:
            wc.compile(kernel(fn), subs, backend="emulator", cache=False)
        assert "test_debug_log.py" in str(info.value)
    k = wc.compile(dk.make_gemm(32, wc.MMAType.NV_F32_16x8x16_F16, {K: 2}), subs, backend="emulator", cache=False)
    a, b = torch.randn(64, 64).half(), torch.randn(64, 64).half()
    k(a, b)
    assert k.debug_logs["acc"]["value"].shape == (2, 64, 64)
    torch.testing.assert_close(
        k.debug_logs["acc"]["value"][0].double(), a[:, :32].double() @ b[:, :32].double().T, rtol=1e-4, atol=1e-4
    )
    wgmma = dk.make_gemm(32, wc.MMAType.NV_WGMMA_F32_64xNx16_F16, 2, (1, 1))
    with pytest.raises(ConstraintError, match="a wgmma operand that stays in shared memory") as info:
        wc.compile(wgmma, subs, backend="emulator", target="sm_90a", cache=False)
    assert 'wc.debug_log(a_reg, "a")' in str(info.value)
    with pytest.raises(TorchOpError, match="debug_log"):
        wc.register_torch_op(k, "wavec_test::debug_gemm")
    with pytest.raises(ArgumentError, match="debug_logs"):
        k(a, b, debug_logs=[])
