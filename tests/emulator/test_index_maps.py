"""General index maps on ``read`` and ``write`` (issue #20 item 3): a mapping entry is any integer
expression of the access's own coordinates (``wc.index``) and shape symbols — a transpose, a reversal, an
im2col unfold — on dims the registers also hold; partial tiles mask the register's own coordinate.
Every output element is checked (outputs NaN-filled first), at sizes no tile divides, with one-element and
four-element runs; the kernels also compile for sm_80, sm_90a and gfx942."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from wavec import Memory
from wavec.errors import ShapeError
from wavec.kernels.elementwise import BLOCK_M, BLOCK_N, M, N, rowwise_constraints

B, L, LOUT = wc.sym.B, wc.sym.L, wc.sym.LOUT


def transposed_read(vec: int, lanes: int = 32) -> wc.WaveKernel:
    @wc.wave(rowwise_constraints(lanes, vec))
    def transpose_read(x: Memory[N, M, wc.f32], out: Memory[M, N, wc.f32]):
        wc.write(wc.read(x, mapping={N: wc.index(N), M: wc.index(M)}), out)

    return transpose_read


def reversed_rows(vec: int, lanes: int = 32) -> wc.WaveKernel:
    @wc.wave(rowwise_constraints(lanes, vec))
    def reverse(x: Memory[M, N, wc.f32], out: Memory[M, N, wc.f32]):
        wc.write(wc.read(x, mapping={N: N - 1 - wc.index(N)}), out)

    return reverse


def transposed_write(vec: int, lanes: int = 32) -> wc.WaveKernel:
    @wc.wave(rowwise_constraints(lanes, vec))
    def transpose_write(x: Memory[M, N, wc.f32], out: Memory[N, M, wc.f32]):
        wc.write(wc.read(x), out, mapping={N: wc.index(N), M: wc.index(M)})

    return transpose_write


def unfold(vec: int, lanes: int = 32) -> wc.WaveKernel:
    """im2col of a 1-D convolution: row ``m = b * LOUT + t`` holds ``x[b, t : t + taps]``."""

    @wc.wave(rowwise_constraints(lanes, vec))
    def im2col(x: Memory[B, L, wc.f32], out: Memory[M, N, wc.f32]):
        wc.write(wc.read(x, mapping={B: wc.index(M) // LOUT, L: wc.index(M) % LOUT + wc.index(N)}), out)

    return im2col


def _run(kernel, subs: dict, x: torch.Tensor, out_shape: tuple) -> torch.Tensor:
    out = torch.full(out_shape, float("nan"))
    wc.compile(kernel, subs, backend="emulator", cache=False)(x, out)
    return out


@pytest.mark.parametrize("vec", [1, 4])
def test_transposed_read_and_write(vec: int) -> None:
    g = torch.Generator().manual_seed(vec)
    subs = {BLOCK_M: 4, BLOCK_N: 32 * vec}
    x = torch.randn(37, 29, generator=g)
    assert torch.equal(_run(transposed_read(vec), subs, x, (29, 37)), x.t())
    x = torch.randn(29, 37, generator=g)
    assert torch.equal(_run(transposed_write(vec), subs, x, (37, 29)), x.t())


@pytest.mark.parametrize("vec", [1, 4])
def test_reversed_rows(vec: int) -> None:
    x = torch.randn(13, 76, generator=torch.Generator().manual_seed(3))
    assert torch.equal(_run(reversed_rows(vec), {BLOCK_M: 4, BLOCK_N: 32 * vec}, x, (13, 76)), x.flip(1))


@pytest.mark.parametrize("vec", [1, 4])
def test_im2col_unfold(vec: int) -> None:
    batch, length, taps = 3, 20, 5
    lout = length - taps + 1
    x = torch.randn(batch, length, generator=torch.Generator().manual_seed(4))
    got = _run(unfold(vec), {BLOCK_M: 4, BLOCK_N: 32 * vec, LOUT: lout}, x, (batch * lout, taps))
    assert torch.equal(got, x.unfold(1, taps, 1).reshape(batch * lout, taps))


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "gfx942"])
def test_index_maps_compile_for_every_target(target: str) -> None:
    pytest.importorskip("iree.compiler")
    amd = target.startswith("gfx")
    lanes = 64 if amd else 32
    for make in (transposed_read, reversed_rows, transposed_write):
        k = wc.compile(
            make(4, lanes), {BLOCK_M: 4, BLOCK_N: 4 * lanes}, target=target, backend="rocm" if amd else "cuda",
            cache=False,
        )  # fmt: skip
        assert k.artifact.binary


def test_a_write_map_that_is_not_one_to_one_is_refused() -> None:
    """A counterexample (two elements, one address) is an error at the kernel line; maps of data and maps
    without a counterexample compile."""

    @wc.wave(rowwise_constraints(32, 1))
    def halves(x: Memory[M, N, wc.f32], out: Memory[M, N, wc.f32]):
        wc.write(wc.read(x), out, mapping={N: wc.index(N) // 2})

    with pytest.raises(
        ShapeError, match=r"(?s)test_index_maps\.py:\d+: .*not one-to-one.*\(M=0, N=0\) and \(M=0, N=1\)"
    ):
        wc.compile(halves, {BLOCK_M: 4, BLOCK_N: 32}, backend="emulator", cache=False)
    wc.compile(transposed_write(1), {BLOCK_M: 4, BLOCK_N: 32}, backend="emulator", cache=False)


def test_named_broadcast_in_either_order() -> None:
    """``[N]`` against ``[M, N]`` broadcasts by name whichever comes first (``where``'s condition, a
    binary op's left operand)."""

    @wc.wave(rowwise_constraints(32, 4))
    def masked_shift(x: Memory[M, N, wc.f32], out: Memory[M, N, wc.f32]):
        cols = wc.cast(wc.index(N), wc.f32)
        wc.write(cols + wc.where(wc.index(N) < 12, wc.read(x), 0.0), out)

    x = torch.randn(6, 40, generator=torch.Generator().manual_seed(9))
    cols = torch.arange(40, dtype=torch.float32)
    want = cols + torch.where(cols < 12, x, 0.0)
    assert torch.equal(_run(masked_shift, {BLOCK_M: 4, BLOCK_N: 128}, x, (6, 40)), want)
