"""Emulator tier: the odd-K pad kernel (``kernels/pad.py``) against ``torch.nn.functional.pad``, bit for
bit: K of every residue 1..15 mod 16 the 16-byte run does not divide, f16 / bf16 / f32 / int8, every
element of both padded operands (the workspace poisoned with NaN between calls, so each call writes all
of it, the zero pad columns included), each word width (8 bytes, and the narrower ones a storage whose end
is off the word takes), views (slices at an offset, a row pitch past K) and the torch fallback of a
transposed operand, inputs untouched; ``matmul`` on padded operands of a sliced view against torch in f64."""

from __future__ import annotations

import pytest
import torch
from test_kernels_emulated import GEMM_TOL, check, generator

from wavec.kernels import gemm as gm
from wavec.kernels import pad
from wavec.kernels.fastpath import Decisions

UNIT = {torch.float16: 8, torch.bfloat16: 8, torch.float32: 4, torch.int8: 16}


def _random(g: torch.Generator, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.int8:
        return torch.randint(-128, 128, shape, generator=g, dtype=torch.int8)
    return (torch.randn(shape, generator=g) * 3).to(dtype)


def _poison(t: torch.Tensor) -> None:
    if t.dtype == torch.int8:
        t.fill_(0x5A)
    else:
        t.fill_(float("nan"))


def _check_padded(a: torch.Tensor, b: torch.Tensor, what: str, chunked: bool = True) -> None:
    """Two calls of one runner (the second on a poisoned workspace, fresh inputs of the same key), each
    against ``F.pad`` bit for bit; inputs unchanged; no variant of the pad kernel launched."""
    unit = UNIT[a.dtype]
    kp = a.shape[1] + -a.shape[1] % unit
    run = pad.pad_runner(a, b, unit, "emulator", chunked)
    for call in range(2):
        before = (a.clone(), b.clone())
        pa, pb = run(a, b)
        for got, x in ((pa, a), (pb, b)):
            want = torch.nn.functional.pad(x, (0, kp - x.shape[1]))
            assert got.shape == want.shape and got.is_contiguous(), what
            assert torch.equal(got.view(torch.uint8), want.contiguous().view(torch.uint8)), f"{what}, call {call}"
        assert torch.equal(a, before[0]) and torch.equal(b, before[1]), what
        _poison(pa)
        _poison(pb)
        a.copy_(_random(torch.Generator().manual_seed(call), a.shape, a.dtype))
        b.copy_(_random(torch.Generator().manual_seed(call + 7), b.shape, b.dtype))
    # word buffers bound from a 16-byte boundary: the dense kernel, never its strided variant
    assert not any(k._variants for k in pad._COMPILED.values()), what


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int8])
def test_every_residue(dtype: torch.dtype) -> None:
    """K = 16 q + r for every r in 1..15 the run does not divide (rows of 2 to 5 chunks and 40+ chunks):
    16 and 8 rows (storages of whole 8-byte words: 8-byte words, funnel-shifted where elements are narrower)."""
    g, seed = generator()
    unit = UNIT[dtype]
    for r in range(1, 16):
        if r % unit == 0:
            continue
        for k in (16 + r, 16 * 40 + r):
            a, b = _random(g, (16, k), dtype), _random(g, (8, k), dtype)
            assert pad.word_bytes(a) == pad.word_bytes(b) == 8
            _check_padded(a, b, f"{dtype} K={k} (seed {seed})")


@pytest.mark.parametrize("dtype", [torch.float16, torch.int8])
def test_lanes_on_words_layout(dtype: torch.dtype) -> None:
    """The other lane layout (``chunked=False``: consecutive lanes, consecutive words), odd residues."""
    g, seed = generator()
    for k in (16 * 40 + 3, 16 * 9 + 10, 16 + 7):
        a, b = _random(g, (16, k), dtype), _random(g, (8, k), dtype)
        _check_padded(a, b, f"{dtype} K={k} words layout (seed {seed})", chunked=False)


@pytest.mark.parametrize("dtype, rows, want", [(torch.float16, 5, 2), (torch.float16, 6, 4), (torch.int8, 3, 1)])
def test_narrow_words_at_a_storage_end(dtype: torch.dtype, rows: int, want: int) -> None:
    """A storage whose last element ends off an 8-byte word (5 rows of 29 f16 end 2 bytes into a word):
    the widest word that stays inside it (2 bytes for 290 bytes, 4 for 348, 1 for 87 int8)."""
    g, seed = generator()
    a, b = _random(g, (rows, 29), dtype), _random(g, (8, 29), dtype)
    assert pad.word_bytes(a) == want and pad.word_bytes(b) == 8
    _check_padded(a, b, f"{dtype} rows={rows} (seed {seed})")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.int8])
@pytest.mark.parametrize("offset, gap", [(1, 0), (3, 5), (0, 11), (7, 1)])
def test_views_at_any_offset_and_pitch(dtype: torch.dtype, offset: int, gap: int) -> None:
    """Slices ``buf[offset:].view(m, k + gap)[:, :k]``: rows starting anywhere within a word, any pitch;
    the buffer outside the view is never written."""
    g, seed = generator()
    k, m = 45, 6
    buf = _random(g, (offset + m * (k + gap) + 16,), dtype)
    before = buf.clone()
    a = buf[offset : offset + m * (k + gap)].view(m, k + gap)[:, :k]
    b = _random(g, (4, k), dtype)
    assert pad.word_bytes(a) == 8
    _check_padded(a, b, f"{dtype} offset={offset} gap={gap} (seed {seed})")
    before[offset : offset + m * (k + gap)].view(m, k + gap)[:, :k] = a  # (the inputs were refreshed)
    assert torch.equal(buf, before)


def test_transposed_operand_falls_back() -> None:
    """A transposed operand (stride(1) != 1) has no word reading: both pad through ``F.pad``."""
    g, seed = generator()
    a = _random(g, (29, 8), torch.float16).t()
    b = _random(g, (4, 29), torch.float16)
    assert pad.word_bytes(a) == 0
    _check_padded(a, b, f"transposed (seed {seed})")


def test_matmul_pads_a_sliced_view(monkeypatch) -> None:
    """``matmul`` of a sliced A (pitch K + 3, offset 1) and B over the pad kernel: the product of the
    padded operands, equal to torch's in f64; the GEMM kernel runs wide (no variant)."""
    monkeypatch.setattr(gm, "PAD_K_MIN_MN", 32)
    monkeypatch.setattr(gm, "_COMPILED", {})
    monkeypatch.setattr(gm, "_DISPATCH", Decisions("matmul"))
    g, seed = generator()
    m, n, k = 40, 48, 37
    buf = _random(g, (1 + m * (k + 3),), torch.float16)
    a = buf[1:].view(m, k + 3)[:, :k]
    b = _random(g, (n, k), torch.float16)
    for _ in range(2):
        c = gm.matmul(a, b, backend="emulator", out_dtype=torch.float32)
        check(c, a.double() @ b.double().T, GEMM_TOL, f"padded matmul of a view (seed {seed})")
        b = _random(g, (n, k), torch.float16)
    (kernel,) = gm._COMPILED.values()
    assert not kernel._variants, list(kernel._variants)


@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_pads_odd_in_features(monkeypatch, with_bias: bool) -> None:
    """``linear`` (``matmul_runner`` with x's leading dims) over the padded path: x [2, 20, 37] against
    ``F.linear`` in f64, bf16 (C rounded once from the f32 sum)."""
    from wavec.kernels import dense, linear

    monkeypatch.setattr(gm, "PAD_K_MIN_MN", 32)
    monkeypatch.setattr(dense, "_DECIDED", Decisions("linear"))
    runners = []
    real = pad.pad_runner
    monkeypatch.setattr(pad, "pad_runner", lambda *a, **kw: runners.append(1) or real(*a, **kw))
    g, seed = generator()
    x, w = _random(g, (2, 20, 37), torch.bfloat16), _random(g, (48, 37), torch.bfloat16)
    bias = _random(g, (48,), torch.bfloat16) if with_bias else None
    got = linear(x, w, bias, backend="emulator")
    want = torch.nn.functional.linear(x.double(), w.double(), None if bias is None else bias.double())
    assert got.dtype == torch.bfloat16 and got.shape == (2, 20, 48) and runners == [1]
    err = ((got.double() - want).norm() / want.norm()).item()
    assert err < 1e-2, f"linear K=37 (seed {seed}): relative error {err:.2e}"
