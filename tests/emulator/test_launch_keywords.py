"""Launch arguments by keyword (``kern(a=a, b=b, c=c)``) and scalar arguments anywhere in the kernel's
signature, on the emulator: both calling conventions, every binding rule kept, and each bad call a
wavec ``ArgumentError`` naming the argument."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from wavec import Memory
from wavec.errors import ArgumentError
from wavec.kernels.elementwise import BLOCK_M, BLOCK_N, M, N, rowwise_constraints

SUBS = {BLOCK_M: 2, BLOCK_N: 128}


@pytest.fixture(scope="module")
def axpb():
    """``out = a * scale + b + shift``: scalars first and between the memories, the output not last."""

    @wc.wave(rowwise_constraints(32, 4))
    def axpb(
        scale: wc.Scalar[wc.f32],
        a: Memory[M, N, wc.f32],
        out: Memory[M, N, wc.f32],
        shift: wc.Scalar[wc.i32],
        b: Memory[M, N, wc.f32],
    ):
        wc.write(wc.read(a) * scale + wc.read(b) + wc.cast(shift, wc.f32), out)

    return wc.compile(axpb, SUBS, backend="emulator", cache=False)


def _inputs():
    a, b = torch.randn(5, 200), torch.randn(5, 200)
    scale, shift = float(torch.randn(()).item()), int(torch.randint(-9, 9, ()).item())
    return a, b, scale, shift, a * scale + b + shift


def test_metadata_keeps_the_def_order(axpb) -> None:
    assert axpb.metadata.signature == ("scale", "a", "out", "shift", "b")
    assert [s.name for s in axpb.metadata.args] == ["a", "out", "b"]  # bindings: tensors first


def test_positional_in_def_order(axpb) -> None:
    a, b, scale, shift, want = _inputs()
    out = torch.full_like(a, float("nan"))
    assert axpb(scale, a, out, shift, b) is None
    torch.testing.assert_close(out, want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(axpb(scale, a, shift, b), want, rtol=1e-6, atol=1e-6)  # inputs only


def test_keywords_both_conventions(axpb) -> None:
    a, b, scale, shift, want = _inputs()
    out = torch.full_like(a, float("nan"))
    assert axpb(b=b, out=out, shift=shift, a=a, scale=scale) is None
    torch.testing.assert_close(out, want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(axpb(shift=shift, b=b, a=a, scale=scale), want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(axpb(scale, a, b=b, shift=shift), want, rtol=1e-6, atol=1e-6)  # mixed
    out = torch.full_like(a, float("nan"))
    axpb(scale, a, out, b=b, shift=shift)
    torch.testing.assert_close(out, want, rtol=1e-6, atol=1e-6)


def test_keywords_on_a_memories_only_kernel() -> None:
    @wc.wave(rowwise_constraints(32, 4))
    def add(x: Memory[M, N, wc.f32], y: Memory[M, N, wc.f32], z: Memory[M, N, wc.f32]):
        wc.write(wc.read(x) + wc.read(y), z)

    k = wc.compile(add, SUBS, backend="emulator", cache=False)
    x, y = torch.randn(3, 132), torch.randn(3, 132)
    z = torch.full_like(x, float("nan"))
    k(y=y, z=z, x=x)
    torch.testing.assert_close(z, x + y)
    torch.testing.assert_close(k(x, y=y), x + y)
    with pytest.raises(ArgumentError, match="argument 'y'.*dimension 1"):
        k(x=x, y=torch.randn(3, 136))


@pytest.mark.parametrize(
    "call,arg,needle",
    [
        (lambda k, a, b: k(1.0, a, 2, b, bias=a), "bias", "unexpected keyword argument"),
        (lambda k, a, b: k(1.0, a, 2, b, a=a), "a", "given twice"),
        (lambda k, a, b: k(scale=1.0, a=a, shift=2), "b", "missing: pass the inputs"),
        (lambda k, a, b: k(1.0, a, shift=2, b=b, out=torch.empty(0)), "out", "expected rank 2"),
        (lambda k, a, b: k(scale=1.0, a=a, b=b, shift=2.5), "shift", "got float"),
        (lambda k, a, b: k(a=1.0, scale=a, b=b, shift=2), "a", "expected a torch.Tensor of dtype f32, got float"),
        (lambda k, a, b: k(a=a, b=b, out=torch.empty_like(a), shift=2), "scale", "missing: pass all arguments"),
        (lambda k, a, b: k(1.0, a, 2), "b", ""),
    ],
)
def test_bad_call_names_the_argument(axpb, call, arg, needle) -> None:
    a, b, *_ = _inputs()
    with pytest.raises(ArgumentError) as e:
        call(axpb, a, b)
    assert f"argument {arg!r}" in str(e.value) and needle in str(e.value)


def test_torch_op_of_a_kernel_with_scalars_first(axpb) -> None:
    """The operator's schema takes tensors, then scalars (binding order), whatever the ``def`` order."""
    op = wc.register_torch_op(axpb, "wavec_test::axpb_scalars_first")
    a, b, scale, shift, want = _inputs()
    torch.testing.assert_close(op(a, b, scale, shift), want, rtol=1e-6, atol=1e-6)
