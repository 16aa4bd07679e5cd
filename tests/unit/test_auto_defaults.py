"""The measured defaults of the attention entry points: ``attention(warp_specialize=None)`` warp-specializes
only where ``attention_tiles.ws_default`` says it was faster, and ``decode_attention(mma=None)`` takes the
wgmma split kernel only where ``decode_variants.resolve`` does (an sm_90 GPU, ``AUTO_GROUPS`` KV-head groups,
a plain call, TMA-legal caches).  CPU only: the GPU is stood in for by a shape-only query."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
import torch

from wavec.kernels import decode_variants as dv
from wavec.kernels.attention_tiles import WS_AUTO, ws_default


@pytest.mark.parametrize(
    "head_dim, v_dim, seq_q, causal, mma, plain, expected",
    [
        (128, 128, 2048, False, "wgmma", True, True),
        (128, 128, 2047, False, "wgmma", True, False),
        (128, 128, 2048, "top_left", "wgmma", True, False),
        (128, 128, 4096, "top_left", "wgmma", True, True),
        (128, 128, 8192, False, "mma_sync", True, False),
        (128, 128, 8192, False, "wgmma", False, False),  # a window, soft-cap, ALiBi or explicit tile
        (64, 64, 16384, False, "wgmma", True, False),  # d64 ran slower warp-specialized
        (128, 64, 8192, False, "wgmma", True, False),  # V's head dim differs: not timed
    ],
)
def test_ws_default(head_dim, v_dim, seq_q, causal, mma, plain, expected) -> None:
    assert ws_default(head_dim, v_dim, seq_q, causal, mma, plain) is expected


def test_ws_auto_thresholds_are_ordered() -> None:
    for full, causal in WS_AUTO.values():
        assert 0 < full <= causal


@dataclass
class _Query:
    """The attributes ``resolve`` reads of q."""

    shape: tuple
    is_cuda: bool = True


def _caches(batch: int, kv_heads: int, pitch: int = 128) -> dict:
    k = torch.empty(batch, 64, kv_heads, pitch, dtype=torch.bfloat16)[..., :128]
    return {"k": k, "v": k}


@pytest.fixture
def hopper(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dv, "_capability", lambda q: (9, 0))


AUTO = dv.Variant(mma=None)


@pytest.mark.parametrize("batch, expected", [(1, "mma_sync"), (4, "wgmma"), (16, "wgmma"), (17, "mma_sync")])
def test_decode_resolve_by_groups(hopper, batch, expected) -> None:
    q = _Query((batch, 1, 32, 128))
    assert dv.resolve(AUTO, q, _caches(batch, 8), 8, True, None).mma == expected


def test_decode_resolve_keeps_the_default_elsewhere(hopper, monkeypatch: pytest.MonkeyPatch) -> None:
    q, caches = _Query((8, 1, 32, 128)), _caches(8, 8)
    assert dv.resolve(AUTO, q, caches, 8, True, "cuda").mma == "wgmma"
    assert dv.resolve(AUTO, q, caches, 8, False, None).mma == "mma_sync"  # a config, ALiBi or one launch
    assert dv.resolve(AUTO, q, caches, 8, True, "emulator").mma == "mma_sync"
    assert dv.resolve(replace(AUTO, launch_bound=4), q, caches, 8, True, None).mma == "mma_sync"
    assert dv.resolve(AUTO, _Query((8, 1, 32, 128), is_cuda=False), caches, 8, True, None).mma == "mma_sync"
    assert dv.resolve(AUTO, _Query((8, 32, 32, 128)), caches, 8, True, None).mma == "mma_sync"  # 128 rows
    odd_pitch = _caches(8, 8, pitch=132)  # rows 264 bytes apart: no tensor map
    assert dv.resolve(AUTO, q, odd_pitch, 8, True, None).mma == "mma_sync"
    monkeypatch.setattr(dv, "_capability", lambda q: (8, 0))
    assert dv.resolve(AUTO, q, caches, 8, True, None).mma == "mma_sync"


def test_decode_resolve_leaves_an_explicit_choice() -> None:
    for mma in dv.MMAS:
        variant = dv.Variant(mma=mma)
        assert dv.resolve(variant, _Query((8, 1, 32, 128)), _caches(8, 8), 8, True, None) is variant
