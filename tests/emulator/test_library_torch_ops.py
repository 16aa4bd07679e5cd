"""The library's PyTorch operators (``torch.ops.wavec.*``, ``wavec/kernels/torch_ops.py``) on CPU tensors
(the emulator): results against torch, ``torch.library.opcheck`` (schema, fake tensors, mutation
declarations) and ``torch.compile(fullgraph=True)`` through them."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
import wavec.kernels.torch_ops  # noqa: F401 - registers torch.ops.wavec.*
from tests import dyn_kernels as dk


def _inputs():
    x = torch.randn(37, 48, dtype=torch.float16)
    i = torch.randint(0, 37, (21,), dtype=torch.int32)
    return x, i


def test_index_select_and_embedding_ops_match_torch() -> None:
    x, i = _inputs()
    out = torch.ops.wavec.index_select(x, i)
    assert torch.equal(out, x[i.long()])
    ids = torch.randint(0, 37, (3, 5), dtype=torch.int64)
    assert torch.equal(torch.ops.wavec.embedding(ids, x), torch.nn.functional.embedding(ids, x))


def test_index_add_op_mutates_out_in_place() -> None:
    out, src = torch.randn(9, 32), torch.randn(40, 32)
    j = torch.randint(0, 9, (40,), dtype=torch.int32)
    want = out.double().index_add_(0, j.long(), src.double())
    assert torch.ops.wavec.index_add_(out, j, src) is None
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("op", ["index_select", "embedding", "index_add_"])
def test_opcheck(op: str) -> None:
    x, i = _inputs()
    args = {
        "index_select": (x, i),
        "embedding": (i.reshape(3, 7), x),
        "index_add_": (torch.zeros(37, 16), i, torch.randn(21, 16)),
    }[op]
    torch.library.opcheck(getattr(torch.ops.wavec, op).default, args)


def test_compile_traces_through_the_op() -> None:
    x, i = _inputs()
    f = torch.compile(lambda x, i: torch.ops.wavec.index_select(x, i).float() * 2, fullgraph=True, backend="eager")
    assert torch.equal(f(x, i), x[i.long()].float() * 2)


def test_bad_argument_is_a_wavec_error_naming_it() -> None:
    x, _ = _inputs()
    with pytest.raises(wc.WavecError, match="index must be a 1-D int32 or int64 tensor"):
        torch.ops.wavec.index_select(x, torch.zeros(3))


def test_paged_attention_op_and_opcheck() -> None:
    q, kc, vc, bt, lens = dk.paged_kv_inputs([2, 40], 2, 4, 2, 64, 16, wc.f16)
    out = torch.ops.wavec.paged_attention(q, kc, vc, bt, lens, 0.25)
    want = dk.reference_paged_attention(q, kc, vc, bt, lens, scale=0.25)
    torch.testing.assert_close(out.float(), want, rtol=2e-3, atol=2e-3)
    torch.library.opcheck(torch.ops.wavec.paged_attention.default, (q, kc, vc, bt, lens, None))


def test_decode_attention_op_and_opcheck() -> None:
    q, k, v, lens = dk.dense_kv_inputs([3, 40], 2, 4, 2, 64, wc.f16)
    out = torch.ops.wavec.decode_attention(q, k, v, lens, 0.25, 2)
    want = dk.reference_decode_attention(q, k, v, lens, scale=0.25)
    torch.testing.assert_close(out.float(), want, rtol=2e-3, atol=2e-3)
    torch.library.opcheck(torch.ops.wavec.decode_attention.default, (q, k, v, lens, None, 3))
    torch.library.opcheck(
        torch.ops.wavec.decode_attention.default, (q, k[:, :3].contiguous(), v[:, :3].contiguous(), None, None, None)
    )


@pytest.mark.parametrize("dtype, top_k, t, m", [(torch.float16, 2, 23, 40), (torch.bfloat16, 1, 70, 70)])
def test_gather_scatter_matmul(dtype, top_k: int, t: int, m: int) -> None:
    """Gathered rows, weighted, scattered with atomics (repeated tokens accumulate), against torch in f64;
    the library function and the operator."""
    from wavec.kernels import gather_scatter_matmul

    x, w = torch.randn(t, 64, dtype=dtype), torch.randn(48, 64, dtype=dtype)
    ids = torch.randint(0, top_k * t, (m,), dtype=torch.int32)
    weights, out = torch.rand(m), torch.randn(t, 48)
    rows = (ids // top_k).long()
    want = out.double().index_add_(0, rows, weights.double()[:, None] * (x[rows].double() @ w.double().T))
    got = gather_scatter_matmul(x, ids, w, weights, out.clone(), top_k=top_k)
    tol = 2e-3 if dtype == torch.float16 else 1e-2
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)
    again = out.clone()
    torch.ops.wavec.gather_scatter_matmul(x, ids, w, weights, again, top_k)
    torch.testing.assert_close(again.double(), want, rtol=tol, atol=tol)


def test_gather_scatter_matmul_bad_arguments() -> None:
    from wavec.kernels import gather_scatter_matmul

    x, w = torch.randn(8, 64, dtype=torch.float16), torch.randn(16, 64, dtype=torch.float16)
    ids, weights, out = torch.zeros(4, dtype=torch.int32), torch.ones(4), torch.zeros(8, 16)
    with pytest.raises(wc.WavecError, match="ids must be a 1-D int32 tensor"):
        gather_scatter_matmul(x, ids.long(), w, weights, out)
    with pytest.raises(wc.WavecError, match=r"out must be float32 \[8, 16\]"):
        gather_scatter_matmul(x, ids, w, weights, out.half())
    with pytest.raises(wc.WavecError, match="w must be torch.float16"):
        gather_scatter_matmul(x, ids, w.float(), weights, out)


@pytest.mark.parametrize("op", ["softmax", "rms_norm", "layer_norm"])
def test_row_ops_opcheck_and_compile(op: str) -> None:
    x = torch.randn(2, 5, 40)
    args = {"softmax": (x, -1), "rms_norm": (x, torch.randn(40), 1e-6), "layer_norm": (x, None, torch.randn(40))}[op]
    fn = getattr(torch.ops.wavec, op)
    want = {
        "softmax": lambda: torch.softmax(x, -1),
        "rms_norm": lambda: torch.nn.functional.rms_norm(x, (40,), args[1], 1e-6),
        "layer_norm": lambda: torch.nn.functional.layer_norm(x, (40,), None, args[2]),
    }[op]()
    torch.testing.assert_close(fn(*args), want, rtol=2e-6, atol=2e-6)
    torch.library.opcheck(fn.default, args)
    compiled = torch.compile(lambda *a: fn(*a) * 2, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(*args), want * 2, rtol=2e-6, atol=4e-6)
