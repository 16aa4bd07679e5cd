"""Emulator tier, issue #20 item 1 (strides): tensors of any strides run without a copy.

One kernel compiled for dense row-major tensors serves every view: a slice of a wider buffer (``x[:, :N]``,
``x[2:]``), a permuted ``[B, S, H, D]`` view (the transformers KV cache), a transposed view (``w.t()``: its
innermost stride is not 1), a row pitch or base pointer the 16-byte vector width does not divide, and
outputs written into a slice of a bigger buffer.  A dense launch compiles no variant; a non-dense one the
strided variant its strides need, once.  Inputs are fresh random numbers (seed in every message), outputs
poisoned with NaN and written in full, and the rest of a bigger output buffer left untouched.
"""

from __future__ import annotations

import pytest
import torch
from test_kernels_emulated import GEMM_TOL, TORCH_DTYPE, _subs, check, generator, poisoned, randn

import wavec as wc
from wavec import Memory
from wavec.errors import ArgumentError
from wavec.kernels import elementwise as ew
from wavec.kernels import gemm as gm

pytest.importorskip("iree.compiler")

B, H, S, D = wc.sym.B, wc.sym.H, wc.sym.S, wc.sym.D
NV_MMA = {wc.f16: wc.MMAType.NV_F32_16x8x16_F16, wc.bf16: wc.MMAType.NV_F32_16x8x16_BF16}


def _copy(dtype, target: str = "sm_80"):
    tpw = 64 if target == "gfx942" else 32
    return wc.compile(ew.make_copy(dtype, tpw), ew.DEFAULT_SUBS, backend="emulator", target=target)


def _views(g: torch.Generator, m: int, n: int, tdt) -> dict[str, torch.Tensor]:
    """Views of shape [m, n] over bigger buffers: name -> view (the buffers are random numbers)."""
    wide = randn(g, m + 3, n + 40, dtype=tdt)
    return {
        "dense": randn(g, m, n, dtype=tdt),
        "cols": wide[:m, 8 : 8 + n],  # x[:, a:b]: row pitch n + 40, base 16-byte aligned
        "rows": wide[3:, :n],  # x[2:]: the base moves by whole rows
        "pitch": randn(g, m, n + 4, dtype=tdt)[:, :n],  # a row pitch of n + 4 elements
        "offset": wide[:m, 1 : 1 + n],  # a base pointer one element past an aligned address
        "transposed": randn(g, n, m, dtype=tdt).t(),  # innermost stride m
    }


@pytest.mark.parametrize("dtype", [wc.f16, wc.f32], ids=lambda d: d.name)
@pytest.mark.parametrize("target", ["sm_80", "gfx942"])
def test_copy_of_views(dtype, target: str) -> None:
    kernel = _copy(dtype, target)
    g, seed = generator()
    tdt = TORCH_DTYPE[dtype]
    for m, n in [(9, 1000), (5, 64), (3, 1001)]:  # N = 1001: strided and narrow (a size miss too)
        for name, src in _views(g, m, n, tdt).items():
            dst = poisoned(m, n, dtype=tdt)
            kernel(src, dst)
            assert torch.equal(dst, src), f"copy {dtype.name} {name} [{m}, {n}] on {target} (seed {seed})"
            if name == "dense" and m == 9:
                assert not kernel._variants, "a dense launch compiled a variant"
    keys = {dict(k[-1][1]).get("src") for k in kernel._variants if k and k[-1][0] == "strided"}
    assert 0 in keys and None in keys, f"no inner-strided or plain strided variant: {list(kernel._variants)}"
    both = [k for k in kernel._variants if len(k) > 1 and k[-1][0] == "strided" and k[0] == ("N", 1)]
    assert both, f"no strided variant with N's runs capped: {list(kernel._variants)}"


@pytest.mark.parametrize("dtype", [wc.f16, wc.bf16], ids=lambda d: d.name)
def test_copy_into_a_slice_of_a_bigger_output(dtype) -> None:
    kernel = _copy(dtype)
    g, seed = generator()
    tdt = TORCH_DTYPE[dtype]
    for m, n, lo in [(7, 520, 16), (4, 96, 3), (6, 64, 0)]:
        src = randn(g, m, n, dtype=tdt)
        big = poisoned(m + 2, n + 24, dtype=tdt)
        kernel(src, big[1 : 1 + m, lo : lo + n])
        what = f"copy into big[1:{1 + m}, {lo}:{lo + n}] (seed {seed})"
        assert torch.equal(big[1 : 1 + m, lo : lo + n], src), what
        rest = torch.ones_like(big, dtype=torch.bool)
        rest[1 : 1 + m, lo : lo + n] = False
        assert big[rest].float().isnan().all(), f"{what}: wrote outside the slice"
        # a transposed output: read row-wise, written element by element
        out_t = poisoned(n, m, dtype=tdt)
        kernel(src, out_t.t())
        assert torch.equal(out_t.t(), src), f"copy into a transposed output [{m}, {n}] (seed {seed})"


def test_inputs_only_call_with_a_strided_input() -> None:
    kernel = _copy(wc.f16)
    g, seed = generator()
    src = randn(g, 6, 300, dtype=torch.float16)[:, 10:266]
    out = kernel(src)
    assert out.is_contiguous() and torch.equal(out, src), f"inputs-only copy of a slice (seed {seed})"


def _copy_4d() -> wc.WaveKernel:
    """out = x for [B, H, S, D] memories, one row of D per wave."""
    cons = [
        wc.WorkgroupConstraint(S, 4, 0),
        wc.WorkgroupConstraint(H, 1, 1),
        wc.WorkgroupConstraint(B, 1, 2),
        wc.WorkgroupConstraint(D, D, None),
        wc.WaveConstraint(S, 1),
        wc.HardwareConstraint(threads_per_wave=32, vector_shapes={S: 1, D: 64}),
    ]

    @wc.wave(cons)
    def copy4(x: Memory[B, H, S, D, wc.f16], out: Memory[B, H, S, D, wc.f16]):
        wc.write(wc.read(x) * 2.0, out)

    return copy4


def test_permuted_bshd_view_as_bhsd() -> None:
    """The KV cache case: a [B, S, H, D] buffer read as [B, H, S, D] (``transpose(1, 2)``), written into
    the same kind of view of an output buffer."""
    kernel = wc.compile(_copy_4d(), {D: 64}, backend="emulator", target="sm_80")
    g, seed = generator()
    for b, s, h in [(2, 13, 3), (1, 4, 2)]:
        cache = randn(g, b, s + 5, h, 64, dtype=torch.float16)
        x = cache[:, :s].transpose(1, 2)  # [B, H, S, D], strides (.., D, H*D, 1)
        out_buf = poisoned(b, s, h, 64, dtype=torch.float16)
        kernel(x, out_buf.transpose(1, 2))
        assert torch.equal(out_buf.transpose(1, 2), x * 2), f"[{b}, {h}, {s}, 64] permuted view (seed {seed})"


def _gemm(dtype, target: str):
    amd = target == "gfx942"
    mma = wc.MMAType.F32_16x16x16_F16 if amd else NV_MMA[dtype]
    kernel = gm.make_gemm(dtype, 64 if amd else 32, mma, (2, 2))
    return wc.compile(kernel, _subs(64, 64, 32, 2, 1), backend="emulator", target=target)


@pytest.mark.parametrize("target", ["sm_80", "sm_90", "gfx942"])
def test_gemm_of_views(target: str) -> None:
    """c = a @ b.T with a sliced A, a transposed B (``x @ w`` with w [K, N]: b = w.t()), a row pitch the
    vector width does not divide, and C written into a slice of a bigger buffer."""
    dtype = wc.f16
    kernel = _gemm(dtype, target)
    g, seed = generator()
    tdt = TORCH_DTYPE[dtype]
    for m, n, k in [(70, 48, 64), (33, 40, 96)]:
        cases = {
            "sliced a": (randn(g, m, k + 24, dtype=tdt)[:, 8 : 8 + k], randn(g, n, k, dtype=tdt)),
            "transposed b": (randn(g, m, k, dtype=tdt), randn(g, k, n, dtype=tdt).t()),
            "pitch a": (randn(g, m, k + 2, dtype=tdt)[:, :k], randn(g, n, k, dtype=tdt)),
            "both": (randn(g, m + 4, k, dtype=tdt)[4:], randn(g, k + 8, n, dtype=tdt)[:k].t()),
        }
        for name, (a, b) in cases.items():
            big = poisoned(m, n + 16)
            c = big[:, 8 : 8 + n]
            kernel(a, b, c)
            what = f"gemm {target} {name} M={m} N={n} K={k} (seed {seed})"
            check(c, a.double() @ b.double().T, GEMM_TOL, what)
            assert big[:, :8].isnan().all() and big[:, 8 + n :].isnan().all(), f"{what}: wrote outside C's slice"


def test_gather_gemm_atomics_into_a_strided_output() -> None:
    """Atomic updates (``red``) of rows of a strided output (the address of a subview of a strided view)."""
    import dyn_kernels as dk

    kernel = wc.compile(dk.make_gather_gemm(dk.gemm_constraints()), dk.GEMM_SUBS, backend="emulator")
    g, seed = generator()
    t, m = 23, 40
    x = randn(g, t, 64, dtype=torch.float16)
    ids = torch.randint(0, dk.TOP_K * t, (m,), dtype=torch.int32, generator=g)
    b = randn(g, 48, 64, dtype=torch.float16)
    w = torch.rand(m, generator=g)
    big = randn(g, t, 80)
    c = big[:, 16:64]
    want = dk.reference_gather_gemm(x, ids, b, w, c)
    before = big.clone()
    kernel(x, ids, b, w, c)
    torch.testing.assert_close(c, want, rtol=1e-4, atol=1e-3, msg=f"gather gemm into a slice (seed {seed})")
    assert torch.equal(big[:, :16], before[:, :16]) and torch.equal(big[:, 64:], before[:, 64:])


def test_bad_strides_name_the_argument() -> None:
    kernel = _copy(wc.f16)
    g, _seed = generator()
    buf = randn(g, 8, 600, dtype=torch.float16)
    with pytest.raises(ArgumentError, match=r"argument 'dst'.*overlaps input 'src'"):
        kernel(buf[:, :256], buf[:, 128:384])
    with pytest.raises(ArgumentError, match=r"argument 'src'.*stride 0 of dimension 0.*zero"):
        kernel(randn(g, 1, 256, dtype=torch.float16).expand(8, 256), poisoned(8, 256, dtype=torch.float16))
    with pytest.raises(ArgumentError, match=r"argument 'dst'.*share memory"):
        kernel(
            randn(g, 8, 256, dtype=torch.float16), torch.empty(4096, dtype=torch.float16).as_strided((8, 256), (64, 1))
        )


# ----- library functions: views passed straight through ------------------------------------------------

F = torch.nn.functional


@pytest.mark.parametrize("n", [96, 300, 1000])
def test_row_ops_on_slices_run_without_a_copy(n: int) -> None:
    """softmax / rms_norm / layer_norm of a head slice of a packed projection ([T, 3 * n + 8][:, n : 2n],
    rows of any pitch, even an odd one) and of a 3-D slice: the kernel reads the view in place."""
    from wavec.kernels import layer_norm, rms_norm, rows, softmax

    g, seed = generator()
    packed = randn(g, 3, 3, 3 * n + 8, dtype=torch.float16)
    for x in (packed[..., n : 2 * n], packed[1:, :, 8 : 8 + n], packed.view(9, -1)[:, n + 1 : 2 * n + 1]):
        assert rows._rows("softmax", x)[1].data_ptr() == x.data_ptr(), "the rows were copied"
        xd, w, b = x.double(), randn(g, n, dtype=torch.float16), randn(g, n, dtype=torch.float16)
        what = f"rows of shape {tuple(x.shape)} strides {x.stride()} (seed {seed})"
        torch.testing.assert_close(
            softmax(x, backend="emulator").double(), torch.softmax(xd, -1), rtol=2e-3, atol=4e-3, msg=what
        )
        want = F.rms_norm(xd, (n,), w.double(), 1e-6)
        torch.testing.assert_close(rms_norm(x, w, backend="emulator").double(), want, rtol=2e-3, atol=4e-3, msg=what)
        want = F.layer_norm(xd, (n,), w.double(), b.double(), 1e-5)
        got = layer_norm(x, w, b, backend="emulator").double()
        torch.testing.assert_close(got, want, rtol=2e-3, atol=4e-3, msg=what)


def test_attention_of_a_packed_qkv_and_a_bshd_cache_as_bhsd() -> None:
    """``attention(layout="bhsd")`` on q, k, v sliced from a packed [B, S, 3, H, D] projection and
    transposed to [B, H, S, D] (no copy: the strided variant), into an output that is itself a transposed
    view of a [B, S, H, D] buffer."""
    from wavec.kernels.attention import attention

    g, seed = generator()
    b, s, h, d = 1, 40, 2, 64
    qkv = randn(g, b, s, 3, h, d, dtype=torch.float16)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    assert not q.is_contiguous()
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    got = attention(q, k, v, causal=True, layout="bhsd", backend="emulator", config=(32, 32, 2))
    check(got, want, 2e-3, f"attention of packed qkv views (seed {seed})")


def test_decode_attention_of_a_transposed_bhsd_cache() -> None:
    """``decode_attention`` takes [B, S, H, D]; a transformers cache is [B, H, S, D]: its transpose is a view."""
    from wavec.kernels import decode_attention

    g, seed = generator()
    b, h, kvh, s_max, d = 2, 4, 2, 70, 64
    q = randn(g, b, 1, h, d, dtype=torch.float16)
    cache_k, cache_v = (randn(g, b, kvh, s_max + 6, d, dtype=torch.float16)[:, :, :s_max] for _ in range(2))
    k, v = cache_k.transpose(1, 2), cache_v.transpose(1, 2)  # [B, S, KVH, D] views
    got = decode_attention(q, k, v, backend="emulator")
    rep = h // kvh
    want = F.scaled_dot_product_attention(
        q.transpose(1, 2).double(),
        cache_k.double().repeat_interleave(rep, 1),
        cache_v.double().repeat_interleave(rep, 1),
    ).transpose(1, 2)
    check(got, want, 2e-3, f"decode attention of a transposed cache (seed {seed})")


def test_wgmma_tma_gemm_of_views() -> None:
    """sm_90a, A and B staged by TMA: the tensor maps carry the views' strides; a transposed B
    (innermost stride not 1: no tensor map) is read element by element; an odd pitch with TMA asked for
    explicitly cannot compile its variant, and the error says so."""
    from wavec.tuning.plan import schedule

    subs = {gm.BLOCK_M: 64, gm.BLOCK_N: 64, gm.BLOCK_K: 64, gm.NUM_STAGES: 2, gm.GROUP_M: 1}
    mma = wc.MMAType.NV_WGMMA_F32_64xNx16_F16
    gemm = gm.make_gemm(wc.f16, 32, mma, (1, 1), sched=schedule(async_copy="tma"))
    kernel = wc.compile(gemm, subs, backend="emulator", target="sm_90a")
    assert len(kernel.metadata.tensor_maps) == 2
    g, seed = generator()
    m, n, k = 64, 72, 128
    for name, (a, b) in {
        "sliced": (randn(g, m, k + 64, dtype=torch.float16)[:, 64:], randn(g, n + 8, k, dtype=torch.float16)[8:]),
        "transposed b": (randn(g, m, k, dtype=torch.float16), randn(g, k, n, dtype=torch.float16).t()),
    }.items():
        c = poisoned(m, n + 32)[:, :n]
        kernel(a, b, c)
        check(c, a.double() @ b.double().T, GEMM_TOL, f"wgmma tma gemm {name} (seed {seed})")
    strided = kernel._variants[(("strided", ()),)]
    assert (
        len(strided.metadata.tensor_maps) == 2 and dict((x.name, x.multiple) for x in strided.metadata.args)["a"] == 8
    )
    with pytest.raises(ArgumentError, match=r"(?s)argument 'a'.*does not compile.*16 bytes"):
        kernel(randn(g, m, k + 4, dtype=torch.float16)[:, :k], randn(g, n, k, dtype=torch.float16), poisoned(m, n))


def test_linear_and_silu_and_mul_of_views() -> None:
    """``linear`` of a slice of a wider activation with a row slice of a fused weight, ``silu_and_mul`` of
    a gate-up slice: the views run in place."""
    from wavec.kernels import linear, silu_and_mul

    g, seed = generator()
    act = randn(g, 2, 9, 96, dtype=torch.float16)
    x = act[..., 16:80]  # [2, 9, 64], rows of pitch 96
    fused = randn(g, 3 * 40, 64, dtype=torch.float16)
    w, bias = fused[40:80], randn(g, 40, dtype=torch.float16)
    got = linear(x, w, bias, backend="emulator")
    check(got, x.double() @ w.double().T + bias.double(), 2e-3, f"linear of views (seed {seed})")
    gate_up = randn(g, 7, 300, dtype=torch.float16)[:, 8:264]  # [7, 2 * 128]
    want = F.silu(gate_up[:, :128].double()) * gate_up[:, 128:].double()
    check(silu_and_mul(gate_up, backend="emulator"), want, 2e-3, f"silu_and_mul of a slice (seed {seed})")
