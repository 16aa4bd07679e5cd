"""Attention masks and head dims on the emulator (race checker on) against SDPA in f32 with the mask built
in torch (``tests/attention_ref.py``): causal alignment top-left and bottom-right, sliding windows, the
logits soft-cap, head dims 80-256 and Dv != D, on mma.sync, wgmma (TMA and cp.async) and gfx942's MFMA.
Odd lengths, fewer and more queries than keys; outputs start as NaN behind a NaN guard band."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from tests.attention_ref import reference, visible
from wavec.errors import OptionError
from wavec.kernels import attention as at
from wavec.kernels.attention import BLOCK_M, BLOCK_N, DV, NUM_STAGES, D, attention, make_attention, mask_spec

TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}
TOL = {"f16": 2e-3, "bf16": 1.6e-2}
TARGET = {"mma_sync": None, "wgmma": "sm_90a", "mfma": "gfx942"}


def _inputs(b, h, kvh, sq, skv, d, dv, dtype):
    t = TORCH[dtype.name]
    return torch.randn(b, h, sq, d).to(t), torch.randn(b, kvh, skv, d).to(t), torch.randn(b, kvh, skv, dv).to(t)


def _align(causal) -> str | None:
    return "top_left" if causal is True else causal or None


def compile_masked(dtype, layout, causal, window, softcap, d, dv, mma, cfg, copy="auto"):
    bm, bn, waves = cfg
    subs = {BLOCK_M: bm, BLOCK_N: bn, NUM_STAGES: 2, D: d} | ({DV: dv} if dv != d else {})
    kernel = make_attention(
        dtype, layout, causal, waves, mma, async_copy=copy, window=window, softcap=softcap, v_dim=dv != d
    )
    return wc.compile(kernel, subs, backend="emulator", target=TARGET[mma], cache=False)


def run_checked(kernel, layout, q, k, v, scale, ref) -> torch.Tensor:
    """Run ``kernel`` on BHSD q, k, v in ``layout`` into a NaN-prefilled output followed by a NaN guard band;
    every output element written, nothing past it, the result within tolerance of ``ref``."""
    lay = (lambda x: x) if layout == "bhsd" else (lambda x: x.transpose(1, 2).contiguous())
    qo, ko, vo = lay(q), lay(k), lay(v)
    shape = (*qo.shape[:-1], v.shape[-1])
    n = int(torch.tensor(shape).prod())
    buf = torch.full((n + 256,), float("nan"), dtype=q.dtype)
    out = buf[:n].view(shape)
    kernel(qo, ko, vo, out, scale)
    assert buf[n:].isnan().all(), "wrote past the end of the output"
    out = out if layout == "bhsd" else out.transpose(1, 2)
    assert not out.isnan().any(), "some output elements were not written (or are NaN)"
    tol = TOL["bf16" if q.dtype == torch.bfloat16 else "f16"]
    torch.testing.assert_close(out.float(), ref, rtol=tol, atol=tol)
    return out


MASKS = [  # causal, window, softcap, layout, dtype, (B, H, KVH, Sq, Skv)
    ("bottom_right", (-1, -1), 0.0, "bhsd", wc.f16, (1, 2, 1, 40, 72)),  # a chunk at the end of a cache
    ("bottom_right", (-1, -1), 0.0, "bshd", wc.bf16, (1, 2, 2, 72, 40)),  # 32 queries see no key: 0
    ("top_left", (-1, -1), 0.0, "bshd", wc.f16, (2, 2, 1, 40, 72)),
    (True, (-1, -1), 0.0, "bhsd", wc.f16, (1, 2, 2, 70, 70)),
    (False, (5, 3), 0.0, "bhsd", wc.f16, (1, 2, 1, 50, 130)),  # a window around the bottom-right diagonal
    (False, (20, -1), 0.0, "bshd", wc.f16, (1, 2, 2, 70, 50)),  # left side only; rows that see nothing
    (False, (-1, 7), 0.0, "bhsd", wc.bf16, (1, 2, 1, 33, 90)),  # right side only
    ("bottom_right", (9, -1), 0.0, "bhsd", wc.f16, (1, 4, 2, 37, 90)),  # sliding-window causal (Mistral)
    ("top_left", (16, -1), 0.0, "bshd", wc.bf16, (1, 2, 1, 70, 70)),
    ("top_left", (3, -1), 0.0, "bhsd", wc.f16, (1, 2, 1, 50, 45)),
    (False, (-1, -1), 30.0, "bhsd", wc.f16, (1, 2, 1, 40, 72)),  # soft-cap, no mask (Gemma 2: 50)
    ("bottom_right", (9, -1), 0.5, "bshd", wc.bf16, (1, 2, 2, 37, 90)),  # a cap that bends every score
]


def _mask_id(c) -> str:
    return f"{c[0]}-w{c[1][0]}_{c[1][1]}-cap{c[2]:g}-{c[3]}-{c[4].name}-{'x'.join(map(str, c[5]))}"


@pytest.mark.parametrize("causal,window,softcap,layout,dtype,shape", MASKS, ids=[_mask_id(c) for c in MASKS])
def test_masks_mma_sync(causal, window, softcap, layout, dtype, shape) -> None:
    b, h, kvh, sq, skv = shape
    q, k, v = _inputs(b, h, kvh, sq, skv, 64, 64, dtype)
    ref = reference(q, k, v, visible(sq, skv, _align(causal), *window), 0.2, softcap)
    kernel = compile_masked(dtype, layout, causal, window, softcap, 64, 64, "mma_sync", (32, 32, 2))
    run_checked(kernel, layout, q, k, v, 0.2, ref)


WGMMA_MASKS = [MASKS[i] for i in (0, 1, 4, 5, 7, 11)]


@pytest.mark.parametrize("copy", ["auto", "cp.async"])
@pytest.mark.parametrize(
    "causal,window,softcap,layout,dtype,shape", WGMMA_MASKS, ids=[_mask_id(c) for c in WGMMA_MASKS]
)
def test_masks_wgmma(causal, window, softcap, layout, dtype, shape, copy) -> None:
    """wgmma, K and V by TMA ("auto" on sm_90a: one set of mbarriers per loop, three loops with a window)
    and by cp.async."""
    b, h, kvh, sq, skv = shape
    q, k, v = _inputs(b, h, kvh, sq, skv, 64, 64, dtype)
    ref = reference(q, k, v, visible(sq, skv, _align(causal), *window), 0.2, softcap)
    kernel = compile_masked(dtype, layout, causal, window, softcap, 64, 64, "wgmma", (64, 32, 1), copy)
    assert ("cp.async.bulk.tensor" in kernel.artifact.mlir) == (copy == "auto")
    run_checked(kernel, layout, q, k, v, 0.2, ref)


@pytest.mark.parametrize("causal,window,softcap", [("bottom_right", (-1, -1), 0.0), (False, (5, 3), 10.0)])
def test_masks_mfma_gfx942(causal, window, softcap) -> None:
    """gfx942's MFMA (waves of 64; P through shared memory), f16."""
    q, k, v = _inputs(1, 2, 1, 50, 130, 64, 64, wc.f16)
    ref = reference(q, k, v, visible(50, 130, _align(causal), *window), 0.2, softcap)
    kernel = compile_masked(wc.f16, "bhsd", causal, window, softcap, 64, 64, "mfma", (64, 32, 2))
    run_checked(kernel, "bhsd", q, k, v, 0.2, ref)


DIMS = [(80, 80), (96, 96), (192, 192), (256, 256), (192, 128), (64, 128)]
DIM_CFG = {"mma_sync": (32, 32, 2), "wgmma": (64, 32, 1), "mfma": (32, 32, 2)}


@pytest.mark.parametrize("mma", ["mma_sync", "wgmma"])
@pytest.mark.parametrize("causal", [False, "bottom_right"])
@pytest.mark.parametrize("d,dv", DIMS, ids=[f"d{d}-dv{dv}" for d, dv in DIMS])
def test_head_dims(d, dv, causal, mma) -> None:
    """Every head dim (and Dv != D, as MLA's 192/128), odd lengths with fewer queries than keys."""
    cfg = (64, 64, 1) if (mma, d) == ("wgmma", 80) else DIM_CFG[mma]  # d80: 64 rows per copy instruction
    dtype = wc.bf16 if d == 96 else wc.f16
    q, k, v = _inputs(1, 2, 1, 45, 77, d, dv, dtype)
    ref = reference(q, k, v, visible(45, 77, _align(causal)), 0.1)
    kernel = compile_masked(dtype, "bhsd" if d % 64 else "bshd", causal, (-1, -1), 0.0, d, dv, mma, cfg)
    run_checked(kernel, "bhsd" if d % 64 else "bshd", q, k, v, 0.1, ref)


@pytest.mark.parametrize("d", [80, 256])
def test_head_dims_mfma_gfx942(d) -> None:
    q, k, v = _inputs(1, 2, 2, 33, 50, d, d, wc.f16)
    cfg = (32, 64, 2) if d == 80 else (32, 32, 2)  # d80: 64 rows per copy instruction
    kernel = compile_masked(wc.f16, "bhsd", "top_left", (-1, -1), 0.0, d, d, "mfma", cfg)
    run_checked(kernel, "bhsd", q, k, v, 0.1, reference(q, k, v, visible(33, 50, "top_left"), 0.1))


def test_skipped_tiles_are_not_read() -> None:
    """Key tiles no query of a workgroup sees are skipped by the loop bounds: NaN in V there (any tile that
    ran would carry 0 · NaN = NaN into O) leaves O finite.  One query tile of 32 rows, 320 keys, causal
    bottom-right with a window of 40: keys 248..319 are visible, so the 7 tiles below key 224 never run;
    top-left causal: only the first tile runs."""
    q, k, v = _inputs(1, 2, 1, 32, 320, 64, 64, wc.f16)
    for causal, window, first, end in (("bottom_right", (40, -1), 224, 320), ("top_left", (-1, -1), 0, 32)):
        ok = visible(32, 320, causal, *window)
        assert not ok[:, :first].any() and not ok[:, end:].any()
        ref = reference(q, k, v, ok, 0.2)
        v_nan = v.clone()
        v_nan[:, :, :first] = float("nan")
        v_nan[:, :, end:] = float("nan")
        kernel = compile_masked(wc.f16, "bhsd", causal, window, 0.0, 64, 64, "mma_sync", (32, 32, 2))
        run_checked(kernel, "bhsd", q, k, v_nan, 0.2, ref)


def test_rows_that_see_nothing_are_zero() -> None:
    """Bottom-right with more queries than keys: the first Sq - Skv queries see no key and output exactly 0
    (flash-attn's convention), the rest match SDPA."""
    q, k, v = _inputs(1, 2, 1, 70, 30, 64, 64, wc.f16)
    out = attention(q, k, v, causal="bottom_right", backend="emulator", scale=0.2)
    assert (out[:, :, :40] == 0).all()
    ref = reference(q, k, v, visible(70, 30, "bottom_right"), 0.2)
    torch.testing.assert_close(out.float(), ref, rtol=2e-3, atol=2e-3)


def test_api_masks_and_head_dims() -> None:
    """``attention()`` with its heuristic: bottom-right + window + soft-cap, GQA, BSHD; Dv != D."""
    q, k, v = _inputs(1, 4, 2, 50, 150, 64, 64, wc.bf16)
    lay = [x.transpose(1, 2).contiguous() for x in (q, k, v)]
    out = attention(*lay, causal="bottom_right", window=(33, -1), softcap=20.0, layout="bshd", backend="emulator")
    ref = reference(q, k, v, visible(50, 150, "bottom_right", 33), softcap=20.0)
    torch.testing.assert_close(out.transpose(1, 2).float(), ref, rtol=1.6e-2, atol=1.6e-2)
    q, k, v = _inputs(1, 2, 1, 20, 40, 192, 128, wc.f16)
    out = attention(q, k, v, causal="top_left", backend="emulator")
    assert out.shape == (1, 2, 20, 128)
    torch.testing.assert_close(out.float(), reference(q, k, v, visible(20, 40, "top_left")), rtol=2e-3, atol=2e-3)


def test_causal_true_needs_equal_lengths() -> None:
    """causal=True means one mask only where Sq == Skv; else an OptionError asks for the alignment (never a
    silent top-left).  With equal lengths it equals both alignments."""
    q, k, v = _inputs(1, 2, 2, 24, 40, 64, 64, wc.f16)
    with pytest.raises(OptionError, match=r"causal: True is ambiguous with 24 queries and 40 keys.*bottom_right"):
        attention(q, k, v, causal=True, backend="emulator")
    q, k, v = _inputs(1, 2, 2, 40, 40, 64, 64, wc.f16)
    at._COMPILED.clear()
    outs = [attention(q, k, v, causal=c, backend="emulator") for c in (True, "top_left", "bottom_right")]
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
    assert [key[2] for key in at._COMPILED] == [at.MaskSpec("top_left", None, 0)]  # one kernel: top-left
    bottom_right = compile_masked(wc.f16, "bhsd", "bottom_right", (-1, -1), 0.0, 64, 64, "mma_sync", (32, 32, 2))
    ref = reference(q, k, v, visible(40, 40, "bottom_right"), 0.125)
    torch.testing.assert_close(run_checked(bottom_right, "bhsd", q, k, v, 0.125, ref), outs[0], rtol=2e-3, atol=2e-3)


def test_bad_arguments_name_themselves() -> None:
    q, k, v = _inputs(1, 2, 2, 8, 8, 64, 64, wc.f16)
    cases = [
        (dict(causal="bottom-right"), r"causal: expected one of"),
        (dict(window=(3,)), r"window: expected \(left, right\)"),
        (dict(window=(-2, 0)), r"window: expected \(left, right\)"),
        (dict(softcap=-1.0), r"softcap: expected a finite number >= 0"),
        (dict(softcap=float("inf")), r"softcap: expected a finite number >= 0"),
        (dict(mma="tcgen05"), r"mma: expected one of"),
        (dict(layout="sbhd"), r"layout: expected one of"),
    ]
    for kwargs, match in cases:
        with pytest.raises(OptionError, match=match):
            attention(q, k, v, backend="emulator", **kwargs)
    with pytest.raises(OptionError, match=r"k: head dim 80 differs from q's 64"):
        attention(q, torch.randn(1, 2, 8, 80).half(), v, backend="emulator")
    with pytest.raises(OptionError, match=r"v: head dim must be one of .*got 72"):
        attention(q, k, torch.randn(1, 2, 8, 72).half(), backend="emulator")
    with pytest.raises(OptionError, match="'mfma' .* f16 only"):
        make_attention(wc.bf16, mma="mfma")


def test_mask_spec() -> None:
    """The normal form: causal sets right = 0; a window alone takes the bottom-right diagonal; no mask is
    one spec whatever the alignment asked."""
    assert mask_spec() == mask_spec(False, (-1, -1)) == at.MaskSpec()
    assert mask_spec(True) == at.MaskSpec("top_left", None, 0)
    assert mask_spec("bottom_right", (8, 5)) == at.MaskSpec("bottom_right", 8, 0)
    assert mask_spec(False, (8, 5)) == at.MaskSpec("bottom_right", 8, 5)
    assert not mask_spec(True).may_see_nothing and mask_spec("bottom_right").may_see_nothing


def test_torch_op_with_mask_on_cpu() -> None:
    """register_attention_op compiles the mask in (schema still (q, k, v, scale)); causal=True is refused
    there (the lengths are unknown until the call)."""
    from wavec.kernels.attention import register_attention_op

    with pytest.raises(OptionError, match="register_attention_op: causal: True is ambiguous"):
        register_attention_op(wc.f16, causal=True, head_dim=64, backend="emulator")
    op = register_attention_op(
        wc.f16, "bhsd", "bottom_right", 64, backend="emulator", window=(16, -1), softcap=25.0, v_head_dim=128
    )
    assert op is torch.ops.wavec.attention_f16_bhsd_bottom_right_w16_m1_cap25_d64_dv128
    q, k, v = _inputs(1, 2, 1, 30, 61, 64, 128, wc.f16)
    out = op(q, k, v, 0.125)
    ref = reference(q, k, v, visible(30, 61, "bottom_right", 16), 0.125, 25.0)
    torch.testing.assert_close(out.float(), ref, rtol=2e-3, atol=2e-3)
