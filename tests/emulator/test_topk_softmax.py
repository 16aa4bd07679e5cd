"""wavec.kernels.topk_softmax on the emulator against softmax + torch.topk (vLLM's contract): every E of
the supported set, f32/f16/bf16 logits, k from 1 to 16 (multiples of 4 and not), renormalized or not,
token counts that leave a partial workgroup, ties; every output written; bad arguments named; the torch
operator on CPU tensors."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from wavec.kernels import moe_routing as mr


@pytest.mark.parametrize("experts", [8, 16, 32, 64, 128, 256, 512])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_expert_count(experts: int, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(experts)
    x = (torch.randn(37, experts, generator=gen) * 3).to(dtype)
    k = min(8, experts)
    w, i = mr.topk_softmax(x, k, renormalize=experts % 64 == 0, backend="emulator")
    mr.check_routing(x, k, experts % 64 == 0, w, i)


@pytest.mark.parametrize("k", [1, 2, 6, 16])
@pytest.mark.parametrize("renormalize", [False, True])
def test_k_and_renormalize(k: int, renormalize: bool) -> None:
    x = torch.randn(70, 128, generator=torch.Generator().manual_seed(k)).half()
    w, i = mr.topk_softmax(x, k, renormalize, backend="emulator")
    mr.check_routing(x, k, renormalize, w, i)


def test_ties_take_the_lower_expert() -> None:
    """Equal logits give equal probabilities: the lower experts first (torch.topk's order)."""
    x = torch.randint(-2, 3, (33, 64), generator=torch.Generator().manual_seed(5)).float()
    x[0] = 1.0
    w, i = mr.topk_softmax(x, 8, backend="emulator")
    mr.check_routing(x, 8, False, w, i)
    assert i[0].tolist() == list(range(8))
    for t in range(33):
        p = torch.softmax(x[t], -1)
        for j in range(7):
            if p[i[t, j]] == p[i[t, j + 1]]:
                assert i[t, j] < i[t, j + 1]


def test_torch_operator_on_cpu() -> None:
    from wavec.kernels import torch_ops  # noqa: F401 - registers torch.ops.wavec.*

    x = torch.randn(5, 32, generator=torch.Generator().manual_seed(9))
    w, i = torch.ops.wavec.topk_softmax(x, 4, True)
    mr.check_routing(x, 4, True, w, i)
    assert wc.kernels.topk_softmax is mr.topk_softmax


@pytest.mark.parametrize(
    "args, match",
    [
        ((torch.randn(4, 64, dtype=torch.float64), 2), "gating_logits must be one of"),
        ((torch.randn(64), 2), "gating_logits must be a 2-D tensor"),
        ((torch.randn(4, 48), 2), "48 experts; E must be"),
        ((torch.randn(4, 64), 0), "k must be an int in 1..64"),
        ((torch.randn(4, 2), 2), "k = 2 rounded up to a multiple of 4 exceeds E = 2"),
        ((torch.randn(4, 64), 2, 1), "renormalize must be a bool"),
    ],
)
def test_bad_arguments_name_the_argument(args: tuple, match: str) -> None:
    with pytest.raises(wc.WavecError, match=match):
        mr.topk_softmax(*args, backend="emulator")
