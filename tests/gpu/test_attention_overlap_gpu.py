"""GPU tier: intra-warpgroup overlap (``intra_wg_overlap=True``: the next key tile's Q Kᵀ on the tensor cores
during this tile's softmax) on an sm_90 GPU.  The rotated kernel runs into a NaN-prefilled output, equals the
unrotated kernel of the same tile and stages bit for bit (the rotation moves instructions, not arithmetic),
today's default schedule within the dtype's tolerance, and matches SDPA / the explicit-mask reference in f32
at real and odd sizes, every mask mode, GQA, both layouts, f16 and bf16, d64 and d128, one and two
warpgroups."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests.attention_ref import reference, visible
from wavec.kernels import attention as at

pytestmark = pytest.mark.gpu
TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}
TOL = {"f16": 3e-3, "bf16": 2e-2}


def _needs_sm90() -> None:
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma + TMA needs an sm_90 GPU (H100/H200)")


def _run(q, k, v, *, causal, window, softcap, layout, config, overlap: bool, scale: float) -> torch.Tensor:
    """The kernel ``attention()`` runs for these options, launched into a NaN-prefilled output."""
    sq, d = q.shape[1 if layout == "bshd" else 2], q.shape[-1]
    compiled = "top_left" if causal and sq == k.shape[1 if layout == "bshd" else 2] else causal
    subs, groups = at.attention_config(d, sq, config, "wgmma", compiled, intra_wg_overlap=overlap)
    dtype = wc.bf16 if q.dtype == torch.bfloat16 else wc.f16
    kernel = at._kernel(
        dtype, layout, compiled, subs, groups, None, "wgmma", "auto", window, softcap, intra_wg_overlap=overlap
    )
    out = torch.full((*q.shape[:-1], v.shape[-1]), float("nan"), device="cuda", dtype=q.dtype)
    kernel(q, k, v, out, scale)
    torch.cuda.synchronize()
    assert not out.isnan().any(), "some output elements were not written (or are NaN)"
    return out


def _check(b, h, kvh, sq, skv, d, dtype, layout, causal, window=(-1, -1), softcap=0.0, config=None) -> None:
    t = TORCH[dtype]
    q = torch.randn(b, h, sq, d, device="cuda", dtype=t)
    k, v = (torch.randn(b, kvh, skv, d, device="cuda", dtype=t) for _ in range(2))
    lay = (lambda x: x) if layout == "bhsd" else (lambda x: x.transpose(1, 2).contiguous())
    opts = dict(causal=causal, window=window, softcap=softcap, layout=layout, config=config, scale=0.1)
    rotated = _run(lay(q), lay(k), lay(v), overlap=True, **opts)
    # the same tile and stages without the rotation (config None: the heuristic's tile at 3 stages)
    base_cfg = config if config is None or len(config) == 4 else (*config, at.OVERLAP_STAGES)
    if config is None:
        subs, groups = at.attention_config(d, sq, None, "wgmma", causal, intra_wg_overlap=True)
        base_cfg = (subs[at.BLOCK_M], subs[at.BLOCK_N], groups, subs[at.NUM_STAGES])
    plain = _run(lay(q), lay(k), lay(v), overlap=False, **{**opts, "config": base_cfg})
    assert torch.equal(rotated, plain), (rotated.float() - plain.float()).abs().max()
    api = at.attention(lay(q), lay(k), lay(v), mma="wgmma", intra_wg_overlap=True, **opts)
    assert torch.equal(api, rotated)
    current = at.attention(lay(q), lay(k), lay(v), mma="wgmma", **opts)  # today's default schedule (2 stages)
    torch.testing.assert_close(rotated, current, rtol=TOL[dtype], atol=TOL[dtype])
    align = "top_left" if causal is True else causal or None
    ref = reference(q, k, v, visible(sq, skv, align, *window, device="cuda"), 0.1, softcap)
    got = rotated if layout == "bhsd" else rotated.transpose(1, 2)
    torch.testing.assert_close(got.float(), ref, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype,layout", [("f16", "bhsd"), ("bf16", "bshd")])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("config", [None, (64, 64, 1), (128, 64, 2), (128, 128, 2)])
@pytest.mark.parametrize("b,h,kvh,sq,skv", [(1, 16, 4, 2048, 2048), (3, 8, 2, 777, 1333), (2, 4, 4, 64, 100)])
def test_overlap_equals_unrotated_and_sdpa(dtype, layout, causal, d, config, b, h, kvh, sq, skv) -> None:
    _needs_sm90()
    _check(b, h, kvh, sq, skv, d, dtype, layout, "top_left" if causal and sq != skv else causal, config=config)


MASKS = [  # causal, window, softcap, (B, H, KVH, Sq, Skv)
    ("bottom_right", (-1, -1), 0.0, (2, 8, 2, 777, 1333)),  # chunked prefill on a cache
    ("bottom_right", (-1, -1), 0.0, (1, 8, 8, 1333, 777)),  # 556 queries see no key: 0
    (False, (256, 0), 0.0, (1, 8, 2, 1500, 1500)),  # a window: three loops
    ("bottom_right", (1000, -1), 30.0, (2, 4, 2, 1100, 3000)),  # sliding-window causal with a soft-cap
    (False, (-1, -1), 0.0, (1, 4, 1, 100, 20)),  # fewer keys than a tile: the full loop runs no iteration
]


@pytest.mark.parametrize("causal,window,softcap,shape", MASKS)
@pytest.mark.parametrize("d", [64, 128])
def test_overlap_masks(causal, window, softcap, shape, d) -> None:
    _needs_sm90()
    _check(*shape, d, "bf16", "bhsd", causal, window, softcap)
