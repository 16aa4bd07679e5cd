"""Outputs allocated by wavec and kernels as PyTorch operators, on the CPU emulator with CPU tensors.

Covers: the inputs-only calling convention of ``CompiledKernel`` (results against torch on fresh random
inputs; wavec allocates, so there is no poison to check — instead the outputs must hold no NaN), its
errors, ``register_torch_op`` (eager calls of the functional and in-place ops, ``torch.library.opcheck``,
``torch.compile(fullgraph=True)`` with static and dynamic shapes, idempotent re-registration, conflicts).
"""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend

import wavec as wc
from wavec.errors import ArgumentError, WavecError
from wavec.kernels.elementwise import make_scale_shift
from wavec.kernels.gemm import make_gemm
from wavec.runtime.artifact import ArgSpec, Artifact, KernelMetadata
from wavec.runtime.kernel import CompiledKernel, OutputPlan
from wavec.runtime.torch_op import TorchOpError, register_torch_op, registered_torch_ops
from wavec.tuning.plan import DEFAULT_SUBS as GEMM_DEFAULTS

# The library defaults (pipelining depth, workgroup grouping, ...) with 64x64x32 tiles.
GEMM_SUBS = {**GEMM_DEFAULTS, wc.sym.BLOCK_M: 64, wc.sym.BLOCK_N: 64, wc.sym.BLOCK_K: 32}
SS_SUBS = {wc.sym.BLOCK_M: 4, wc.sym.BLOCK_N: 256}


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    """The f16 GEMM and f32 scale_shift on the emulator, compiled once into a module-private cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WAVEC_CACHE_DIR", str(tmp_path_factory.mktemp("wavec-cache")))
        gemm = wc.compile(make_gemm(wc.f16), GEMM_SUBS, backend="emulator")
        ss = wc.compile(make_scale_shift(wc.f32), SS_SUBS, backend="emulator")
    return gemm, ss


@pytest.fixture(scope="module")
def ops(kernels):
    gemm, ss = kernels
    return register_torch_op(gemm, "wavec_test::gemm"), register_torch_op(ss, "wavec_test::scale_shift")


def _gemm_inputs(m: int, n: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(m, k, generator=g).half(), torch.randn(n, k, generator=g).half())


def _ss_inputs(m: int, n: int, seed: int = 1) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, n, generator=g), torch.randn(m, n, generator=g), torch.randn(n, generator=g)


def _gemm_ref(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.double() @ b.double().T).float()


def _close(out: torch.Tensor, ref: torch.Tensor, tol: float) -> None:
    assert not out.isnan().any(), "an output element was never written"
    err = ((out.double() - ref.double()).norm() / ref.double().norm()).item()
    assert err < tol, f"relative error {err:.2e} >= {tol:.0e}"


# ------------------------------------------------------------------------------ outputs allocated by wavec


@pytest.mark.parametrize("mnk", [(64, 128, 64), (128, 64, 96)])
def test_gemm_inputs_only_allocates_and_returns(kernels, mnk):
    gemm, _ = kernels
    m, n, k = mnk
    a, b = _gemm_inputs(m, n, k)
    c = gemm(a, b)
    assert isinstance(c, torch.Tensor) and c.shape == (m, n) and c.dtype == torch.float32
    assert c.device == a.device and c.is_contiguous()
    _close(c, _gemm_ref(a, b), 1e-5)


def test_scale_shift_inputs_only(kernels):
    _, ss = kernels
    a, b, bias = _ss_inputs(8, 512)
    out = ss(a, b, bias)
    assert out.shape == (8, 512) and out.dtype == torch.float32
    _close(out, a.double() * b.double() + bias.double()[None, :], 1e-6)


def test_all_arguments_still_in_place(kernels):
    gemm, _ = kernels
    a, b = _gemm_inputs(64, 64, 32)
    c = torch.full((64, 64), float("nan"))
    assert gemm(a, b, c) is None
    _close(c, _gemm_ref(a, b), 1e-5)


def test_wrong_argument_count_names_both_conventions(kernels):
    gemm, _ = kernels
    a, _ = _gemm_inputs(64, 64, 32)
    with pytest.raises(ArgumentError, match=r"either the 2 inputs \(a, b\).*all 3 arguments \(a, b, c\)"):
        gemm(a)


def test_inputs_are_validated_before_allocation_errors(kernels):
    gemm, _ = kernels
    a, b = _gemm_inputs(64, 64, 32)
    with pytest.raises(ArgumentError, match="argument 'b'.*expected rank 2"):
        gemm(a, b[0])
    with pytest.raises(ArgumentError, match="argument 'a'.*torch.Tensor"):
        gemm(1.0, b)
    with pytest.raises(ArgumentError, match="argument 'a'.*dtype"):
        gemm(a.float(), b)


def _meta(args: tuple[ArgSpec, ...], statics=()) -> KernelMetadata:
    return KernelMetadata(
        kernel="synthetic",
        entry="synthetic",
        block=(32, 1, 1),
        shared_bytes=0,
        args=args,
        constants=("N",),
        static_symbols=statics,
        grid=("1", "1", "1"),
        divisibility=(),
        alignment_bytes=16,
        source="synthetic.py:1",
    )


def test_output_dim_not_bound_by_inputs_raises():
    meta = _meta((ArgSpec("x", "f32", ("N",), False), ArgSpec("y", "f32", ("N", "P"), True)))
    kernel = CompiledKernel(Artifact("sm_90", "ptx", b"", meta, "module {}"), "emulator")
    with pytest.raises(ArgumentError, match=r"argument 'y'.*dimension 1 is symbol P.*pass the outputs"):
        kernel(torch.zeros(8))
    with pytest.raises(TorchOpError, match="symbol P"):
        register_torch_op(kernel, "wavec_test::unbound")


def test_output_plan_interleaved_outputs_and_statics():
    """Outputs between inputs go back to binding order; compile-time symbols and ints size outputs."""
    meta = _meta(
        (
            ArgSpec("o1", "f16", ("K", 4), True),
            ArgSpec("x", "f32", ("M", "N"), False),
            ArgSpec("o2", "i32", ("N", "M"), True),
            ArgSpec("z", "f32", ("N",), False),
        ),
        statics=(("K", 16),),
    )
    plan = OutputPlan(meta)
    x, z = torch.zeros(3, 5), torch.zeros(5)
    o1, o2 = plan.allocate([x, z], x.device)
    assert (o1.shape, o1.dtype, o2.shape, o2.dtype) == ((16, 4), torch.float16, (5, 3), torch.int32)
    assert plan.merge([x, z], [o1, o2]) == (o1, x, o2, z)
    seen = []
    r1, r2 = plan.launch(lambda *t: seen.extend(t), "cpu", x, z)  # the generated hot path
    assert len(seen) == 4 and seen[1] is x and seen[3] is z and seen[0] is r1 and seen[2] is r2
    assert (r1.shape, r1.dtype, r2.shape, r2.dtype) == ((16, 4), torch.float16, (5, 3), torch.int32)


# ------------------------------------------------------------------------------ torch operators


def test_ops_eager(kernels, ops):
    op_gemm, op_ss = ops
    assert op_gemm is torch.ops.wavec_test.gemm and op_ss is torch.ops.wavec_test.scale_shift
    a, b = _gemm_inputs(64, 128, 64)
    _close(op_gemm(a, b), _gemm_ref(a, b), 1e-5)
    x, y, bias = _ss_inputs(4, 256)
    _close(op_ss(x, y, bias), x.double() * y.double() + bias.double()[None, :], 1e-6)
    out = torch.full((4, 256), float("nan"))
    assert torch.ops.wavec_test.scale_shift_out(x, y, bias, out=out) is None
    _close(out, x.double() * y.double() + bias.double()[None, :], 1e-6)


def test_opcheck(ops):
    # Every test util of opcheck passes on the emulator (test_schema, test_autograd_registration,
    # test_faketensor, test_aot_dispatch_static, test_aot_dispatch_dynamic); the inputs need no grad, so
    # test_autograd_registration only checks that no autograd kernel is falsely claimed.
    utils = (
        "test_schema",
        "test_autograd_registration",
        "test_faketensor",
        "test_aot_dispatch_static",
        "test_aot_dispatch_dynamic",
    )
    op_gemm, op_ss = ops
    a, b = _gemm_inputs(64, 128, 64)
    x, y, bias = _ss_inputs(4, 256)
    for op, args in (
        (op_gemm, (a, b)),
        (op_ss, (x, y, bias)),
        (torch.ops.wavec_test.scale_shift_out.default, (x, y, bias, torch.empty(4, 256))),
    ):
        result = torch.library.opcheck(op, args, test_utils=utils)
        assert set(result.values()) == {"SUCCESS"}, result


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph_matches_eager(ops, dynamic):
    op_gemm, op_ss = ops
    torch._dynamo.reset()

    def f(a, b, y, bias):
        return op_ss(op_gemm(a, b), y, bias)

    # The default inductor backend (the graph holds only the two custom ops, so no C++ is compiled),
    # wrapped to count compiled frames: with dynamic shapes the second shape must not recompile.
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(f, backend=counter, fullgraph=True, dynamic=dynamic)
    # Distinct M, N, K in the first call: equal sizes would be duck-shaped into one symbol.
    shapes = [(64, 256, 32), (128, 256, 96)] if dynamic else [(64, 256, 64)]
    for m, n, k in shapes:
        a, b = _gemm_inputs(m, n, k, seed=m + k)
        y, _, bias = _ss_inputs(m, n, seed=n)
        eager = f(a, b, y, bias)
        got = compiled(a, b, y, bias)
        assert got.shape == (m, n)
        torch.testing.assert_close(got, eager, rtol=0, atol=0)
        _close(got, _gemm_ref(a, b).double() * y.double() + bias.double()[None, :], 1e-5)
    assert counter.frame_count == 1


def test_register_idempotent_and_conflicts(kernels, ops):
    gemm, ss = kernels
    op_gemm, _ = ops
    assert register_torch_op(gemm, "wavec_test::gemm") is op_gemm
    # The same artifact bound to another backend object is still the same kernel.
    assert register_torch_op(CompiledKernel(gemm.artifact, "emulator"), "wavec_test::gemm") is op_gemm
    assert registered_torch_ops()["wavec_test::gemm"] == "gemm"
    with pytest.raises(TorchOpError, match="already registered for kernel 'gemm'"):
        register_torch_op(ss, "wavec_test::gemm")
    with pytest.raises(TorchOpError, match="namespace::op"):
        register_torch_op(gemm, "no_namespace")
    with pytest.raises(TorchOpError, match="torch already has an operator"):
        register_torch_op(gemm, "aten::mm")
    assert isinstance(TorchOpError(name="x", message="y"), WavecError)


def test_cpu_tensors_use_an_emulator_kernel(kernels):
    """A kernel compiled for the cuda backend still runs on CPU tensors, through a lazy emulator kernel."""
    _, ss = kernels
    cuda_kernel = CompiledKernel(ss.artifact, "cuda")  # never loaded: no launcher is built here
    op = register_torch_op(cuda_kernel, "wavec_test::scale_shift_cuda_backend")
    x, y, bias = _ss_inputs(4, 256, seed=7)
    _close(op(x, y, bias), x.double() * y.double() + bias.double()[None, :], 1e-6)
    assert cuda_kernel._impl is None
