"""Unit tier: layout inference and expansion on small kernels (DESIGN §3, §4), and front-end errors.

Kernels are traced and run through the pass pipeline the way ``wc.compile`` does (``compiler._build``),
without emitting MLIR.  Expected counts and index expressions are derived by hand from the constraints
and the ISA fragment layouts, not read back from wavec.
"""

import inspect
import itertools

import pytest
import sympy
import torch.fx as fx
from kernel_fixtures import gemm_kernel

import wavec as wc
from wavec import Memory, Register, f16, f32
from wavec.errors import (
    ConstraintError,
    DTypeError,
    ExpansionError,
    IndexConflictError,
    OutsideKernelError,
    ShapeError,
    WavecError,
)
from wavec.frontend.constraints import ConstraintSet
from wavec.frontend.ops import MMA, Broadcast, GetResult, Iterate, Read, RegisterInit, Write
from wavec.frontend.tracing import Trace
from wavec.indexing import LANE, IndexSeq, MMAType
from wavec.indexing.symbols import WAVE, WORKGROUP, induction_symbol
from wavec.kernels import gemm as gemm_lib
from wavec.kernels.elementwise import make_copy, make_scale_shift
from wavec.passes.context import PassContext
from wavec.passes.pipeline import PIPELINE
from wavec.tuning.plan import DEFAULT_SUBS

M, N, K, P = wc.sym.M, wc.sym.N, wc.sym.K, wc.sym.P
BM, BN, BK = wc.sym.BLOCK_M, wc.sym.BLOCK_N, wc.sym.BLOCK_K
floor, Mod = sympy.floor, sympy.Mod
THIS_FILE = __file__


def run_passes(kernel: wc.WaveKernel, subs: dict, target: str = "sm_90", upto: str = "expand") -> Trace:
    """trace -> PassContext.build -> the pipeline's passes in order (as ``compiler._build``), stopping
    after ``upto`` (later passes such as load coarsening would change what is counted here)."""
    trace = kernel.trace()
    ctx = PassContext.build(trace, ConstraintSet(kernel.constraints, subs), target)
    names = [name for name, _ in PIPELINE]
    assert upto in names
    for name, fn in PIPELINE:
        fn(trace, ctx)
        if name == upto:
            break
    return trace


def nodes(g: fx.Graph, op: type) -> list[fx.Node]:
    return [n for n in g.nodes if n.meta.get("op") is op]


def loop_body(trace: Trace) -> fx.Graph:
    (body,) = trace.subgraphs.values()
    return body


def key_of(node: fx.Node) -> dict:
    return dict(node.meta["key"])


def same(a, b) -> bool:
    return sympy.simplify(sympy.sympify(a) - sympy.sympify(b)) == 0


def line_of(fn, text: str) -> int:
    """Line number in this file of the first line of ``fn``'s source containing ``text``."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


# ----- (a) expansion counts ---------------------------------------------------------------------------

GRIDS = [
    # (mma, threads, waves, BLOCK_M, BLOCK_N, BLOCK_K)
    (MMAType.NV_F32_16x8x16_F16, 32, (1, 1), 64, 16, 16),  # the 4x2 grid of DESIGN §4
    (MMAType.NV_F32_16x8x16_F16, 32, (1, 1), 64, 16, 32),
    (MMAType.NV_F32_16x8x16_F16, 32, (2, 2), 64, 64, 32),
    (MMAType.NV_F32_16x8x16_F16, 32, (1, 2), 16, 16, 48),
    (MMAType.NV_F32_16x8x16_BF16, 32, (2, 1), 64, 8, 16),
    (MMAType.F32_16x16x16_F16, 64, (1, 1), 64, 32, 32),
    (MMAType.F32_16x16x16_F16, 64, (2, 2), 64, 64, 16),
    (MMAType.F32_32x32x8_F16, 64, (1, 1), 64, 64, 16),
    (MMAType.F32_32x32x8_F16, 64, (2, 1), 64, 32, 8),
]


def make_gemm(
    dtype=f16, threads: int = 32, mma: MMAType = MMAType.NV_F32_16x8x16_F16, waves: tuple = (2, 2)
) -> wc.WaveKernel:
    """The GEMM of DESIGN §1 with operands read straight from global memory (no shared staging)."""
    cons = [
        wc.WorkgroupConstraint(M, BM, 0),
        wc.WorkgroupConstraint(N, BN, 1),
        wc.WaveConstraint(M, BM / waves[0]),
        wc.WaveConstraint(N, BN / waves[1]),
        wc.TilingConstraint(K, BK),
        wc.SchedulingConstraint(promote_operands=False),
        wc.HardwareConstraint(threads_per_wave=threads, mma_type=mma),
    ]
    return gemm_kernel(cons, dtype)


def _gemm(mma: MMAType, threads: int, waves: tuple) -> wc.WaveKernel:
    dtype = wc.bf16 if mma.spec.in_dtype == "bf16" else wc.f16
    return make_gemm(dtype, threads, mma, waves)


@pytest.mark.parametrize("mma,threads,waves,bm,bn,bk", GRIDS)
def test_gemm_expansion_counts(mma, threads, waves, bm, bn, bk) -> None:
    trace = run_passes(_gemm(mma, threads, waves), {BM: bm, BN: bn, BK: bk})
    s = mma.spec
    tm, tn, tk = bm // waves[0] // s.m, bn // waves[1] // s.n, bk // s.k
    body = loop_body(trace)
    reads = nodes(body, Read)
    a_reads = [r for r in reads if r.args[0].meta["capture_of"].name == "a"]
    b_reads = [r for r in reads if r.args[0].meta["capture_of"].name == "b"]
    assert len(a_reads) == tm * tk
    assert len(b_reads) == tn * tk
    assert len(reads) == (tm + tn) * tk
    assert len(nodes(body, MMA)) == tm * tn * tk
    # one accumulator per (m, n) tile: inits, loop-carried values, results and writes
    assert len(nodes(trace.graph, RegisterInit)) == tm * tn
    assert len([p for p in body.nodes if p.meta.get("role") == "iter_arg"]) == tm * tn
    assert len(nodes(trace.graph, GetResult)) == tm * tn
    assert len(nodes(trace.graph, Write)) == tm * tn
    (out,) = [n for n in body.nodes if n.op == "output"]
    assert len(out.args[0]) == tm * tn
    # every read clone covers a distinct tile
    assert len({tuple(sorted(key_of(r).items(), key=str)) for r in a_reads}) == tm * tk


def test_gemm_4x2_grid_reads_six_times_for_eight_mmas() -> None:
    trace = run_passes(make_gemm(waves=(1, 1)), {BM: 64, BN: 16, BK: 16})
    body = loop_body(trace)
    assert len(nodes(body, MMA)) == 8
    assert len(nodes(body, Read)) == 6
    # each A tile feeds the 2 mmas of its row, each B tile the 4 mmas of its column
    for r in nodes(body, Read):
        want = 2 if r.args[0].meta["capture_of"].name == "a" else 4
        assert len(r.users) == want, r.name


@pytest.mark.parametrize("waves,bm,bn,bk", [((1, 1), 64, 16, 16), ((2, 2), 64, 64, 32)])
def test_library_gemm_operand_reuse(waves, bm, bn, bk) -> None:
    """``wavec.kernels.gemm``: each mma's A and B operands are register tiles shared structurally."""
    kernel = gemm_lib.make_gemm(waves=waves)
    trace = run_passes(kernel, {**DEFAULT_SUBS, BM: bm, BN: bn, BK: bk})
    tm, tn, tk = bm // waves[0] // 16, bn // waves[1] // 8, bk // 16
    mmas = nodes(loop_body(trace), MMA)
    assert len(mmas) == tm * tn * tk
    a_ops, b_ops = {m.args[0] for m in mmas}, {m.args[1] for m in mmas}
    assert len(a_ops) == tm * tk and len(b_ops) == tn * tk
    assert all(x.meta["op"] is Read for x in a_ops | b_ops)


# ----- (b) accumulator chain --------------------------------------------------------------------------


@pytest.mark.parametrize("mma,threads,waves,bm,bn,bk", [GRIDS[1], GRIDS[3], GRIDS[6], GRIDS[7]])
def test_mma_accumulator_chain_along_k(mma, threads, waves, bm, bn, bk) -> None:
    trace = run_passes(_gemm(mma, threads, waves), {BM: bm, BN: bn, BK: bk})
    body = loop_body(trace)
    iter_args = {tuple(sorted(key_of(p).items(), key=str)): p for p in body.nodes if p.meta.get("role") == "iter_arg"}
    mmas = nodes(body, MMA)
    by_key = {(key_of(n)[M], key_of(n)[N], key_of(n)[K]): n for n in mmas}
    kc = bk // mma.spec.k
    assert len(by_key) == len(mmas)
    for (i, j, kk), node in by_key.items():
        a, b, acc = node.args
        assert key_of(a) == {M: i, K: kk} and a.args[0].meta["capture_of"].name == "a"
        assert key_of(b) == {N: j, K: kk} and b.args[0].meta["capture_of"].name == "b"
        if kk == 0:
            assert acc is iter_args[tuple(sorted({M: i, N: j}.items(), key=str))]
        else:
            assert acc is by_key[(i, j, kk - 1)]
    (out,) = [n for n in body.nodes if n.op == "output"]
    tm, tn = bm // waves[0] // mma.spec.m, bn // waves[1] // mma.spec.n
    assert list(out.args[0]) == [by_key[(i, j, kc - 1)] for i in range(tm) for j in range(tn)]


def test_loop_results_feed_writes_of_the_same_tile() -> None:
    trace = run_passes(make_gemm(waves=(1, 1)), {BM: 32, BN: 16, BK: 16})
    (it,) = nodes(trace.graph, Iterate)
    inits = list(it.args[0])
    assert [key_of(x) for x in inits] == [{M: i, N: j} for i in range(2) for j in range(2)]
    for w in nodes(trace.graph, Write):
        res = w.args[0]
        assert res.meta["op"] is GetResult and key_of(res) == key_of(w)
        assert inits[res.kwargs["index"]].meta["layout"].equals(w.meta["layout"])


# ----- (c) layouts with workgroup / wave / loop offsets -----------------------------------------------


def test_gemm_read_layouts_symbolic_nvidia() -> None:
    trace = run_passes(make_gemm(waves=(2, 2)), {BM: 64, BN: 64, BK: 32})
    body = loop_body(trace)
    g, t, wg, wave, kv = floor(LANE / 4), Mod(LANE, 4), WORKGROUP, WAVE, induction_symbol(K)
    checked = 0
    for r in nodes(body, Read):
        lay, key = r.meta["layout"], key_of(r)
        kk = key[K]
        assert same(lay.seq(K).start, 32 * kv + 2 * t + 16 * kk)
        assert lay.seq(K).levels == ((2, 1), (2, 8)) and lay.tile_of(K) == 16
        if r.args[0].meta["capture_of"].name == "a":
            assert lay.dims == (M, K)
            assert same(lay.seq(M).start, 64 * wg[0] + 32 * wave[0] + g + 16 * key[M])
            assert lay.seq(M).levels == ((2, 8),)
        else:
            assert lay.dims == (N, K)
            assert same(lay.seq(N).start, 64 * wg[1] + 32 * wave[1] + g + 8 * key[N])
            assert lay.seq(N).levels == ()
        checked += 1
    assert checked == (2 + 4) * 2
    # a wrong expectation is rejected (guards against a vacuous `same`)
    r0 = nodes(body, Read)[0]
    assert not same(r0.meta["layout"].seq(K).start, 32 * kv + 2 * t + 16 * key_of(r0)[K] + 1)


def test_gemm_write_layouts_have_no_loop_offset() -> None:
    trace = run_passes(make_gemm(waves=(2, 2)), {BM: 64, BN: 64, BK: 32})
    g, t = floor(LANE / 4), Mod(LANE, 4)
    writes = nodes(trace.graph, Write)
    assert len(writes) == 2 * 4
    for w in writes:
        lay, key = w.meta["layout"], key_of(w)
        assert same(lay.seq(M).start, 64 * WORKGROUP[0] + 32 * WAVE[0] + g + 16 * key[M])
        assert same(lay.seq(N).start, 64 * WORKGROUP[1] + 32 * WAVE[1] + 2 * t + 8 * key[N])
        assert induction_symbol(K) not in lay.seq(M).start.free_symbols | lay.seq(N).start.free_symbols
        assert lay.seq(M).levels == ((2, 8),) and lay.seq(N).levels == ((2, 1),)


def test_gemm_read_layouts_symbolic_amd() -> None:
    trace = run_passes(
        make_gemm(wc.f16, 64, MMAType.F32_32x32x8_F16, (2, 1)), {BM: 128, BN: 32, BK: 16}, target="gfx942"
    )
    body = loop_body(trace)
    for r in nodes(body, Read):
        lay, key = r.meta["layout"], key_of(r)
        assert same(lay.seq(K).start, 16 * induction_symbol(K) + 4 * floor(LANE / 32) + 8 * key[K])
        assert lay.seq(K).levels == ((4, 1),)
        if r.args[0].meta["capture_of"].name == "a":
            assert same(lay.seq(M).start, 128 * WORKGROUP[0] + 64 * WAVE[0] + Mod(LANE, 32) + 32 * key[M])
        else:
            assert same(lay.seq(N).start, 32 * WORKGROUP[1] + 32 * WAVE[1] + Mod(LANE, 32))
    for m in nodes(body, MMA):
        c = m.meta["layout"]
        assert same(c.seq(M).start, 128 * WORKGROUP[0] + 64 * WAVE[0] + 4 * floor(LANE / 32) + 32 * key_of(m)[M])
        assert c.seq(M).levels == ((4, 1), (4, 8))


def test_mma_anchor_outranks_write_default() -> None:
    """The value written is an mma result: it keeps the C layout (priority 3), not the write default (1)."""
    trace = run_passes(make_gemm(), {BM: 64, BN: 64, BK: 32}, upto="infer_indices")
    (w,) = nodes(trace.graph, Write)
    res = w.args[0]
    assert res.meta["layout_prio"] == 3
    assert res.meta["layout"].seq(N).equals(IndexSeq(64 * WORKGROUP[1] + 32 * WAVE[1] + 2 * Mod(LANE, 4), ((2, 1),)))


# ----- (d) conflicts ----------------------------------------------------------------------------------

_CONFLICT_CONSTRAINTS = [
    wc.WorkgroupConstraint(M, 32, 0),
    wc.WorkgroupConstraint(N, 16, 1),
    wc.WorkgroupConstraint(P, 16, 2),
    wc.TilingConstraint(K, 16),
    wc.SchedulingConstraint(promote_operands=False),
    wc.HardwareConstraint(32, MMAType.NV_F32_16x8x16_F16),
]


def _x_as_a_and_b(
    x: Memory[M, K, f16], y: Memory[N, K, f16], y2: Memory[P, K, f16], c: Memory[M, N, f32], d: Memory[P, M, f32]
):
    xr = wc.read(x)
    acc = Register[M, N, f32](0.0)
    acc2 = Register[P, M, f32](0.0)
    r1 = wc.mma(xr, wc.read(y), acc)  # x is the A operand: M holds g + {0, 8}
    r2 = wc.mma(wc.read(y2), xr, acc2)  # x is the B operand: M holds g only
    wc.write(r1, c)
    wc.write(r2, d)


def test_equal_priority_conflict_names_both_lines() -> None:
    kernel = wc.wave(_CONFLICT_CONSTRAINTS)(_x_as_a_and_b)
    with pytest.raises(IndexConflictError) as info:
        run_passes(kernel, {})
    msg = str(info.value)
    first = line_of(_x_as_a_and_b, "r1 = wc.mma")
    second = line_of(_x_as_a_and_b, "r2 = wc.mma")
    assert f"{THIS_FILE}:{first}" in msg
    assert f"{THIS_FILE}:{second}" in msg
    assert "r1 = wc.mma(xr, wc.read(y), acc)" in msg and "r2 = wc.mma(wc.read(y2), xr, acc2)" in msg


def _x_as_a_twice(x: Memory[M, K, f16], y: Memory[N, K, f16], y2: Memory[N, K, f16], c: Memory[M, N, f32]):
    xr = wc.read(x)
    acc = Register[M, N, f32](0.0)
    wc.write(wc.mma(xr, wc.read(y2), wc.mma(xr, wc.read(y), acc)), c)


def test_equal_priority_same_layout_is_not_a_conflict() -> None:
    kernel = wc.wave(_CONFLICT_CONSTRAINTS)(_x_as_a_twice)
    trace = run_passes(kernel, {}, upto="infer_indices")
    xr = nodes(trace.graph, Read)[0]
    assert xr.meta["layout_prio"] == 3 and xr.meta["layout"].seq(M).levels == ((2, 8),)


def _mma_into_mma(q: Memory[M, K, f16], k: Memory[N, K, f16], v: Memory[P, N, f16], o: Memory[M, P, f32]):
    s = wc.mma(wc.read(q), wc.read(k), Register[M, N, f32](0.0))
    wc.write(wc.mma(wc.cast(s, f16), wc.read(v), Register[M, P, f32](0.0)), o)


def test_c_layout_fed_to_a_operand_is_converted() -> None:
    """An mma result (C layout over [M, N]) used as the next mma's A operand goes through a conversion:
    its input keeps the C layout, its output takes the A layout (no conflict)."""
    from wavec.frontend.ops import ConvertLayout

    kernel = wc.wave(_CONFLICT_CONSTRAINTS)(_mma_into_mma)
    trace = run_passes(kernel, {}, upto="infer_indices")
    (conv,) = nodes(trace.graph, ConvertLayout)
    assert conv.kwargs["via"] == "registers"
    assert conv.args[0].meta["layout"].tile == (16, 8) and conv.meta["layout"].tile == (16, 16)


# ----- (e) defaults from vector_shapes, broadcast operands --------------------------------------------


@pytest.mark.parametrize("dtype,threads", [(f16, 32), (f32, 32), (f16, 64), (wc.bf16, 64)])
def test_copy_default_layout(dtype, threads: int) -> None:
    ept = 16 // dtype.bytes
    bn = 2 * threads * ept
    trace = run_passes(make_copy(dtype, threads), {BM: 4, BN: bn})
    reads, writes = nodes(trace.graph, Read), nodes(trace.graph, Write)
    assert len(reads) == len(writes) == 2  # the workgroup's N tile is two wave tiles of threads * ept
    for r in reads:
        lay = r.meta["layout"]
        n0 = key_of(r)[N] * threads * ept
        assert same(lay.seq(N).start, bn * WORKGROUP[1] + ept * Mod(LANE, threads) + n0)
        assert lay.seq(N).levels == ((ept, 1),) and lay.size == ept
        assert same(lay.seq(M).start, 4 * WORKGROUP[0] + WAVE[0]) and lay.seq(M).count == 1
        covered = sorted(x for lane in range(threads) for x in lay.seq(N).elements({LANE: lane, WORKGROUP[1]: 0}))
        assert covered == list(range(n0, n0 + threads * ept))
    for w in writes:
        assert w.meta["layout"].equals(w.args[0].meta["layout"])


def _two_d_vector_shapes(x: Memory[M, N, f16], y: Memory[M, N, f16]):
    wc.write(wc.read(x), y)


def test_default_layout_spreads_lanes_fastest_dim_first() -> None:
    cons = [
        wc.WorkgroupConstraint(M, 8, 0),
        wc.WorkgroupConstraint(N, 32, 1),
        wc.HardwareConstraint(32, vector_shapes={M: 4, N: 16}),
    ]
    trace = run_passes(wc.wave(cons)(_two_d_vector_shapes), {})
    reads = nodes(trace.graph, Read)
    assert sorted((key_of(r)[M], key_of(r)[N]) for r in reads) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    lay = next(r for r in reads if key_of(r) == {M: 0, N: 0}).meta["layout"]
    # 16 lanes along N (1 element each), the remaining 2 lane groups along M (2 rows each)
    assert same(lay.seq(N).start, 32 * WORKGROUP[1] + Mod(LANE, 16)) and lay.seq(N).count == 1
    assert same(lay.seq(M).start, 8 * WORKGROUP[0] + 2 * Mod(floor(LANE / 16), 2))
    assert lay.seq(M).levels == ((2, 1),)
    cells = sorted(
        (m, n)
        for lane in range(32)
        for m in lay.seq(M).elements({LANE: lane, WORKGROUP[0]: 0})
        for n in lay.seq(N).elements({LANE: lane, WORKGROUP[1]: 0})
    )
    assert cells == sorted(itertools.product(range(4), range(16)))


def test_small_vector_shapes_replicate_over_the_lanes() -> None:
    """16 elements on 32 lanes (issue #20 item 2): lanes 16..31 hold copies of lanes 0..15's elements (their
    coordinate wraps), each element is held by exactly two lanes."""
    hw = wc.HardwareConstraint(32, None, {M: 1, N: 16})
    cons = [wc.WorkgroupConstraint(M, 8, 0), wc.WorkgroupConstraint(N, 96, 1), hw]
    trace = run_passes(wc.wave(cons)(_two_d_vector_shapes), {})
    lay = next(r for r in nodes(trace.graph, Read) if key_of(r) == {M: 0, N: 0}).meta["layout"]
    assert same(lay.seq(N).start, 96 * WORKGROUP[1] + Mod(LANE, 16)) and lay.size == 1
    held = [(m, n) for lane in range(32) for m in lay.seq(M).elements({LANE: lane, WORKGROUP[0]: 0})
            for n in lay.seq(N).elements({LANE: lane, WORKGROUP[1]: 0})]  # fmt: skip
    assert sorted(held) == sorted(2 * [(0, n) for n in range(16)])


@pytest.mark.parametrize("shapes,match", [({M: 1}, "no layout anchors dimension N"), ({M: 1, N: 48}, "does not split")])
def test_bad_vector_shapes(shapes: dict, match: str) -> None:
    cons = [wc.WorkgroupConstraint(M, 8, 0), wc.WorkgroupConstraint(N, 96, 1), wc.HardwareConstraint(32, None, shapes)]
    with pytest.raises(ConstraintError, match=match):
        run_passes(wc.wave(cons)(_two_d_vector_shapes), {})


def test_broadcast_operand_is_restricted() -> None:
    trace = run_passes(make_scale_shift(), {BM: 4, BN: 512})
    bias_reads = [r for r in nodes(trace.graph, Read) if r.args[0].name == "bias"]
    full_reads = [r for r in nodes(trace.graph, Read) if r.args[0].name != "bias"]
    # bias [N] is read once per N tile, not once per (M, N) tile
    assert len(bias_reads) == 2 and len(full_reads) == 4
    for r in bias_reads:
        lay = r.meta["layout"]
        assert lay.dims == (N,)
        twin = next(f for f in full_reads if key_of(f)[N] == key_of(r)[N])
        assert lay.seq(N).equals(twin.meta["layout"].seq(N))
        assert lay.order == ((N, 0),)
    for b in nodes(trace.graph, Broadcast):
        assert b.meta["layout"].dims == (N,)
        assert b.args[0] in bias_reads


def _gemm_bias_epilogue(a: Memory[M, K, f16], b: Memory[N, K, f16], bias: Memory[N, f32], c: Memory[M, N, f16]):
    acc = Register[M, N, f32](0.0)

    @wc.iterate(K, init_args=[acc])
    def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
        return wc.mma(wc.read(a), wc.read(b), acc)

    wc.write(wc.cast(body + wc.read(bias)[None, :], f16), c)


def test_broadcast_operand_takes_the_mma_layout() -> None:
    trace = run_passes(wc.wave(make_gemm().constraints)(_gemm_bias_epilogue), {BM: 64, BN: 64, BK: 32})
    bias_reads = [r for r in nodes(trace.graph, Read) if r.args[0].name == "bias"]
    assert sorted(key_of(r)[N] for r in bias_reads) == [0, 1, 2, 3]  # one per N tile of the wave, not per M
    for r in bias_reads:
        want = IndexSeq(64 * WORKGROUP[1] + 32 * WAVE[1] + 2 * Mod(LANE, 4) + 8 * key_of(r)[N], ((2, 1),))
        assert r.meta["layout"].seq(N).equals(want)


def _factory_with_string_annotations(dtype):
    @wc.wave(make_gemm().constraints)
    def k(a: "Memory[M, K, dtype]", c: "Memory[M, K, dtype]"):  # dtype: the factory local
        wc.write(wc.read(a), c)

    return k


def test_string_annotations_see_factory_locals() -> None:
    trace = _factory_with_string_annotations(f16).trace()
    assert [a.type.dtype for a in trace.args] == [f16, f16]


# ----- (f) errors with source locations ---------------------------------------------------------------


def test_read_outside_kernel() -> None:
    with pytest.raises(OutsideKernelError, match=r"wc\.read\(\)"):
        wc.read(None)
    with pytest.raises(OutsideKernelError, match=r"wc\.mma\(\)"):
        wc.mma(None, None, None)


def _mma_shape_mismatch(a: Memory[M, K, f16], b: Memory[N, P, f16], c: Memory[M, N, f32]):
    acc = Register[M, N, f32](0.0)
    wc.write(wc.mma(wc.read(a), wc.read(b), acc), c)


def test_mma_shape_mismatch_points_at_kernel_line() -> None:
    kernel = wc.wave(_CONFLICT_CONSTRAINTS)(_mma_shape_mismatch)
    with pytest.raises(ShapeError) as info:
        wc.compile(kernel, {}, target="sm_90", backend="cuda", cache=False)
    msg = str(info.value)
    assert msg.startswith(f"{THIS_FILE}:{line_of(_mma_shape_mismatch, 'wc.write(wc.mma')}")
    assert "do not contract" in msg and "[N, P]" in msg
    assert info.value.loc.filename == THIS_FILE


def _mma_dtype_mismatch(a: Memory[M, K, f16], b: Memory[N, K, wc.bf16], c: Memory[M, N, f32]):
    acc = Register[M, N, f32](0.0)
    wc.write(wc.mma(wc.read(a), wc.read(b), acc), c)


def _write_dtype_mismatch(a: Memory[M, N, f32], c: Memory[M, N, f16]):
    wc.write(wc.read(a), c)


@pytest.mark.parametrize("fn,text", [(_mma_dtype_mismatch, "wc.write(wc.mma"), (_write_dtype_mismatch, "wc.write")])
def test_dtype_mismatch_points_at_kernel_line(fn, text: str) -> None:
    kernel = wc.wave(_CONFLICT_CONSTRAINTS)(fn)
    with pytest.raises(DTypeError) as info:
        kernel.trace()
    assert str(info.value).startswith(f"{THIS_FILE}:{line_of(fn, text)}")
    assert "f16" in str(info.value) and ("bf16" in str(info.value) or "f32" in str(info.value))


def _gemm_body(a: Memory[M, K, f16], b: Memory[N, K, f16], c: Memory[M, N, f32]):
    acc = Register[M, N, f32](0.0)

    @wc.iterate(K, init_args=[acc])
    def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
        return wc.mma(wc.read(a), wc.read(b), acc)

    wc.write(body, c)


def test_missing_tiling_constraint() -> None:
    cons = [c for c in make_gemm().constraints if not isinstance(c, wc.TilingConstraint)]
    with pytest.raises(WavecError) as info:
        run_passes(wc.wave(cons)(_gemm_body), {BM: 64, BN: 64})
    assert isinstance(info.value, (ExpansionError, ConstraintError))
    msg = str(info.value)
    assert "TilingConstraint" in msg and "K" in msg
    assert info.value.loc is not None and info.value.loc.filename == THIS_FILE
    assert line_of(_gemm_body, "@wc.iterate") <= info.value.loc.line <= line_of(_gemm_body, "return wc.mma")


def test_wave_tile_must_divide_workgroup_tile() -> None:
    cons = [
        wc.WorkgroupConstraint(M, BM, 0),
        wc.WorkgroupConstraint(N, BN, 1),
        wc.WaveConstraint(M, 48),
        wc.TilingConstraint(K, BK),
        wc.SchedulingConstraint(promote_operands=False),
        wc.HardwareConstraint(32, MMAType.NV_F32_16x8x16_F16),
    ]
    kernel = wc.wave(cons)(_gemm_body)
    with pytest.raises(
        ConstraintError, match="WaveConstraint\\(M, 48\\) has a tile of 48, which does not divide the workgroup tile 64"
    ):
        wc.compile(kernel, {BM: 64, BN: 64, BK: 32}, target="sm_90", backend="cuda", cache=False)
    run_passes(kernel, {BM: 96, BN: 64, BK: 32})  # divides: fine


def test_symbolic_wave_tile_must_be_integral() -> None:
    with pytest.raises(ConstraintError, match="positive integer"):
        ConstraintSet(make_gemm(waves=(3, 1)).constraints, {BM: 64, BN: 64, BK: 32})


def test_unbound_tile_symbol() -> None:
    with pytest.raises(ConstraintError, match="BLOCK_K"):
        ConstraintSet(make_gemm().constraints, {BM: 64, BN: 64})


def test_mma_type_must_match_wave_size() -> None:
    with pytest.raises(ConstraintError, match="64 threads"):
        wc.HardwareConstraint(threads_per_wave=32, mma_type=MMAType.F32_16x16x16_F16)


def test_mma_needs_mma_type() -> None:
    cons = [
        wc.WorkgroupConstraint(M, 64, 0),
        wc.WorkgroupConstraint(N, 64, 1),
        wc.TilingConstraint(K, 32),
        wc.HardwareConstraint(32, vector_shapes={M: 1, N: 64}),
    ]
    with pytest.raises(ConstraintError, match="mma_type") as info:
        run_passes(wc.wave(cons)(_gemm_body), {})
    assert info.value.loc is not None and info.value.loc.filename == THIS_FILE


def test_instruction_tile_must_divide_wave_tile() -> None:
    """Checked where the layout is chosen (infer_indices), in the author's terms."""
    with pytest.raises(
        ConstraintError,
        match=r"BLOCK_M = 24 gives WaveConstraint\(M, BLOCK_M\) a tile of 24 .*not a "
        "multiple of the 16 rows of one NV_F32_16x8x16_F16 mma instruction",
    ):
        run_passes(make_gemm(waves=(1, 1)), {BM: 24, BN: 16, BK: 16})


def test_library_kernel_errors_point_at_the_kernel_line() -> None:
    with pytest.raises(WavecError) as info:
        wc.compile(gemm_lib.make_gemm(wc.bf16), DEFAULT_SUBS, target="sm_90", backend="cuda", cache=False)
    assert info.value.loc is not None
    assert info.value.loc.filename == gemm_lib.__file__


def _mma_outside_loop(a: Memory[M, K, f16], b: Memory[N, K, f16], c: Memory[M, N, f32]):
    wc.write(wc.mma(wc.read(a), wc.read(b), Register[M, N, f32](0.0)), c)


def test_reduction_dim_outside_its_loop_is_an_error() -> None:
    cons = [
        wc.WorkgroupConstraint(M, 16, 0),
        wc.WorkgroupConstraint(N, 8, 1),
        wc.TilingConstraint(K, 16),
        wc.SchedulingConstraint(promote_operands=False),
        wc.HardwareConstraint(32, MMAType.NV_F32_16x8x16_F16),
    ]
    with pytest.raises(WavecError):
        wc.compile(wc.wave(cons)(_mma_outside_loop), {}, target="sm_90", backend="cuda", cache=False)
