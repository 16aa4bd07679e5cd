"""Warpgroup MMA (``wgmma``) index math: the accumulator layout against the PTX ISA formula, the
instruction N, the core-matrix shared layout and descriptor bits, and the copy distribution's
bank-conflict and sector properties."""

from __future__ import annotations

import itertools

import pytest
import sympy

import wavec as wc
from wavec.emulator.ops_nvvm import _decode
from wavec.indexing import LANE, THREAD, mma_layout, shape_symbol
from wavec.indexing.shared_layout import SharedLayout, SharedLayoutKind, SwizzleMode, core_copy_layout, split_quotient

M, N, K = shape_symbol("M"), shape_symbol("N"), shape_symbol("K")
WGMMA = [wc.MMAType.NV_WGMMA_F32_64xNx16_F16, wc.MMAType.NV_WGMMA_F32_64xNx16_BF16]


@pytest.mark.parametrize("n", [8, 64, 136, 256])
def test_accumulator_layout_is_the_ptx_fragment(n: int) -> None:
    """Register i of lane l holds D[16w + g + 8 * (i % 4 // 2), 8 * (i // 4) + 2t + i % 2] (PTX ISA,
    wgmma .m64nNk16 D fragment), and the 128 lanes cover the 64 x n tile exactly once."""
    lay = mma_layout(WGMMA[0], "c", M, N, n=n)
    assert lay.tile == (64, n) and lay.size == n // 2
    seen = set()
    for lane in range(128):
        w, g, t = lane // 32, lane % 32 // 4, lane % 4
        rows0, cols0 = (int(lay.seq(d).start.subs(LANE, lane)) for d in (M, N))
        for i, off in enumerate(lay.positions()):
            got = (rows0 + off[M], cols0 + off[N])
            assert got == (16 * w + g + 8 * (i % 4 // 2), 8 * (i // 4) + 2 * t + i % 2), (lane, i)
            seen.add(got)
    assert seen == set(itertools.product(range(64), range(n)))


def test_operand_layouts_are_one_descriptor_per_tile() -> None:
    a = mma_layout(WGMMA[1], "a", M, K, n=128)
    b = mma_layout(WGMMA[1], "b", N, K, n=128)
    assert (a.tile, a.size, b.tile, b.size) == ((64, 16), 1, (128, 16), 1)
    with pytest.raises(ValueError, match="multiple of 8"):
        mma_layout(WGMMA[0], "c", M, N, n=12)
    with pytest.raises(ValueError, match="multiple of 8"):
        mma_layout(WGMMA[0], "c", M, N)


@pytest.mark.parametrize(
    "wave_n,want", [(128, 128), (256, 256), (512, 256), (384, 192), (200, 200), (8, 8), (12, None), (4, None)]
)
def test_instruction_n(wave_n: int, want) -> None:
    assert WGMMA[0].spec.instruction_n(wave_n) == want
    assert wc.MMAType.NV_F32_16x8x16_F16.spec.instruction_n(wave_n) == (8 if wave_n % 8 == 0 else None)


def test_split_quotient() -> None:
    t, w = sympy.Symbol("t", integer=True, nonnegative=True), sympy.Symbol("w", integer=True, nonnegative=True)
    assert split_quotient(sympy.Mod(t, 8) + 8 * sympy.floor(t / 64) + 32, 8) == (
        sympy.floor(t / 64) + 4,
        sympy.Mod(t, 8),
    )
    assert split_quotient(64 * w + 16, 8) == (8 * w + 2, 0)
    assert split_quotient(8 * sympy.Mod(t, 16), 64) == (sympy.floor(sympy.Mod(t, 16) / 8), 8 * sympy.Mod(t, 8))
    q, r = split_quotient(t + 3, 8)  # not provable: floor and the remainder by subtraction
    assert q == sympy.floor((t + 3) / 8) and not r.has(sympy.Mod)
    for expr, div in (
        (t + 3, 8),
        (8 * sympy.Mod(t, 16), 64),
        (sympy.Mod(t, 8) + 8 * sympy.floor(t / 64) + 32, 8),
        (24 * sympy.Mod(t, 4) + 5, 16),
    ):
        q, r = split_quotient(expr, div)
        for v in range(200):
            assert (int(q.subs(t, v)), int(r.subs(t, v))) == divmod(int(expr.subs(t, v)), div), (expr, v)


@pytest.mark.parametrize("tile", [(64, 16), (128, 64), (256, 32)])
def test_core_layout_indices_and_descriptor(tile) -> None:
    """Every element has its own memref slot; core-matrix rows are 16 contiguous bytes; the
    descriptor's LBO is the next core matrix along K and SBO the next 8-row group."""
    lay = SharedLayout(SharedLayoutKind.CORE_K_MAJOR, 2)
    shape = lay.memref_shape(tile)
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    addr = {}
    for r, k in itertools.product(range(tile[0]), range(tile[1])):
        idx = [int(x) for x in lay.indices(sympy.Integer(r), sympy.Integer(k))]
        addr[(r, k)] = 2 * sum(i * s for i, s in zip(idx, strides))
    assert sorted(addr.values()) == list(range(0, 2 * tile[0] * tile[1], 2))
    for r, k in itertools.product(range(0, tile[0], 8), range(0, tile[1], 8)):
        assert addr[(r, k)] == lay.byte_offset(r, k, tile)
        assert addr[(r, k + 7)] == addr[(r, k)] + 14 and addr[(r + 1, k)] == addr[(r, k)] + 16
    start, lbo, sbo, mode = _decode(lay.descriptor_bits(tile) | (0x1230 >> 4))
    assert (start, lbo, sbo, mode) == (0x1230, 128, tile[1] // 8 * 128, SwizzleMode.NONE)
    assert lay.check((64, 12)) and lay.check((60, 16)) and lay.check(tile) is None


SWIZZLES = [
    (SharedLayoutKind.SWIZZLE_128B, 128, SwizzleMode.B128),
    (SharedLayoutKind.SWIZZLE_64B, 64, SwizzleMode.B64),
    (SharedLayoutKind.SWIZZLE_32B, 32, SwizzleMode.B32),
]


@pytest.mark.parametrize("kind,width,mode", SWIZZLES, ids=lambda x: getattr(x, "name", str(x)))
@pytest.mark.parametrize("tile", [(64, 64), (128, 64), (64, 128), (256, 192)])
def test_swizzle_layout_indices_and_descriptor(tile, kind, width: int, mode) -> None:
    """W-byte swizzle: chunk c of row r at chunk c ^ ((r * W / 128) % (W / 16)) of its W-byte row, i.e.
    the address XOR the PTX ISA defines (bits [4, ...) ^= bits [7, ...)) for an aligned tile; K steps
    start 32 bytes apart on the unswizzled row (the next column when W = 32); SBO = one 8W-byte atom."""
    lay = SharedLayout(kind, 2)
    e = width // 2
    shape = lay.memref_shape(tile)
    assert shape == [tile[1] // e, tile[0], e] and lay.alignment == 1024
    addr = {}
    for r, k in itertools.product(range(tile[0]), range(tile[1])):
        c, row, el = (int(x) for x in lay.indices(sympy.Integer(r), sympy.Integer(k)))
        addr[(r, k)] = 2 * ((c * shape[1] + row) * shape[2] + el)
        linear = (k // e) * tile[0] * width + r * width + (k % e) * 2
        assert addr[(r, k)] == linear ^ (((linear >> 7) & (width // 16 - 1)) << 4), (r, k)
    assert sorted(addr.values()) == list(range(0, 2 * tile[0] * tile[1], 2))
    assert lay.byte_offset(8, 16, tile) == (16 // e) * tile[0] * width + 8 * width + (16 % e) * 2
    with pytest.raises(ValueError):
        lay.byte_offset(4, 0, tile)
    _start, lbo, sbo, got_mode = _decode(lay.descriptor_bits(tile))
    assert (lbo, sbo, got_mode) == (16, 8 * width, mode)
    assert lay.check((64, 8)) and lay.check(tile) is None


@pytest.mark.parametrize("kind,width,mode", SWIZZLES, ids=lambda x: getattr(x, "name", str(x)))
def test_row_copy_is_conflict_free_on_the_swizzles(kind, width: int, mode) -> None:
    """The default copy (consecutive threads along each row, rows after each other) stores every 8-thread
    phase in 8 different bank groups."""
    lay = SharedLayout(kind, 2)
    per_row = width // 16
    chunks = [(t // per_row, t % per_row) for t in range(64)]  # (row, chunk) of thread t
    for phase in range(8):
        groups = set()
        for r, c in chunks[8 * phase : 8 * phase + 8]:
            _col, row, el = (int(x) for x in lay.indices(sympy.Integer(r), sympy.Integer(8 * c)))
            groups.add((row * width + el * 2) // 16 % 8)
        assert len(groups) == 8, phase


@pytest.mark.parametrize("tile,threads", [((128, 64), 256), ((64, 32), 128), ((256, 64), 256), ((64, 256), 128)])
def test_core_copy_is_conflict_free_and_sector_complete(tile, threads: int) -> None:
    """Each 8-thread store phase of a warp writes 8 different 16-byte bank groups of the core layout;
    each warp reads whole 32-byte sectors of a row-major global tile; every element is copied once."""
    lay = SharedLayout(SharedLayoutKind.CORE_K_MAJOR, 2)
    cp = core_copy_layout((M, K), tile, threads, 2)
    assert not isinstance(cp, str)
    copied = []
    for tm, tk in itertools.product(range(tile[0] // cp.tile[0]), range(tile[1] // cp.tile[1])):
        chunks = []
        for t in range(threads):
            r = int(cp.seq(M).start.subs(THREAD, t)) + tm * cp.tile[0]
            k = int(cp.seq(K).start.subs(THREAD, t)) + tk * cp.tile[1]
            assert cp.seq(K).levels == ((8, 1),)
            chunks.append((r, k))
            copied += [(r, k + e) for e in range(8)]
        for warp in range(threads // 32):
            mine = chunks[32 * warp : 32 * warp + 32]
            for phase in range(4):
                # bank group of a 16-byte chunk: its address // 16 mod 8 (core-matrix row r % 8 adds 16 bytes)
                groups = {
                    (lay.byte_offset(r - r % 8, k, tile) // 16 + r % 8) % 8 for r, k in mine[8 * phase : 8 * phase + 8]
                }
                assert len(groups) == 8, (warp, phase)
            sectors: dict = {}
            for r, k in mine:  # global row-major: bytes [2k, 2k + 16) of row r
                sectors.setdefault((r, 2 * k // 32), set()).update(range(2 * k, 2 * k + 16))
            assert all(len(b) == 32 for b in sectors.values()), warp
    assert sorted(copied) == sorted(itertools.product(range(tile[0]), range(tile[1])))


def test_core_copy_rejects_tiles_it_cannot_split() -> None:
    assert isinstance(core_copy_layout((M, K), (8, 16), 256, 2), str)
    assert isinstance(core_copy_layout((M, K), (12, 64), 128, 2), str)


@pytest.mark.parametrize(
    "bm,bn,stages,target,ok,why",
    [
        (128, 256, 4, "sm_90a", True, ""),
        (128, 256, 5, "sm_90a", False, "exceed"),
        (64, 64, 2, "sm_90a", False, "multiple of the NV_WGMMA_F32_64xNx16_F16 instruction's M = 64"),
        (128, 128, 3, "sm_90", False, "needs target sm_90a"),
        (128, 136, 3, "sm_90a", False, "not a multiple of the 32 elements of N"),  # the copy rejects it
    ],
)
def test_legality_knows_wgmma(bm: int, bn: int, stages: int, target: str, ok: bool, why: str) -> None:
    """The tuner's legality filter: instruction N from the wave tile, no padding of core-matrix tiles
    (shared bytes = stages x (BM + BN) x BK x 2, plus one 1024-byte slot for the mbarriers of the TMA
    copies that async_copy "auto" picks for these 128-byte-swizzled tiles, as the pass pipeline allocates
    them), sm_90a only, and what the passes reject (an N tile of 136: expand)."""
    from wavec.kernels import gemm as gm
    from wavec.tuning.legality import legal, shared_bytes
    from wavec.tuning.plan import WGMMA_FOR_DTYPE

    kernel = gm.make_gemm(wc.f16, 32, WGMMA_FOR_DTYPE["f16"], (2, 1))
    subs = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 64, "NUM_STAGES": stages, "GROUP_M": 8}
    got, reason = legal(kernel, subs, target)
    assert got == ok and why in reason, reason
    if target == "sm_90a" and "exceed" in why or ok:  # the pipeline's allocations (it rejects the others)
        assert shared_bytes(kernel, subs, target) == stages * (bm + bn) * 64 * 2 + 1024


def test_register_a_layout_is_the_ptx_fragment() -> None:
    """A in registers (wgmma .m64nNk16 A fragment): register i of lane l holds A[16w + g + 8 * (i % 4 // 2),
    2t + 8 * (i // 4) + i % 2]; the 128 lanes cover the 64 x 16 tile exactly once."""
    lay = mma_layout(WGMMA[0], "a", M, K, n=64, a_in_registers=True)
    assert lay.tile == (64, 16) and lay.size == 8
    seen = set()
    for lane in range(128):
        w, g, t = lane // 32, lane % 32 // 4, lane % 4
        rows0, cols0 = (int(lay.seq(d).start.subs(LANE, lane)) for d in (M, K))
        for i, off in enumerate(lay.positions()):
            got = (rows0 + off[M], cols0 + off[K])
            assert got == (16 * w + g + 8 * (i % 4 // 2), 2 * t + 8 * (i // 4) + i % 2), (lane, i)
            seen.add(got)
    assert seen == set(itertools.product(range(64), range(16)))


@pytest.mark.parametrize("n", [16, 64, 128])
def test_accumulator_to_register_a_is_a_register_selection(n: int) -> None:
    """The 64 x n accumulator holds, per 16 columns j, the register-A tile j of the next wgmma in its
    registers 8j..8j+7 in every lane (P in attention: no data moves between lanes)."""
    from wavec.passes.convert_layouts import register_mapping

    src = mma_layout(WGMMA[0], "c", M, K, n=n)
    for j in range(n // 16):
        dst = mma_layout(WGMMA[0], "a", M, K, n=64, a_in_registers=True).offset({K: 16 * j})
        assert register_mapping(src, dst, 128) == tuple((0, 8 * j + q) for q in range(8))
