"""Scalar kernel arguments (``wc.Scalar[f32]``, ``[i32]``, ``[i64]``, ``[f16]``, ``[bf16]``) on the emulator:
one binary serves every value, values are validated with errors naming the argument, and torch operators
take them."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests import scalar_kernels as sk
from wavec import Memory
from wavec.errors import ArgumentError
from wavec.kernels.elementwise import BLOCK_M, BLOCK_N, M, N, rowwise_constraints

SUBS = {BLOCK_M: 2, BLOCK_N: 128}


def _scaled_copy():
    @wc.wave(rowwise_constraints(32, 4))
    def scaled_copy(
        src: Memory[M, N, wc.f32], dst: Memory[M, N, wc.f32], scale: wc.Scalar[wc.f32], shift: wc.Scalar[wc.i32]
    ):
        x = wc.read(src)
        wc.write(x * scale + wc.cast(shift, wc.f32), dst)

    return scaled_copy


@pytest.fixture(scope="module")
def kernel():
    return wc.compile(_scaled_copy(), SUBS, backend="emulator", cache=False)


def test_two_scales_one_binary(kernel) -> None:
    x = torch.randn(5, 200)
    for scale, shift in ((2.5, 3), (-0.125, -7)):
        out = torch.full_like(x, float("nan"))
        kernel(x, out, scale, shift)
        torch.testing.assert_close(out, x * scale + shift, rtol=1e-6, atol=1e-6)
    out = kernel(x, torch.tensor(0.5), torch.tensor(2, dtype=torch.int32))  # inputs only, 0-d tensors
    torch.testing.assert_close(out, x * 0.5 + 2, rtol=1e-6, atol=1e-6)


def test_value_not_in_cache_key(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("WAVEC_CACHE_DIR", str(tmp_path))
    a = wc.compile(_scaled_copy(), SUBS, backend="emulator")
    b = wc.compile(_scaled_copy(), SUBS, backend="emulator")
    assert b.stats.cached and a.artifact == b.artifact
    assert a.metadata.scalars == (("scale", "f32"), ("shift", "i32"))
    assert "hal.interface.constant.load" in a.mlir and "arith.bitcast" in a.mlir


@pytest.mark.parametrize(
    "scale,shift,arg,needle",
    [
        ("a", 1, "scale", "got str"),
        (torch.ones(2), 1, "scale", "shape (2,)"),
        (True, 1, "scale", "got bool"),
        (1.0, 1.5, "shift", "got float"),
        (1.0, 2**31, "shift", "does not fit in int32"),
        (1e40, 1, "scale", "does not fit in float32"),
        (1.0, torch.tensor(1.0), "shift", "dtype torch.float32"),
    ],
)
def test_bad_scalars(kernel, scale, shift, arg, needle) -> None:
    x = torch.randn(2, 128)
    with pytest.raises(ArgumentError) as e:
        kernel(x, torch.empty_like(x), scale, shift)
    msg = str(e.value)
    assert f"argument {arg!r}" in msg and needle in msg and "test_scalars.py" in msg


def test_missing_scalar_is_named(kernel) -> None:
    x = torch.randn(2, 128)
    with pytest.raises(ArgumentError, match="shift"):
        kernel(x, 1.0)


def test_scalar_annotation_dtype() -> None:
    with pytest.raises(TypeError, match="wc.f32, wc.i32, wc.i64, wc.f16 or wc.bf16, got i8"):
        wc.Scalar[wc.i8]


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32", "i32", "i64"])
def test_scalar_of_each_dtype(dtype: str) -> None:
    """Half-precision scalars arrive as their bits (the low half of the 32-bit constant), an i64 as two
    words: the product and sum equal torch's (the scalars converted as torch converts them; integers
    wrap alike), on fresh random inputs and scalars; the prepared launch packs the same."""
    kern = wc.compile(sk.make_scale(dtype), sk.SUBS, backend="emulator", cache=False)
    gen = torch.Generator().manual_seed(len(dtype))
    x = sk.random_input(dtype, (5, 300), gen)
    launch = kern.prepare(x, torch.empty_like(x), 1, 1)  # binding order: tensors, then scalars
    for scale, shift in sk.draws(dtype, gen):
        out = torch.full_like(x, 77)
        kern(scale, x, shift, out)
        assert torch.equal(out, sk.reference(x, scale, shift)), (scale, shift)
        out.fill_(77)
        launch(x, out, scale, shift)
        assert torch.equal(out, sk.reference(x, scale, shift)), ("prepared", scale, shift)
    out = kern(torch.tensor(2, dtype=x.dtype), x, torch.tensor(1, dtype=x.dtype))  # 0-d tensors, inputs only
    assert torch.equal(out, x * 2 + 1)


@pytest.mark.parametrize(
    "dtype,scale,needle",
    [
        ("f16", 65520.0, "65520.0 does not fit in float16"),
        ("bf16", 3.4e38, "does not fit in bfloat16"),
        ("f16", "2", "expected a f16 scalar (a Python number or a 0-d tensor), got str"),
        ("bf16", torch.ones(3), "got a tensor of shape (3,)"),
        ("f16", None, "got NoneType"),
        ("i64", 2**63, "9223372036854775808 does not fit in int64"),
        ("i64", 1.0, "expected a i64 scalar (a Python int or a 0-d integer tensor), got float"),
        ("i64", torch.tensor(1.5), "expected an integer (i64) scalar, got a 0-d tensor of dtype torch.float32"),
    ],
)
def test_bad_scalar_values_name_the_argument(dtype: str, scale, needle: str) -> None:
    kern = wc.compile(sk.make_scale(dtype), sk.SUBS, backend="emulator", cache=False)
    x = sk.random_input(dtype, (2, 128), torch.Generator().manual_seed(0))
    with pytest.raises(ArgumentError) as e:
        kern(scale, x, 1, torch.empty_like(x))
    assert "argument 'scale'" in str(e.value) and needle in str(e.value)


def test_torch_op_with_scalars(kernel) -> None:
    op = wc.register_torch_op(kernel, "wavec_test::scaled_copy")
    x = torch.randn(3, 128)
    torch.testing.assert_close(op(x, 3.0, 1), x * 3 + 1, rtol=1e-6, atol=1e-6)
    out = torch.empty_like(x)
    torch.ops.wavec_test.scaled_copy_out(x, out, -1.0, 0)
    torch.testing.assert_close(out, -x, rtol=1e-6, atol=1e-6)
