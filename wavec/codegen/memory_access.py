"""Lowering rules of memory accesses, registered in ``lowering.LOWERINGS``: global and shared reads and
writes (vector loads and stores, ``ldmatrix`` fragments, bounds guards from ``mask_bounds``), shared
allocations and ``cp.async`` copies; and the index helpers they share with the TMA and wgmma rules.

A masked access guards each run with ``coord < size`` per masked dim (``in_bounds``); with
``WAVEC_CHECK_BOUNDS`` (``ctx.check_bounds``) also with ``index < size`` per data-dependent index, and an
active lane failing one records the failure (``check_indices``, ``runtime/bounds.py``); with
``SchedulingConstraint(split_epilogue=True)`` a store of several runs tests the thread's furthest run once
and stores the runs unguarded on that branch (``lower_write``).
"""

from __future__ import annotations

from types import SimpleNamespace

import sympy
import torch.fx as fx
from iree.compiler import ir
from iree.compiler.dialects import arith, gpu, memref, scf, vector

from .. import abi
from ..errors import CodegenError
from ..frontend import dtypes as dt
from ..frontend.mapping import index_operands
from ..frontend.ops import Allocate, AsyncCopy, Read, WideStore, Write
from ..frontend.ops_atomic import Atomic
from ..frontend.tracing import arg_node, arg_nodes, capture_root
from ..frontend.types import AddressSpace
from ..indexing import LANE, THREAD, WORKGROUP, Layout
from ..indexing.padding import padded_dims, wrap
from ..passes.schema import Kwargs
from .lowering import FunctionBuilder, elem_type, reshape, rule, splat, vec_type
from .padding import pad_guard
from .replicas import guarded, replica_guard


def held_coord(fb: FunctionBuilder, mapping: dict | None, dim) -> sympy.Expr:
    """The coordinate of a memory dimension the registers do not hold: a mapped dim's expression
    (``wc.read(..., mapping=)``) or a batch dim's workgroup coordinate."""
    return fb.cs.resolve_tile_starts((mapping or {}).get(dim, fb.cs.base_offset(dim, False, per_wave=False)))


def mem_indices(fb: FunctionBuilder, access: fx.Node, mem: fx.Node, coords: dict) -> list[ir.Value]:
    """Indices of the element at logical ``coords`` of ``mem``; shared tiles are indexed by
    [stage, coordinates relative to the tile's origin]."""
    dims = mem.meta["type"].shape
    if mem.meta["type"].address_space != AddressSpace.SHARED:
        mapping = (Kwargs(access).mapping if "mapping" in access.kwargs else None) or access.meta.get("mapping")
        at = {d: coords[d] if d in coords else held_coord(fb, mapping, d) for d in dims}
        return [c if isinstance(c := at[d], ir.Value) else fb.index(c) for d in dims]
    kw = Kwargs(capture_root(mem))
    base = {d: shared_base(access, mem, d) for d in kw.base}
    stage = access.meta.get("stage", 0)
    if any(isinstance(coords[d], ir.Value) for d in dims):  # a wc.allocate buffer indexed by values
        return [fb.index(stage)] + [_relative_index(fb, coords[d], base[d]) for d in dims]
    rel = [sympy.expand(coords[d] - base[d]) for d in dims]
    if getattr(kw, "smem_layout", None) is not None:  # a layout of its own (wgmma operand tiles)
        rel = kw.smem_layout.indices(*rel)
    return [fb.index(stage)] + [fb.index(e) for e in rel]


def shared_base(access: fx.Node, mem: fx.Node, d) -> sympy.Expr:
    """The origin in dim ``d`` of the shared tile ``mem`` that ``access`` reads or writes: the tile's base
    at the access's iteration (``iv_subs``: a prefetched one)."""
    return sympy.sympify(Kwargs(capture_root(mem)).base[d]).subs(access.meta.get("iv_subs", {}))


def _relative_index(fb: FunctionBuilder, coord, base: sympy.Expr) -> ir.Value:
    """``coord - base`` of a shared tile's dim, ``coord`` an index expression or an index value."""
    if not isinstance(coord, ir.Value):
        return fb.index(sympy.expand(coord - base))
    return coord if base == 0 else arith.subi(coord, fb.index(base))


def dim_bounds(fb: FunctionBuilder, access: fx.Node, coords: dict) -> dict:
    """``coord < size`` per masked dim of ``access``; each depends only on its own coordinate, so the
    conditions of dims a loop does not tile stay loop-invariant (and get hoisted).  With bounds checks on,
    also ``index < size`` per dynamically indexed dim (``check_indices``)."""

    def test(d):
        coord = coords[d]
        if isinstance(coord, ir.Value):  # indexed by values: the mask is on the register's own coordinate
            coord = coords.tile[d]  # (only ``run_coords`` gives values, and with their tile coordinates)
        coord, size = sympy.sympify(coord), fb.cs.resolve(d)
        return fb.derived(
            ("ult", coord, size),
            (coord, size),
            lambda: arith.cmpi(arith.CmpIPredicate.ult, fb.index(coord), fb.index(size)),
        )

    masked = {d: test(d) for d in access.meta.get("mask_dims", ())}
    if fb.bounds_record is None or not any(isinstance(c, ir.Value) for c in coords.values()):
        return masked
    return {**masked, **check_indices(fb, access, coords, _all(masked.values()))}


def check_indices(fb: FunctionBuilder, access: fx.Node, coords: dict, active: ir.Value | None) -> dict:
    """``0 <= index < size`` (one unsigned compare: a negative index is a huge one) per data-dependent
    coordinate of ``access``; where a lane that the masks leave ``active`` fails one, the first such lane
    of the launch (an exchange on the record's flag) writes the check id, itself and the index into the
    bounds record.  Masked-out lanes are never reported (their index may be anything)."""
    mem = access.args[access.meta["op"].memory_arg]
    loc = access.meta.get("loc")
    i64 = ir.IntegerType.get_signless(64)
    out = {}
    shared = mem.meta["type"].address_space == AddressSpace.SHARED
    for d, idx in coords.items():
        if not isinstance(idx, ir.Value):
            continue
        if shared:  # a wc.allocate buffer holds its tile (distributed_shape), indexed from the tile's base
            idx = _relative_index(fb, idx, shared_base(access, mem, d))
            size = fb.index(sympy.sympify(Kwargs(capture_root(mem)).tile[d]))
        else:
            size = fb.index(fb.cs.resolve(d))
        out[d] = ok = arith.cmpi(arith.CmpIPredicate.ult, idx, size)
        bad = arith.xori(ok, arith.constant(ir.IntegerType.get_signless(1), 1))
        branch = scf.IfOp(bad if active is None else arith.andi(bad, active))
        with ir.InsertionPoint(branch.then_block):
            where, code = (f"{loc.filename}:{loc.line}", loc.code) if loc else ("?:0", "")
            op = "read" if access.meta["op"] is AsyncCopy else access.meta["op"].name  # a staged read's copy
            fb.bounds_checks.append((where, code, op, capture_root(mem).name, str(d)))
            _record(fb, len(fb.bounds_checks) - 1, [arith.index_cast(i64, v) for v in (idx, size)])
            scf.yield_([])
    return out


def _record(fb: FunctionBuilder, check: int, index_and_bound: list[ir.Value]) -> None:
    """The first failing lane (``flag`` exchanged from 0) writes the record (constants made here: nothing
    cached may be defined inside the branch)."""
    i64 = ir.IntegerType.get_signless(64)
    rec, idx = fb.bounds_record, ir.IndexType.get()
    assert rec is not None  # dim_bounds checks only with a record
    old = memref.atomic_rmw(
        arith.AtomicRMWKind.assign, arith.constant(i64, 1), rec, [arith.constant(idx, abi.BOUNDS_FLAG)]
    )
    won = scf.IfOp(arith.cmpi(arith.CmpIPredicate.eq, old, arith.constant(i64, 0)))
    with ir.InsertionPoint(won.then_block):
        who = [fb.symbols[THREAD], *(fb.symbols.get(w) or arith.constant(idx, 0) for w in WORKGROUP)]
        words = [arith.constant(i64, check), *(arith.index_cast(i64, v) for v in who), *index_and_bound]
        for pos, w in zip(range(abi.BOUNDS_CHECK, abi.BOUNDS_RECORD_WORDS), words):
            memref.store(w, rec, [arith.constant(idx, pos)])
        scf.yield_([])


def _all(conds) -> ir.Value | None:
    """The conjunction of i1 values (None for none)."""
    cond = None
    for c in conds:
        cond = c if cond is None else arith.andi(cond, c)
    return cond


def in_bounds(fb: FunctionBuilder, access: fx.Node, coords: dict) -> ir.Value | None:
    """``coord < size`` for every masked dim of ``access`` (None when nothing is masked)."""
    return _all(dim_bounds(fb, access, coords).values())


def _unit_stride(memref_value: ir.Value) -> bool:
    """Whether the memref's innermost stride is 1 (not so for an inner-strided argument of a strided
    variant, whose runs ``coarsen_loads`` caps at one element: ``vector.load`` needs a unit stride)."""
    strides, _offset = ir.MemRefType(memref_value.type).get_strides_and_offset()
    return not strides or strides[-1] == 1


def _load(vt: ir.VectorType, memref_value: ir.Value, idx: list, align: int) -> ir.Value:
    if _unit_stride(memref_value):
        return vector.load(vt, memref_value, idx, alignment=align)
    if vt.shape != [1]:
        raise CodegenError(message=f"a run of {vt.shape} elements along a strided innermost dim (runs of 1 only)")
    return vector.broadcast(vt, memref.load(memref_value, idx))


def guarded_load(
    fb: FunctionBuilder, access: fx.Node, mem: fx.Node, coords: dict, vt: ir.VectorType, dtype: dt.DType, align: int
) -> ir.Value:
    idx = mem_indices(fb, access, mem, coords)
    cond = in_bounds(fb, access, coords)
    if cond is None:
        return _load(vt, fb.values[mem], idx, align)
    branch = scf.IfOp(cond, [vt], has_else=True)
    with ir.InsertionPoint(branch.then_block):
        scf.yield_([_load(vt, fb.values[mem], idx, align)])
    with ir.InsertionPoint(branch.else_block):
        scf.yield_([splat(vt, dtype, 0)])
    return branch.result


def _store_if(memref_value: ir.Value, idx: list, cond: ir.Value | None, value: ir.Value, align: int) -> None:
    """``vector.store`` under ``cond`` (unconditionally when None); a single element to an inner-strided
    memref is a ``memref.store``."""
    if cond is None:
        _store(value, memref_value, idx, align)
        return
    branch = scf.IfOp(cond)
    with ir.InsertionPoint(branch.then_block):
        _store(value, memref_value, idx, align)
        scf.yield_([])


def _store(value: ir.Value, memref_value: ir.Value, idx: list, align: int) -> None:
    if _unit_stride(memref_value):
        vector.store(value, memref_value, idx, alignment=align)
        return
    if ir.VectorType(value.type).shape != [1]:
        raise CodegenError(message="a run of several elements along a strided innermost dim (runs of 1 only)")
    memref.store(vector.extract(value, [], [0]), memref_value, idx)


def _coords(layout: Layout, off: dict) -> dict:
    return {d: layout.seq(d).start + off[d] for d in layout.dims}


def index_vectors(fb: FunctionBuilder, node: fx.Node, layout: Layout) -> dict:
    """Per dynamically mapped memory dim, its index values as a vector in ``layout``'s element order."""
    return {d: fb.operand(i, layout, i.meta["type"].dtype) for d, i in index_operands(node).items()}


class RunCoords(dict):
    """A run's memory coordinates, with ``tile``: the register's own coordinates (what a mask tests where
    a register dim is also indexed by values: a reversed or transposed read)."""

    tile: dict


def run_coords(layout: Layout, first: int, off: dict, vectors: dict) -> RunCoords:
    """The coordinates of a run: register dims as index expressions, gathered memory dims as the index
    value at the run's first position (a run never crosses rows of a gathered dim)."""
    coords = RunCoords(_coords(layout, off))
    coords.tile = dict(coords)
    for d, vec in vectors.items():
        coords[d] = arith.index_cast(ir.IndexType.get(), vector.extract(vec, [], [first]))
    return coords


def _wrap_run(coords: RunCoords, pads: dict, layout: Layout, lanes: int) -> RunCoords:
    """``padding.wrap`` of a run's coordinates and of its register coordinates."""
    if not pads:
        return coords
    out = RunCoords(wrap(coords, pads, layout, lanes))
    out.tile = wrap(coords.tile, pads, layout, lanes)
    return out


def _ldmatrix(fb: FunctionBuilder, node: fx.Node, mem: fx.Node) -> ir.Value:
    """ldmatrix of an mma.sync A (x4) or B (x2) fragment: lane i addresses row i % 8 of 8x8 tile i // 8
    (8 rows of 16 bytes: ``chunk`` elements, 8 f16, 16 i8 or 4 f32; the 8-bit and tf32 fragments are the
    16-bit ones in bytes).  A transposed B (tile contiguous along N, 16-bit only) loads k-rows with
    ``.trans``: tiles (k0, n0), (k0+8, n0) and, paired, (k0, n0+8), (k0+8, n0+8)."""
    layout: Layout = node.meta["layout"]
    row_dim, k_dim = node.meta.get("mma_dims", layout.dims)
    base = {d: layout.seq(d).start.subs(LANE, 0) for d in layout.dims}
    assert fb.cs.mma_type is not None  # infer_indices rejects an mma without one
    spec = fb.cs.mma_type.spec
    pair = node.meta.get("pair_with")
    trans = bool(node.meta.get("transpose"))
    dtype = node.meta["type"].dtype
    chunk, per_reg = 16 // dtype.bytes, 4 // dtype.bytes
    if node.meta["mma_role"] == "a":
        tiles, shape = 4, spec.a_shape
        row = base[row_dim] + sympy.Mod(LANE, 8) + 8 * sympy.Mod(sympy.floor(LANE / 8), 2)
        col = base[k_dim] + chunk * sympy.floor(LANE / 16)
    elif trans:
        tiles, shape = (4, (4, 2)) if pair is not None else (2, spec.b_shape)
        row = base[row_dim] + (layout.tile_of(row_dim) * sympy.floor(LANE / 16) if pair is not None else 0)
        col = base[k_dim] + sympy.Mod(LANE, 8) + 8 * sympy.Mod(sympy.floor(LANE / 8), 2)
    elif pair is not None:  # lanes 16-31 address the next N tile: one x4 load feeds two mmas
        tiles, shape = 4, (4, per_reg)
        row = base[row_dim] + sympy.Mod(LANE, 8) + layout.tile_of(row_dim) * sympy.floor(LANE / 16)
        col = base[k_dim] + chunk * sympy.Mod(sympy.floor(LANE / 8), 2)
    else:
        tiles, shape = 2, spec.b_shape
        row = base[row_dim] + sympy.Mod(LANE, 8)
        col = base[k_dim] + chunk * sympy.Mod(sympy.floor(LANE / 8), 2)
    i32 = ir.IntegerType.get_signless(32)
    # lanes that address padding re-read the wave's tile
    at = wrap({row_dim: row, k_dim: col}, padded_dims(fb.cs, node), layout, fb.cs.lanes)
    frag = ir.Operation.create(
        "nvgpu.ldmatrix",
        results=[ir.VectorType.get(list(shape), elem_type(dtype))],
        operands=[fb.values[mem]] + mem_indices(fb, node, mem, at),
        attributes={"numTiles": ir.IntegerAttr.get(i32, tiles), "transpose": ir.BoolAttr.get(trans)},
    ).result
    flat = reshape(vec_type(shape[0] * shape[1], dtype), frag)
    if pair is None:
        return flat
    size = layout.size
    fb.values[pair] = vector.extract_strided_slice(vec_type(size, dtype), flat, [size], [size], [1])
    return vector.extract_strided_slice(vec_type(size, dtype), flat, [0], [size], [1])


@rule(Read)
def lower_read(fb: FunctionBuilder, node: fx.Node) -> None:
    mem_node = arg_node(node, 0)
    if node.meta.get("access") == "ldmatrix":
        if node in fb.values:  # produced with its pair by one ldmatrix.x4
            return
        partner_of = node.meta.get("paired_by")
        if partner_of is not None and partner_of not in fb.values:
            fb.values[partner_of] = _ldmatrix(fb, partner_of, mem_node)
            return
        fb.values[node] = _ldmatrix(fb, node, mem_node)
        return
    layout: Layout = node.meta["layout"]
    dtype = node.meta["type"].dtype
    runs, aligns = node.meta["accesses"], node.meta["alignments"]
    vecs = index_vectors(fb, node, layout)
    pads = padded_dims(fb.cs, node)  # padding re-reads the wave's tile (its values never reach a result)
    if len(runs) == 1:
        coords = _wrap_run(run_coords(layout, 0, runs[0][2], vecs), pads, layout, fb.cs.lanes)
        fb.values[node] = guarded_load(fb, node, mem_node, coords, vec_type(layout.size, dtype), dtype, aligns[0])
        return
    acc = splat(vec_type(layout.size, dtype), dtype, 0)
    for (first, n, off), align in zip(runs, aligns):
        coords = _wrap_run(run_coords(layout, first, off, vecs), pads, layout, fb.cs.lanes)
        piece = guarded_load(fb, node, mem_node, coords, vec_type(n, dtype), dtype, align)
        acc = vector.insert_strided_slice(piece, acc, [first], [1])
    fb.values[node] = acc


def _run_pieces(access, val: ir.Value, vectors: dict | None = None) -> list:
    """(value, coordinates, alignment) of each run of a write of ``val`` (``vectors``: its index values)."""
    dtype = access.args[0].meta["type"].dtype
    runs, layout = access.meta["accesses"], access.meta["layout"]
    return [
        (
            val if len(runs) == 1 else vector.extract_strided_slice(vec_type(n, dtype), val, [first], [n], [1]),
            run_coords(layout, first, off, vectors or {}),
            align,
        )
        for (first, n, off), align in zip(runs, access.meta["alignments"])
    ]


def _run_stores(fb: FunctionBuilder, access, pieces: list) -> list:
    """(value, indices, bounds condition, alignment) of each of ``_run_pieces``, all built here: before a
    branch, so that neither branch defines a value the other uses."""
    mem = access.args[1]
    return [
        (piece, mem_indices(fb, access, mem, coords), in_bounds(fb, access, coords), align)
        for piece, coords, align in pieces
    ]


def _branch_stores(memref_value: ir.Value, cond: ir.Value, then: list, other: list) -> None:
    """``if cond`` the stores ``then`` else ``other``, each ``(value, indices, condition, alignment)``."""
    branch = scf.IfOp(cond, has_else=True)
    for block, stores in ((branch.then_block, then), (branch.else_block, other)):
        with ir.InsertionPoint(block):
            for value, idx, c, align in stores:
                _store_if(memref_value, idx, c, value, align)
            scf.yield_([])


@rule(Write)
def lower_write(fb: FunctionBuilder, node: fx.Node) -> None:
    val_node, mem_node = arg_node(node, 0), arg_node(node, 1)
    pieces = _run_pieces(node, fb.values[val_node], index_vectors(fb, node, node.meta["layout"]))
    padded = bool(padded_dims(fb.cs, node))
    split = fb.cs.scheduling.split_epilogue and not padded
    furthest = _furthest_runs(node, [c for _p, c, _a in pieces]) if split else None
    if furthest is None:
        spread = len(pieces) > 1 and not _holds_atomic_results(node)
        for i, (piece, coords, align) in enumerate(pieces):
            idx = mem_indices(fb, node, mem_node, coords)
            guard = guarded(_write_guard(fb, node, i if spread else None), pad_guard(fb, node, coords))
            _store_if(fb.values[mem_node], idx, guarded(in_bounds(fb, node, coords), guard), piece, align)
        return
    # One bounds test for the thread's furthest run per masked dim (a run never straddles the bound, so
    # its first coordinate decides), then every run unguarded: no branch per store in full tiles.
    stores = _run_stores(fb, node, pieces)
    _branch_stores(
        fb.values[mem_node], in_bounds(fb, node, furthest), [(v, idx, None, a) for v, idx, _c, a in stores], stores
    )


def _holds_atomic_results(node: fx.Node) -> bool:
    """Whether ``node``'s operands (value or indices) derive from an atomic's old values: a replicated
    atomic updates memory from one replica, so only that replica holds them (the others hold zeros) and
    must store them."""
    seen: set[fx.Node] = set()
    todo = [node]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.meta.get("op") is Atomic:
            return True
        todo.extend(n.all_input_nodes)
    return False


def _write_guard(fb: FunctionBuilder, node: fx.Node, piece: int | None) -> ir.Value | None:
    """``replica_guard`` of a store's run ``piece``: a value replicated over lanes (a rank-0 value) or over
    the waves of an axis (an ``[E]`` value when waves split another dim) stores each run from one replica,
    the runs spread over the replica waves, to a ``wc.allocate`` buffer as to global memory (8 waves
    storing the same 16-byte runs of a fill loop took 4x the time of the whole routing kernel on an H100)."""
    layout: Layout = node.meta["layout"]
    return replica_guard(fb, layout, piece=piece)


def _word(v: ir.Value, flat: list[int]) -> ir.Value:
    """Two 2-byte elements of ``v`` (flat positions) as one i32."""
    pair = vector.shuffle(v, v, flat)
    i32 = ir.IntegerType.get_signless(32)
    return vector.extract(vector.bitcast(ir.VectorType.get([1], i32), pair), [], [0])


def _quad_transpose(fb: FunctionBuilder, words: list[ir.Value]) -> list[ir.Value]:
    """A 4 x 4 transpose within each quad of lanes: lane q (= LANE % 4) gets out[p] = words[q] of lane p.
    Round k (``shuffle xor k``) sends lane q's words[q ^ k] to lane q ^ k, so lane q receives lane
    (q ^ k)'s words[q], which is its out[q ^ k]."""
    i32 = ir.IntegerType.get_signless(32)
    q = fb.index(sympy.Mod(LANE, 4))

    def pick(options: list[ir.Value], which: ir.Value) -> ir.Value:
        v = options[0]
        for j in range(1, 4):
            v = arith.select(arith.cmpi(arith.CmpIPredicate.eq, which, fb.index(j)), options[j], v)
        return v

    width = arith.constant(i32, 32)
    recv = []
    for k in range(4):
        send = pick(words, arith.xori(q, fb.index(k)) if k else q)
        recv.append(send if k == 0 else gpu.shuffle(send, arith.constant(i32, k), width, gpu.ShuffleMode.XOR)[0])
    return [pick(recv, arith.xori(q, fb.index(p)) if p else q) for p in range(4)]


@rule(WideStore)
def lower_wide_store(fb: FunctionBuilder, node: fx.Node) -> None:
    *vals, mem_node = arg_nodes(node)
    layout: Layout = node.meta["layout"]
    row_dim, col_dim = mem_node.meta["type"].shape[-2:]
    dtype = vals[0].meta["type"].dtype
    pos = [(p[row_dim], p[col_dim]) for p in layout.positions()]
    col0 = layout.seq(col_dim).start + 6 * sympy.Mod(LANE, 4)  # 2 * (LANE % 4) -> 8 * (LANE % 4)
    wide = []
    for h in (0, 8):
        words = [_word(fb.values[v], [pos.index((h, 0)), pos.index((h, 1))]) for v in vals]
        out = vector.from_elements(ir.VectorType.get([4], ir.IntegerType.get_signless(32)), _quad_transpose(fb, words))
        value = vector.bitcast(vec_type(8, dtype), out)
        coords = {row_dim: layout.seq(row_dim).start + h, col_dim: col0}
        wide.append((value, mem_indices(fb, node, mem_node, coords), in_bounds(fb, node, coords), 16))
    size = fb.cs.resolve(col_dim)
    if size.is_Integer:  # widen_stores applies only where 8 divides it
        for value, idx, cond, align in wide:
            _store_if(fb.values[mem_node], idx, cond, value, align)
        return
    narrow = [
        s
        for meta, v in zip(node.meta["narrow"], vals)
        for a in [SimpleNamespace(args=(v, mem_node), kwargs=node.kwargs, meta=meta)]  # a replaced write
        for s in _run_stores(fb, a, _run_pieces(a, fb.values[v]))
    ]
    aligned = arith.cmpi(arith.CmpIPredicate.eq, fb.index(sympy.Mod(size, 8)), fb.index(0))
    _branch_stores(fb.values[mem_node], aligned, wide, narrow)


def _furthest_runs(node: fx.Node, coords: list[dict]) -> dict | None:
    """Per masked dim, the largest coordinate among a store's runs (they differ by constants), or None
    when the store has one run or nothing masked (no split: the guarded stores as they are)."""
    masked = node.meta.get("mask_dims", ())
    if not masked or len(coords) < 2:
        return None
    out = {}
    for d in masked:
        parts = [sympy.sympify(c[d]).as_coeff_Add() for c in coords]
        if len({rest for _k, rest in parts}) != 1:
            return None  # not a common start plus constants: keep the per-run guards
        out[d] = coords[max(range(len(parts)), key=lambda i: parts[i][0])][d]
    return out


@rule(Allocate)
def lower_allocate(fb: FunctionBuilder, node: fx.Node) -> None:
    kw = Kwargs(node)
    tile = list(kw.tile.values())
    tile[-1] += kw.pad
    align = 128
    if node.kwargs.get("smem_layout") is not None:  # a wgmma operand tile (2-D)
        rows, k = kw.tile.values()
        tile, align = kw.smem_layout.memref_shape((rows, k)), kw.smem_layout.alignment
    dtype = node.meta["type"].dtype
    shape = "x".join(str(x) for x in [kw.stages, *tile])
    mtype = ir.MemRefType.parse(f"memref<{shape}x{dtype.mlir}, #gpu.address_space<workgroup>>")
    fb.values[node] = memref.alloc(mtype, [], [], alignment=align)


def _copy_source_index(fb: FunctionBuilder, node: fx.Node, d, i: ir.Value, coords: dict, bounds: dict) -> ir.Value:
    """A copy's source index along ``d``: 0 where a masked dim is out of bounds (the copy zero-fills), the
    last row where a clamped dim is (``mask_bounds``: GEMM operand rows past the bound re-read it), row 0
    of a gathered dim where any dim is (its index there may not be a row), else ``i``; cached and hoisted
    like the index itself.  Warpgroup-MMA kernels keep a gathered row where only dims outside its index
    values are out of bounds (the K edge of a gathered GEMM operand: K's own index is 0 there, so the
    address stays inside): the select then does not depend on the K loop, and the row arithmetic leaves
    it (the MoE wgmma up-projection's loop 210 -> 145 PTX lines); mma.sync kernels keep the select under
    every bound (hoisted, the MoE mma.sync tiles spilled 4-24 bytes: docs/moe.md)."""
    if isinstance(coords.get(d), ir.Value):
        own = {d, *index_operands(node)[d].meta["type"].shape} if fb.cs.group_waves > 1 else set(bounds)
        cond = _all([c for k, c in bounds.items() if k in own])
        return i if cond is None else arith.select(cond, i, fb.index(0))
    if d not in bounds and d not in node.meta.get("clamp_dims", ()):
        return i
    size = fb.cs.resolve(d)
    key = (sympy.sympify(coords[d]), size)
    if d in bounds:
        return fb.derived(("clamp", *key), key, lambda: arith.select(bounds[d], i, fb.index(0)))
    return fb.derived(("clamp_last", *key), key, lambda: arith.minui(i, fb.index(size - 1)))


@rule(AsyncCopy)
def lower_async_copy(fb: FunctionBuilder, node: fx.Node) -> None:
    src_node, dst_node = arg_node(node, 0), arg_node(node, 1)
    layout: Layout = node.meta["layout"]
    token = ir.Type.parse("!nvgpu.device.async.token")
    vecs = index_vectors(fb, node, layout)
    for first, n, off in node.meta["accesses"]:
        coords = run_coords(layout, first, off, vecs)
        dst_idx = mem_indices(fb, node, dst_node, coords)
        # Out of bounds: copy 0 source elements, i.e. zero-fill, from an in-bounds address (each
        # out-of-range index clamped to 0 under its own dim's condition, keeping row math loop-invariant).
        bounds = dim_bounds(fb, node, coords)
        src_idx = [
            _copy_source_index(fb, node, d, i, coords, bounds)
            for d, i in zip(src_node.meta["type"].shape, mem_indices(fb, node, src_node, coords))
        ]
        cond = _all(bounds.values())
        src_n = [] if cond is None else [arith.select(cond, fb.index(n), fb.index(0))]
        op = ir.Operation.create(
            "nvgpu.device_async_copy",
            results=[token],
            operands=[fb.values[dst_node], *dst_idx, fb.values[src_node], *src_idx, *src_n],
            attributes={
                "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, len(dst_idx), 1, len(src_idx), len(src_n)]),
                "dstElements": ir.IntegerAttr.get(ir.IndexType.get(), n),
                **({"bypassL1": ir.UnitAttr.get()} if n * src_node.meta["type"].dtype.bytes == 16 else {}),
            },
        )
        fb.pending_copies.append(op.result)
