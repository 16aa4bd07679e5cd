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
