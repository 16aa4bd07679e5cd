"""GPU tier, issue #20 item 1 (strides): views run without a copy on a CUDA device — slices, permuted
[B, S, H, D] caches, transposed operands, odd row pitches and base pointers, outputs into slices — for a
copy, the GEMM (mma.sync and, on sm_90, wgmma with TMA), attention, decode attention and the row ops;
a correctness sweep over random views; bad strides named.  Outputs poisoned with NaN are written in full and
the rest of a bigger output buffer is untouched; references in float64."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from wavec.errors import ArgumentError
from wavec.kernels import elementwise as ew
from wavec.kernels import gemm as gm

pytestmark = pytest.mark.gpu
F = torch.nn.functional
WC = {torch.float16: wc.f16, torch.bfloat16: wc.bf16, torch.float32: wc.f32}
NV_MMA = {wc.f16: wc.MMAType.NV_F32_16x8x16_F16, wc.bf16: wc.MMAType.NV_F32_16x8x16_BF16}


def _gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


def _randn(g, *shape, dtype=torch.float16) -> torch.Tensor:
    return torch.randn(*shape, generator=g, device="cuda", dtype=torch.float32).to(dtype)


def _nan(*shape, dtype=torch.float32) -> torch.Tensor:
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)


def _check(out, ref, tol: float, what: str) -> None:
    assert not out.float().isnan().any(), f"{what}: outputs never written"
    err = ((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()
    assert err < tol, f"{what}: relative error {err:.3e}"


def _views(g, m: int, n: int, dtype) -> dict[str, torch.Tensor]:
    wide = _randn(g, m + 3, n + 40, dtype=dtype)
    return {
        "dense": _randn(g, m, n, dtype=dtype),
        "cols": wide[:m, 8 : 8 + n],
        "rows": wide[3:, :n],
        "pitch": _randn(g, m, n + 4, dtype=dtype)[:, :n],
        "offset": wide[:m, 1 : 1 + n],
        "transposed": _randn(g, n, m, dtype=dtype).t(),
    }


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_copy_of_views(dtype) -> None:
    kernel = wc.compile(ew.make_copy(WC[dtype]), ew.DEFAULT_SUBS, backend="cuda")
    g = _gen(1)
    for m, n in [(4096, 4096), (1000, 1000), (7, 130), (1, 8)]:
        for name, src in _views(g, m, n, dtype).items():
            big = _nan(m + 2, n + 24, dtype=dtype)
            dst = big[1 : 1 + m, 8 : 8 + n]
            kernel(src, dst)
            torch.cuda.synchronize()
            assert torch.equal(dst, src), f"copy {dtype} {name} [{m}, {n}]"
            rest = torch.ones_like(big, dtype=torch.bool)
            rest[1 : 1 + m, 8 : 8 + n] = False
            assert big[rest].float().isnan().all(), f"copy {dtype} {name} [{m}, {n}]: wrote outside the slice"
    keys = [k for k in kernel._variants if k and k[-1][0] == "strided"]
    assert any(dict(k[-1][1]).get("src") == 0 for k in keys), list(kernel._variants)


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_gemm_of_views(dtype, stages: int) -> None:
    """c = a @ b.T: a sliced, b transposed (``x @ w``), odd pitches, C into a slice."""
    wdt = WC[dtype]
    subs = {gm.BLOCK_M: 64, gm.BLOCK_N: 64, gm.BLOCK_K: 32, gm.NUM_STAGES: stages, gm.GROUP_M: 4}
    kernel = wc.compile(gm.make_gemm(wdt, 32, NV_MMA[wdt], (2, 2)), subs, backend="cuda")
    g = _gen(2)
    for m, n, k in [(1024, 1024, 1024), (333, 250, 520), (4096, 128, 64)]:
        cases = {
            "sliced a": (_randn(g, m, k + 24, dtype=dtype)[:, 8 : 8 + k], _randn(g, n, k, dtype=dtype)),
            "transposed b": (_randn(g, m, k, dtype=dtype), _randn(g, k, n, dtype=dtype).t()),
            "pitch a": (_randn(g, m, k + 2, dtype=dtype)[:, :k], _randn(g, n, k, dtype=dtype)),
            "transposed a": (_randn(g, k, m, dtype=dtype).t(), _randn(g, n, k, dtype=dtype)),
        }
        for name, (a, b) in cases.items():
            big = _nan(m, n + 16)
            c = big[:, 8 : 8 + n]
            kernel(a, b, c)
            torch.cuda.synchronize()
            what = f"gemm {dtype} stages{stages} {name} {m}x{n}x{k}"
            _check(c, a.double() @ b.double().T, 1e-5, what)
            assert big[:, :8].isnan().all() and big[:, 8 + n :].isnan().all(), f"{what}: wrote outside C's slice"


def test_wgmma_tma_gemm_of_views() -> None:
    """Hopper: TMA tensor maps carry the views' strides; a transposed operand (no TMA) reads element-wise."""
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("wgmma needs an sm_90 GPU")
    from wavec.tuning.plan import schedule

    subs = {gm.BLOCK_M: 128, gm.BLOCK_N: 128, gm.BLOCK_K: 64, gm.NUM_STAGES: 3, gm.GROUP_M: 4}
    sched = schedule(async_copy="tma")
    kernel = wc.compile(
        gm.make_gemm(wc.f16, 32, wc.MMAType.NV_WGMMA_F32_64xNx16_F16, (1, 1), sched=sched), subs, backend="cuda",
        target="sm_90a",
    )  # fmt: skip
    g = _gen(3)
    m, n, k = 1024, 512, 768
    for name, (a, b) in {
        "sliced": (_randn(g, m, k + 64)[:, 64:], _randn(g, n + 8, k)[8:]),
        "transposed b": (_randn(g, m, k), _randn(g, k, n).t()),
    }.items():
        c = _nan(m, n + 32)[:, :n]
        kernel(a, b, c)
        torch.cuda.synchronize()
        _check(c, a.double() @ b.double().T, 1e-5, f"wgmma gemm {name}")


def test_attention_of_packed_qkv_views() -> None:
    from wavec.kernels.attention import attention

    g = _gen(4)
    for b, s, h, d in [(2, 1024, 8, 128), (1, 333, 4, 64)]:
        qkv = _randn(g, b, s, 3, h, d)
        q, k, v = (qkv[:, :, i] for i in range(3))  # [B, S, H, D] views, rows of pitch 3 * H * D
        want = F.scaled_dot_product_attention(*(x.transpose(1, 2).double() for x in (q, k, v)), is_causal=True)
        _check(attention(q, k, v, causal=True, layout="bshd"), want.transpose(1, 2), 2e-3, f"bshd views {b, s, h, d}")
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # the same as [B, H, S, D] views
        _check(attention(qt, kt, vt, causal=True, layout="bhsd"), want, 2e-3, f"bhsd views {b, s, h, d}")


def test_decode_attention_of_a_transposed_cache() -> None:
    from wavec.kernels import decode_attention

    g = _gen(5)
    b, h, kvh, s_max, d = 4, 32, 8, 4000, 128
    q = _randn(g, b, 1, h, d)
    cache_k, cache_v = (_randn(g, b, kvh, s_max + 96, d)[:, :, :s_max] for _ in range(2))  # a preallocated cache
    got = decode_attention(q, cache_k.transpose(1, 2), cache_v.transpose(1, 2))
    rep = h // kvh
    want = F.scaled_dot_product_attention(
        q.transpose(1, 2).double(),
        cache_k.double().repeat_interleave(rep, 1),
        cache_v.double().repeat_interleave(rep, 1),
    ).transpose(1, 2)
    _check(got, want, 2e-3, "decode attention of a transposed cache")


@pytest.mark.parametrize("n", [96, 1000, 4096, 5000])
def test_row_ops_on_slices(n: int) -> None:
    from wavec.kernels import layer_norm, rms_norm, rows, softmax

    g = _gen(6)
    packed = _randn(g, 512, 3 * n + 8)
    w, bias = _randn(g, n), _randn(g, n)
    for x in (packed[:, n : 2 * n], packed[:, n + 1 : 2 * n + 1]):
        assert rows._rows("softmax", x)[1].data_ptr() == x.data_ptr()
        xd = x.double()
        _check(softmax(x), torch.softmax(xd, -1), 2e-3, f"softmax of a slice {n}")
        _check(rms_norm(x, w), F.rms_norm(xd, (n,), w.double(), 1e-6), 2e-3, f"rms_norm of a slice {n}")
        want = F.layer_norm(xd, (n,), w.double(), bias.double(), 1e-5)
        _check(layer_norm(x, w, bias), want, 2e-3, f"layer_norm of a slice {n}")


def test_random_views_sweep() -> None:
    """Correctness sweep (no timing): random slices, steps and transposes of inputs and outputs, for the
    copy and the GEMM; every case against torch."""
    copy = wc.compile(ew.make_copy(wc.f16), ew.DEFAULT_SUBS, backend="cuda")
    subs = {gm.BLOCK_M: 64, gm.BLOCK_N: 64, gm.BLOCK_K: 32, gm.NUM_STAGES: 3, gm.GROUP_M: 4}
    gemm = wc.compile(gm.make_gemm(wc.f16, 32, NV_MMA[wc.f16], (2, 2)), subs, backend="cuda")
    rng = torch.Generator().manual_seed(7)
    g = _gen(7)

    def pick(hi: int) -> int:
        return int(torch.randint(0, hi, (1,), generator=rng))

    def view(rows: int, cols: int) -> torch.Tensor:
        """A [rows, cols] view: transposed (a column offset) or rows at an offset, a step and a padded pitch."""
        pad, off = pick(20), pick(9)
        if pick(4) == 0:
            return _randn(g, cols, rows + pad + off)[:, off : off + rows].t()
        step = 1 + pick(3)
        return _randn(g, rows * step + off, cols + pad)[off:][::step][:rows, pad // 2 : pad // 2 + cols]

    for _ in range(60):
        m, n, k = 1 + pick(300), 1 + pick(300), 1 + pick(300)
        src = view(m, n)
        big = _nan(m + 4, n + 24, dtype=torch.float16)
        dst = big[2 : 2 + m, 4 : 4 + n]
        copy(src, dst)
        torch.cuda.synchronize()
        assert torch.equal(dst, src), f"copy of {tuple(src.shape)} strides {src.stride()} offset {src.storage_offset()}"
        a, b = view(m, k), view(n, k)
        c = _nan(m, n + 8)[:, 8:] if pick(2) else _nan(n, m).t()
        gemm(a, b, c)
        torch.cuda.synchronize()
        _check(c, a.double() @ b.double().T, 1e-5, f"gemm a{a.stride()} b{b.stride()} c{c.stride()} {m}x{n}x{k}")


def test_bad_strides_are_named() -> None:
    kernel = wc.compile(ew.make_copy(wc.f16), ew.DEFAULT_SUBS, backend="cuda")
    buf = torch.zeros(8, 600, device="cuda", dtype=torch.float16)
    with pytest.raises(ArgumentError, match=r"argument 'dst'.*overlaps input 'src'"):
        kernel(buf[:, :256], buf[:, 128:384])
    with pytest.raises(ArgumentError, match=r"argument 'src'.*zero"):
        kernel(buf[:1, :256].expand(8, 256), torch.zeros(8, 256, device="cuda", dtype=torch.float16))
