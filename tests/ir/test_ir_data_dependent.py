# ruff: noqa: E501  (check lines quote whole printed trace lines)
"""IR tier: what the passes decide for data-dependent accesses (DESIGN §12), on the MoE gather GEMM
(``tests/dyn_kernels.py``): index_chains hoists and splits the index chains, infer_indices gives each index
value the layout of the rows its access touches, coarsen_loads keeps 16-byte runs along K of a gathered
row, pipeline_loops issues gathered cp.async copies ahead with the hoisted index, mask_bounds masks the
index's dims and never the gathered one; and the MLIR loads one index per copied row."""

import re

import dyn_kernels as dk
import pytest
import sympy
from filecheck import filecheck
from test_ir_shared_passes import Compiled

from wavec.frontend.ops import AsyncCopy
from wavec.indexing.symbols import LANE, THREAD, WAVE, WORKGROUP

GATHER = dk.make_gather_gemm(dk.gemm_constraints())
_CACHE: dict = {}


def compiled(emit: bool = False, **extra) -> Compiled:
    subs = {**dk.GEMM_SUBS, **{getattr(dk, k): v for k, v in extra.items()}}
    key = (emit, tuple(sorted(extra.items())))
    if key not in _CACHE:
        _CACHE[key] = Compiled(GATHER, subs, "sm_90", emit)
    return _CACHE[key]


def nodes(c: Compiled, prefix: str) -> list:
    return [n for g in c.trace.graphs() for n in g.nodes if n.name.startswith(prefix)]


INDEX_CHAINS = r"""
CHECK: %[[SCATTER_IDS:read]] = read(%ids) : [M] i32
CHECK-NEXT: %[[COPY_IDS:read_idx]] = read(%ids) : [M] i32
CHECK: %[[ROW:binary_hoisted_idx]] = binary(%[[COPY_IDS]], 2, kind=floordiv) : [M] i32
CHECK-NEXT: %iterate = iterate((%register), ({{.*}}%[[ROW]]), dim=K, subgraph=iterate_0)
CHECK: %[[OUT_ROW:binary_1]] = binary(%[[SCATTER_IDS]], 2, kind=floordiv) : [M] i32
CHECK-NEXT: %atomic = atomic(%binary, %c, %[[OUT_ROW]], kind=add, dynamic=(T,))
CHECK-LABEL: region iterate_0 {
CHECK: %[[CAP:capture_binary_hoisted_idx]] = capture : [M] i32
CHECK-NOT: binary(
CHECK: %read_global = read(%capture_x, %[[CAP]], dynamic=(T,)) : [M, K] f16
CHECK-NEXT: %read_to_shared = write(%read_global, %capture_shared_x)
"""


def test_index_chains_hoists_the_copy_index_and_splits_the_scatter_chain() -> None:
    filecheck(compiled().after["index_chains"], INDEX_CHAINS)


def test_index_chains_marks_the_copy_chain_workgroup_scoped() -> None:
    c = compiled()
    (copy_ids,) = nodes(c, "read_idx")
    assert copy_ids.meta["index_scope"] == "workgroup"
    assert all("index_scope" not in n.meta for n in nodes(c, "read_m"))  # the scatter's chain: per wave


def test_index_value_takes_the_layout_of_the_rows_its_access_touches() -> None:
    c = compiled()
    (copy_ids,) = nodes(c, "read_idx")
    (copy,) = [n for n in nodes(c, "read_global_m0_k0_async") if n.graph is not c.trace.graph]
    # the gathered copy: thread t copies row t // 4 (four 16-byte chunks a 32-element row) and loads that one id
    assert copy_ids.meta["layout"].seq(dk.M).start == copy.meta["layout"].seq(dk.M).start
    assert (
        sympy.simplify(
            copy_ids.meta["layout"].seq(dk.M).start - (32 * WORKGROUP[0] + sympy.Mod(sympy.floor(THREAD / 4), 32))
        )
        == 0
    )
    (scatter_ids,) = [n for n in nodes(c, "read_m0") if n.name == "read_m0"]
    (atomic,) = nodes(c, "atomic_m0_n0")
    assert scatter_ids.meta["layout"].seq(dk.M) == atomic.meta["layout"].seq(dk.M)  # accumulator rows
    assert LANE in scatter_ids.meta["layout"].seq(dk.M).start.free_symbols
    assert WAVE[0] in scatter_ids.meta["layout"].seq(dk.M).start.free_symbols


def test_gathered_copies_stay_16_byte_runs_along_k() -> None:
    copies = [n for n in nodes(compiled(), "read_global") if n.meta.get("op") is AsyncCopy]
    assert len(copies) == 3  # two prologue copies and the one in the loop
    for n in copies:
        assert n.kwargs["dynamic"] == (dk.T,)
        ((first, length, _off),) = n.meta["accesses"]
        assert (first, length) == (0, 8)  # 8 x f16 = 16 bytes of one gathered row


def test_pipeline_issues_gathered_copies_ahead_with_the_hoisted_index() -> None:
    after = compiled().after["pipeline_loops"]
    assert re.search(r"async_copy\(%x, %shared_x, %binary_hoisted_idx_m0, dynamic=\(T,\)\).*prologue", after) is None
    assert after.count("async_copy(%x, %shared_x, %binary_hoisted_idx_m0, dynamic=(T,))") == 2  # two prologue stages
    assert "async_copy(%capture_x, %capture_shared_x, %capture_binary_hoisted_idx_m0, dynamic=(T,))" in after


@pytest.mark.parametrize("static", [False, True])
def test_masks_cover_the_index_dims_never_the_gathered_dim(static: bool) -> None:
    c = compiled(**({"K": 64, "N": 64} if static else {}))
    for n in [*nodes(c, "read_global"), *nodes(c, "atomic"), *nodes(c, "read_idx")]:
        assert dk.T not in n.meta["mask_dims"], n.name
        assert dk.M in n.meta["mask_dims"], n.name  # M (the ids' length) is not known to divide
        if static:
            assert dk.K not in n.meta["mask_dims"] and dk.N not in n.meta["mask_dims"], n.name


def test_mlir_loads_one_index_per_copied_row() -> None:
    mlir = compiled(emit=True).mlir
    index_load = r"vector\.load %\w+\[%\w+\][^:]*: memref<\?xi32>, vector<1xi32>"
    start = mlir.index("scf.for")
    loop = mlir[start : mlir.index("scf.yield", mlir.index("nvgpu.mma.sync", start))]
    # all before the loop: the copy's one id a thread, and the ids of the accumulator's rows M and M + 8
    assert len(re.findall(index_load, mlir[:start])) == 3
    assert re.findall(index_load, loop) == []
    assert len(re.findall(index_load, mlir)) == 3
    assert mlir.count("nvgpu.device_async_copy") == 6  # 2 operands x (2 prologue + 1 in the loop)
