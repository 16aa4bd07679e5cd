"""GPU tier: attention's masks (causal top-left / bottom-right, sliding windows, soft-cap) and head dims
(64-256, Dv != D) at real, odd sizes against SDPA in f32 with the mask built in torch
(``tests/attention_ref.py``), outputs NaN-prefilled (every element written), on mma.sync and (sm_90) wgmma."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests.attention_ref import reference, visible
from wavec.kernels import attention as at

pytestmark = pytest.mark.gpu
TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}
TOL = {"f16": 3e-3, "bf16": 2e-2}
MMAS = ["mma_sync", "wgmma"]


def _skip_unless_runs(mma: str) -> None:
    if mma == "wgmma" and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma needs an sm_90 GPU (H100/H200)")


def _inputs(b, h, kvh, sq, skv, d, dv, dtype):
    t = TORCH[dtype]
    return (
        torch.randn(b, h, sq, d, device="cuda", dtype=t),
        torch.randn(b, kvh, skv, d, device="cuda", dtype=t),
        torch.randn(b, kvh, skv, dv, device="cuda", dtype=t),
    )


def run_and_check(q, k, v, *, causal, window=(-1, -1), softcap=0.0, layout="bhsd", mma, config=None, scale=0.1):
    """The kernel ``attention()`` picks, run into a NaN-prefilled output (q, k, v given BHSD, passed in
    ``layout``), against the explicit-mask reference; ``attention()`` itself gives the same bits."""
    dtype = "bf16" if q.dtype == torch.bfloat16 else "f16"
    lay = (lambda x: x) if layout == "bhsd" else (lambda x: x.transpose(1, 2).contiguous())
    qo, ko, vo = lay(q), lay(k), lay(v)
    sq, skv, d, dv = q.shape[2], k.shape[2], q.shape[-1], v.shape[-1]
    compiled = "top_left" if causal and sq == skv else causal  # what attention() runs then
    subs, waves = at.attention_config(d, sq, config, mma, compiled, dv)
    wc_dtype = wc.bf16 if dtype == "bf16" else wc.f16
    kernel = at._kernel(wc_dtype, layout, compiled, subs, waves, None, mma, "auto", window, softcap)
    out = torch.full((*qo.shape[:-1], dv), float("nan"), device="cuda", dtype=q.dtype)
    kernel(qo, ko, vo, out, scale)
    api = at.attention(qo, ko, vo, causal=causal, window=window, softcap=softcap, scale=scale, layout=layout,
                       mma=mma, config=config)  # fmt: skip
    torch.cuda.synchronize()
    assert not out.isnan().any(), "some output elements were not written (or are NaN)"
    assert torch.equal(api, out)
    align = "top_left" if causal is True else causal or None
    ref = reference(q, k, v, visible(sq, skv, align, *window, device="cuda"), scale, softcap)
    got = out if layout == "bhsd" else out.transpose(1, 2)
    torch.testing.assert_close(got.float(), ref, rtol=TOL[dtype], atol=TOL[dtype])


MASKS = [  # causal, window, softcap, (B, H, KVH, Sq, Skv)
    ("bottom_right", (-1, -1), 0.0, (2, 8, 2, 777, 1333)),  # chunked prefill on a cache
    ("bottom_right", (-1, -1), 0.0, (1, 8, 8, 1333, 777)),  # 556 queries see no key: 0
    ("bottom_right", (-1, -1), 0.0, (3, 32, 8, 16, 4099)),  # speculative decode: 16 new tokens
    ("top_left", (-1, -1), 0.0, (2, 8, 2, 777, 1333)),
    (True, (-1, -1), 0.0, (1, 16, 4, 1000, 1000)),
    (False, (300, 100), 0.0, (2, 8, 2, 777, 1333)),  # a window around the bottom-right diagonal
    ("bottom_right", (511, -1), 0.0, (1, 16, 2, 2047, 4097)),  # sliding-window causal (Mistral-style)
    ("top_left", (128, -1), 0.0, (2, 4, 4, 999, 999)),
    (False, (0, 0), 0.0, (1, 4, 1, 333, 333)),  # each query its own key only
    (False, (-1, -1), 50.0, (2, 8, 2, 777, 1333)),  # soft-cap (Gemma 2)
    ("bottom_right", (255, -1), 30.0, (1, 8, 4, 1000, 3001)),  # soft-cap + window + causal
]


@pytest.mark.parametrize("mma", MMAS)
@pytest.mark.parametrize("dtype,layout", [("f16", "bhsd"), ("bf16", "bshd")])
@pytest.mark.parametrize(
    "causal,window,softcap,shape",
    MASKS,
    ids=[f"{m[0]}-w{m[1][0]}_{m[1][1]}-cap{m[2]:g}-{m[3][3]}x{m[3][4]}" for m in MASKS],
)
def test_masks(causal, window, softcap, shape, dtype, layout, mma) -> None:
    _skip_unless_runs(mma)
    b, h, kvh, sq, skv = shape
    q, k, v = _inputs(b, h, kvh, sq, skv, 128, 128, dtype)
    run_and_check(q, k, v, causal=causal, window=window, softcap=softcap, layout=layout, mma=mma)


DIMS = [(64, 64), (80, 80), (96, 96), (128, 128), (192, 192), (256, 256), (192, 128)]


@pytest.mark.parametrize("mma", MMAS)
@pytest.mark.parametrize("causal", [False, "bottom_right"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("d,dv", DIMS, ids=[f"d{d}-dv{dv}" for d, dv in DIMS])
def test_head_dims(d, dv, dtype, causal, mma) -> None:
    _skip_unless_runs(mma)
    q, k, v = _inputs(2, 8, 2, 555, 1111, d, dv, dtype)
    run_and_check(q, k, v, causal=causal, mma=mma)


@pytest.mark.parametrize("d", [64, 96, 192, 256])
@pytest.mark.parametrize("sq", [1, 64])
def test_head_dims_short_queries(d, sq) -> None:
    """Decode-like query counts take the short tiles (``_SHORT`` / ``_WGMMA_SHORT``)."""
    for mma in MMAS:
        if mma == "wgmma" and torch.cuda.get_device_capability() != (9, 0):
            continue
        q, k, v = _inputs(2, 8, 8, sq, 3000, d, d, "f16")
        run_and_check(q, k, v, causal="bottom_right", window=(1000, -1), mma=mma)


CANDIDATES = [(mma, d, c) for mma, table in (("mma_sync", at.CONFIGS), ("wgmma", at.WGMMA_CONFIGS))
              for d in (80, 192, 256) for c in table[d]]  # fmt: skip


@pytest.mark.parametrize(
    "mma,d,config", CANDIDATES, ids=[f"{m}-d{d}-{'x'.join(map(str, c))}" for m, d, c in CANDIDATES]
)
def test_new_head_dim_tiles(mma, d, config) -> None:
    """Every candidate tile of the new head dims (what a sweep would time), a window and ragged lengths."""
    _skip_unless_runs(mma)
    q, k, v = _inputs(1, 8, 4, 700, 1500, d, d, "bf16")
    run_and_check(q, k, v, causal="bottom_right", window=(300, -1), mma=mma, config=config)
