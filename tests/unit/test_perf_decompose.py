"""``wavec.perf.decompose`` against hand counts: GEMM FLOPs and bytes, softmax bytes and exp2, attention's
exp2 and causal triangle (unequal tasks), and the evaluator on a hand-written MLIR function."""

from __future__ import annotations

import gzip
import math
import re
from pathlib import Path

import numpy as np
import pytest

import wavec as wc
from wavec.errors import ArgumentError, PerfError
from wavec.kernels import attention as A
from wavec.kernels import rows as R
from wavec.kernels.gemm import build_gemm, make_gemm
from wavec.perf import decompose
from wavec.perf.features import row_alignment
from wavec.perf.mlir_text import parse_kernel
from wavec.tuning.plan import DEFAULT_PLAN, GemmRequest, plan_matmul

BM, BN, BK = DEFAULT_PLAN.block_m, DEFAULT_PLAN.block_n, DEFAULT_PLAN.block_k


@pytest.fixture(scope="module")
def gemm():
    return wc.compile(make_gemm(), DEFAULT_PLAN.subs, target="sm_90", backend="emulator", cache=False)


def _attention(causal: bool, mma: str, seq: int):
    subs, waves = A.attention_config(128, seq, None, mma, causal)
    split = A.SPLIT_EPILOGUE[mma]
    kernel = A.make_attention(wc.f16, "bhsd", causal, waves, mma, split_epilogue=split)
    target = "sm_90a" if mma == "wgmma" else "sm_90"
    return wc.compile(kernel, subs, target=target, backend="emulator", cache=False), subs


@pytest.mark.parametrize("m,n,k", [(256, 256, 256), (512, 192, 1024), (100, 70, 48)])
def test_gemm_flops_and_bytes(gemm, m, n, k):
    d = decompose(gemm, (m, k), (n, k))
    tiles_m, tiles_n, ktiles = -(-m // BM), -(-n // BN), -(-k // BK)
    assert d.tasks == tiles_m * tiles_n and d.threads == 128
    # Edge tiles compute padded: every workgroup runs full BM x BN x BK steps.
    assert d.total("tensor:mma.sync:f16") == 2 * (tiles_m * BM) * (tiles_n * BN) * (ktiles * BK)
    if (m, n, k) == (256, 256, 256):
        assert d.total("tensor") == 2 * m * n * k
    # Stores are masked per element pair: exactly C.
    assert d.total("global_write") == m * n * 4
    # cp.async reads A and B panels (rows clamped, K tails by byte count); the pipelined loop's last
    # iteration prefetches min(i + 1, last): one K tile more than the loop needs.
    panel = (BM + BN) * 2
    cols = [min(BK, max(0, k - j * BK)) for j in range(ktiles)] + [min(BK, k - (ktiles - 1) * BK)]
    assert d.total("global_read") == d.tasks * panel * sum(cols)
    assert d.footprint == {"read": (m + n) * k * 2, "write": m * n * 4}
    assert [set(t.tolist()) for t in d.trips.values()] == [{ktiles}]
    assert not d.notes
    # every binding's launch shape, from the shapes of the inputs alone (C's from the symbols)
    assert d.tensors == [((m, k), "f16", False), ((n, k), "f16", False), ((m, n), "f32", True)]
    # row pitches: K x 2 bytes read (48 -> 96 B: 32-aligned), N x 4 bytes written (70 -> 280 B: 8-aligned)
    want = {256: (128.0, 128.0), 512: (128.0, 128.0), 100: (32.0, 8.0)}[m]
    assert row_alignment(d.tensors) == want


def test_gemm_wgmma_persistent_exact():
    m, n, k = 4096, 2048, 512
    plan = plan_matmul(m, n, k, GemmRequest(mma="wgmma"), "H100")
    kernel = wc.compile(build_gemm(plan, target="sm_90a"), plan.subs, target="sm_90a", backend="emulator", cache=False)
    with pytest.raises(ArgumentError, match="SM count"):
        decompose(kernel, (m, k), (n, k))
    d = decompose(kernel, (m, k), (n, k), gpu="h100")
    tiles = -(-m // plan.block_m) * -(-n // plan.block_n)
    assert d.tasks == min(132, tiles)
    assert d.total("tensor:wgmma:f16") == 2 * m * n * k
    # TMA boxes: each tile reads its A and B panels once over K.
    assert d.total("global_read") == tiles * (plan.block_m + plan.block_n) * k * 2
    assert d.total("global_write") == m * n * 4
    # 256 tiles over 132 persistent CTAs: 124 run two tiles, 8 run one.
    per_tile = 2 * plan.block_m * plan.block_n * k
    counts = np.bincount((d.per_task("tensor") / per_tile).astype(int))
    assert counts.tolist() == [0, 2 * 132 - tiles, tiles - 132]
    assert not d.notes


@pytest.mark.parametrize("m,n", [(999, 3000), (64, 4096)])
def test_softmax_bytes_and_exp2(m, n):
    kernel = wc.compile(
        R.make_softmax_rows(wc.f16, loop=False, vec=8, waves_per_row=4),
        {wc.sym.BLOCK_N: 4096},
        target="sm_90",
        backend="emulator",
        cache=False,
    )
    d = decompose(kernel, (m, n))
    assert d.total("global_read") == m * n * 2 and d.total("global_write") == m * n * 2
    rows_per_wg = d.threads // 128
    assert d.tasks == -(-m // rows_per_wg)
    # Compute is not masked, memory is: exp2 over the whole 4096-wide tile of every row of every workgroup
    # (an odd M's last row too) in both passes, and one rescale exp2 per row in each of its 128 threads.
    rows = d.tasks * rows_per_wg
    assert d.total("xu:exp2") == 2 * rows * 4096 + rows * 128
    assert d.total("xu:rcp") == rows * 128


def test_attention_exp2_and_flops():
    b, h, s, dim = 1, 2, 512, 128
    kernel, subs = _attention(False, "mma_sync", s)
    d = decompose(kernel, (b, h, s, dim), (b, h, s, dim), (b, h, s, dim))
    assert d.total("tensor:mma.sync:f16") == 4 * b * h * s * s * dim
    bn = subs[wc.sym.BLOCK_N]
    # One exp2 per score, plus the running-max correction of each row per key block in the 4 lanes
    # that hold the row.
    assert d.total("xu:exp2") == b * h * s * s + b * h * s * (s // bn) * 4
    assert d.total("global_write") == b * h * s * dim * 2
    assert not d.notes


@pytest.mark.parametrize("mma", ["mma_sync", "wgmma"])
def test_attention_causal_triangle(mma):
    b, h, s, dim = 1, 1, 1024, 128
    kernel, subs = _attention(True, mma, s)
    d = decompose(kernel, (b, h, s, dim), (b, h, s, dim), (b, h, s, dim))
    bm, bn = subs[wc.sym.BLOCK_M], subs[wc.sym.BLOCK_N]
    flops = d.per_task("tensor")
    assert len(set(flops.tolist())) == s // bm  # every query tile does a different amount of work
    # Query tile i visits key blocks 0 .. ceil((i + 1) * bm / bn) - 1.
    visits = sum(math.ceil((i + 1) * bm / bn) for i in range(s // bm))
    assert d.total("tensor") == 4 * dim * bm * bn * visits * b * h
    assert d.total("xu:exp2") >= visits * bm * bn  # the scores, plus row corrections
    assert np.sort(flops).tolist() == sorted(4 * dim * bm * bn * math.ceil((i + 1) * bm / bn) for i in range(s // bm))


def test_bad_shapes_name_the_argument(gemm):
    with pytest.raises(ArgumentError, match="shapes"):
        decompose(gemm, (64, 64))
    with pytest.raises(ArgumentError, match="'b'.*dimension K"):
        decompose(gemm, (64, 64), (64, 32))


HAND_MLIR = """
func.func @k() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %n = hal.interface.constant.load layout(#pl) ordinal(0) : i32
  %nn = arith.index_castui %n : i32 to index
  %m = hal.interface.binding.subspan layout(#pl) binding(0) alignment(16) offset(%c0) : memref<?xf32>{%nn}
  %t = gpu.thread_id x
  %b = gpu.block_id x
  %end = arith.addi %b, %c1 : index
  scf.for %i = %c0 to %end step %c1 {
    %lo = arith.cmpi ult, %t, %c4 : index
    scf.if %lo {
      %v = vector.load %m[%i] : memref<?xf32>, vector<4xf32>
      %e = math.exp2 %v : vector<4xf32>
    } else {
      %x = arith.mulf %cst, %cst : f32
    }
  }
  return
}
"""


def test_walker_on_hand_mlir():
    """Workgroup b runs b + 1 iterations; threads 0..3 load 16 bytes and take 4 exp2, the rest multiply."""
    from wavec.perf.demand import Demand
    from wavec.perf.evaluate import Walker

    ops = parse_kernel(HAND_MLIR)
    rules = Demand((), None, 32)
    w = Walker(ops, [7], (5, 1, 1), (32, 1, 1), 0, 5, rules.count, rules.value_of)
    w.run()
    trips = np.arange(1, 6)
    assert [t.tolist() for t in w.trips.values()] == [trips.tolist()]
    assert w.counts["global_read"].tolist() == (trips * 4 * 16).tolist()
    assert w.counts["xu:exp2"].tolist() == (trips * 4 * 4).tolist()
    assert w.counts["fma:f32"].tolist() == (trips * 28).tolist()


def test_data_dependent_loop_bound_is_an_error():
    text = HAND_MLIR.replace("%end = arith.addi %b, %c1 : index", "%end = memref.load %m[%c0] : memref<?xf32>")
    from wavec.perf.demand import Demand
    from wavec.perf.evaluate import Walker

    rules = Demand((), None, 32)
    w = Walker(parse_kernel(text), [7], (1, 1, 1), (32, 1, 1), 0, 1, rules.count, rules.value_of)
    with pytest.raises(PerfError, match="depend on data"):
        w.run()


GOLDEN = sorted((Path(__file__).parents[1] / "golden" / "mlir").glob("*.mlir.gz"))


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name.removesuffix(".mlir.gz"))
def test_every_golden_kernel_op_has_a_rule(path):
    """Every op of every golden kernel (CUDA, Hopper, ROCm) is counted or known to cost nothing, and two
    workgroups of each evaluate (sizes 256, one 64x64 f16 tensor map where the kernel has a map binding)."""
    from wavec.perf.demand import Demand
    from wavec.perf.evaluate import Walker
    from wavec.runtime.tensor_map import TensorMapSpec

    text = gzip.open(path, "rt").read()
    size = re.search(r"workgroup_size = \[(\d+), (\d+), (\d+)\]", text)
    assert size, path.name
    block = (int(size.group(1)), int(size.group(2)), int(size.group(3)))
    maps = re.search(r"binding\((\d+)\)[^\n]*: memref<\d+xi64>", text)
    spec = (TensorMapSpec(0, "f16", (64, 64), 128),) if maps else ()
    rules = Demand(spec, int(maps.group(1)) if maps else None, 64 if "gfx942" in text[:2000] else 32)
    walker = Walker(parse_kernel(text), [256] * 16, (2, 1, 1), block, 0, 2, rules.count, rules.value_of)
    walker.run()
    assert not rules.unknown, rules.unknown
    assert not walker.notes, walker.notes
    assert walker.counts["global_write"][0] > 0 and walker.counts["global_read"][0] > 0  # workgroup 0 works


def test_gemm_mfma_on_gfx942():
    from wavec.perf.gpus import GPUS
    from wavec.perf.library import library_launch

    m, n, k = 512, 256, 1024
    kernel, shapes, _, _ = library_launch("gemm", (m, n, k), GPUS["mi300x"])
    d = decompose(kernel, *shapes)
    assert d.target == "gfx942" and d.wave == 64
    assert d.total("tensor:mfma:f16") == 2 * m * n * k
    assert d.total("global_write") == m * n * 2  # C in f16, as matmul writes it
    assert d.shared_bytes > 0  # from the MLIR's workgroup allocations: the HSACO metadata has none


IDS_IN_LOOP = """
func.func @k() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %m = hal.interface.binding.subspan layout(#pl) binding(0) alignment(16) offset(%c0) : memref<?xf32>{%c4}
  %t = gpu.thread_id x
  scf.for %i = %c0 to %c4 step %c1 {
    %b = gpu.block_id x
    %lim = arith.addi %b, %i : index
    %in = arith.cmpi ult, %t, %lim : index
    scf.if %in {
      %v = memref.load %m[%i] : memref<?xf32>
    }
  }
  return
}
"""


def test_walker_ids_read_inside_a_loop():
    """Workgroup b, iteration i: threads below b + i load 4 bytes (ids made inside a loop broadcast right)."""
    from wavec.perf.demand import Demand
    from wavec.perf.evaluate import Walker

    rules = Demand((), None, 32)
    w = Walker(parse_kernel(IDS_IN_LOOP), [], (3, 1, 1), (32, 1, 1), 0, 3, rules.count, rules.value_of)
    w.run()
    assert w.counts["global_read"].tolist() == [4 * sum(b + i for i in range(4)) for b in range(3)]


def test_split_kv_decode_pads_query_rows_to_the_tile():
    """Decode attention: K and V are read once, and the tensor pipe computes every split's full BLOCK_M x N
    tile though only QL x G query rows are real."""
    from wavec.kernels import decode as dec

    group, dim = 4, 128
    block_n, waves, stages = dec.decode_config(dim, group)
    subs = dec.decode_subs(dim, group, block_n, waves, stages)
    kernel = wc.compile(dec.make_decode_split(wc.f16, group), subs, target="sm_90", backend="emulator", cache=False)
    b, ql, kvh, n, splits = 8, 1, 8, 4096, 4
    h = kvh * group
    d = decompose(
        kernel, (b, ql, h, dim), (b, n, kvh, dim), (b, n, kvh, dim), (b,), (b, splits, ql, h, dim),
        (b, splits, ql, h), (b, splits, ql, h),
    )  # fmt: skip
    block_m = subs[dec.BLOCK_M]
    assert d.tasks == b * kvh * splits
    assert d.total("tensor:mma.sync:f16") == 4 * block_m * n * dim * b * kvh
    kv = 2 * b * n * kvh * dim * 2
    # Per task besides: the pipelined loop's one extra K and V tile, its G query rows, seq_len in each lane.
    extra = 2 * block_n * dim * 2 + group * ql * dim * 2 + 32 * 4
    assert d.total("global_read") == kv + d.tasks * extra
    assert d.total("global_write") == b * splits * ql * h * (dim + 2) * 4
    assert not d.notes


def test_moe_blocks_without_a_local_expert_are_skipped_given_the_routing():
    """The fused-MoE up-projection exits for token blocks whose expert is -1 or E: with ``expert_ids``
    given as an array those tasks demand nothing, the others their full tile GEMM; without the values
    every block is counted and the data-dependent branch is noted."""
    from wavec.kernels import fused_moe_kernels as F

    block_m, block_n, block_k = 64, 64, 32
    mma = wc.MMAType.NV_F32_16x8x16_F16
    kernel = wc.compile(
        F.make_up(wc.f16, 2, "silu", False, 32, mma, block_m),
        F.gemm_subs(block_m, block_n, block_k, 2),
        target="sm_90",
        backend="emulator",
        cache=False,
    )
    t, k, e, n = 100, 256, 8, 128
    expert_ids = np.array([3, 0, 7, -1, 8, -1], dtype=np.int32)  # 8 == E: the skip expert
    rows = len(expert_ids) * block_m
    shapes = [(t, k), (rows,), expert_ids, (e, 2, n, k), (t * 2,)]
    d = decompose(kernel, *shapes)
    per_tile = 2 * 2 * block_m * block_n * k  # gate and up accumulators
    flops = d.per_task("tensor").reshape(n // block_n, len(expert_ids))  # grid x: token blocks
    local = (expert_ids >= 0) & (expert_ids < e)
    assert (flops == np.where(local, per_tile, 0)[None, :]).all()
    skipped = d.per_task("global_read").reshape(flops.shape)[:, ~local]
    assert (skipped == d.threads * 4).all()  # each lane reads the block's expert id, nothing else
    assert not d.notes
    shapes[2] = expert_ids.shape
    blind = decompose(kernel, *shapes)
    assert blind.total("tensor") == per_tile * len(expert_ids) * (n // block_n)
    assert any("scf.if on data" in note for note in blind.notes)
    # DRAM footprint given the routing: only the 3 routed experts' weights and the sorted ids of the 3
    # local blocks are read; x (rows gathered through sorted ids not given as values) and the routing
    # weights (not read by this kernel) count in full; without the values every tensor counts in full.
    touched = t * k * 2 + 3 * block_m * 4 + len(expert_ids) * 4 + 3 * (2 * n * k * 2) + t * 2 * 4
    assert d.footprint == {"read": touched, "write": rows * n * 2}
    full = t * k * 2 + rows * 4 + len(expert_ids) * 4 + e * (2 * n * k * 2) + t * 2 * 4
    assert blind.footprint == {"read": full, "write": rows * n * 2}
