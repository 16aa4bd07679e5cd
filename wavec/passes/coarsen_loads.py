"""coarsen_loads: decide the memory access instructions of each per-thread read and write.

Requires: ``expand``.  Guarantees: every ``read``/``write`` has ``meta["accesses"]``, runs ``(first,
length, offsets)`` of register elements contiguous along the memory's last dim merged up to 16 bytes, and
``meta["alignments"]``, each run's byte alignment proven from the index algebra (LLVM emits a 16-byte
``ld.v4`` only when told; ``mask_bounds`` has the launcher check that rows are whole runs).  Runs along a
dim never exceed ``run_cap``: the largest power of two dividing a static size, ``ctx.run_caps`` of a
dynamic one (a narrow variant, compiled by the launcher for sizes the vector width does not divide), and
``ctx.arg_cap`` of the argument (a strided variant: a row pitch the width does not divide, or single
elements of an argument whose innermost stride is a launch value).  Atomics take
the runs one reduction instruction of the target updates (``atomic_width``), split where the proven
alignment is below the run's bytes (a vector ``red`` needs its whole width aligned).  Shared reads
feeding an ``mma.sync`` operand use ``ldmatrix`` (``meta["access"]``, ``mma_dims``; ``transpose`` for a B
tile contiguous along N; neighbouring N tiles' B fragments share one ``.x4``: ``pair_with``); those of a
``wgmma`` become matrix descriptors (``access = "descriptor"``; another user of one: a ``ConstraintError``).
"""

from __future__ import annotations

import sympy
import torch.fx as fx

from ..errors import ConstraintError
from ..frontend import dtypes as dt
from ..frontend.mapping import access_dims, index_operands, memory_operand
from ..frontend.ops import MMA, AsyncCopy, Permute, Read, Write
from ..frontend.ops_atomic import Atomic
from ..frontend.tracing import Trace, capture_root
from ..frontend.types import AddressSpace
from ..indexing import Layout
from ..indexing.padding import padded_dims
from .context import PassContext

MAX_ACCESS_BYTES = 16
Run = tuple[int, int, dict]  # (first register position, length, coordinate offsets)


def access_runs(layout: Layout, mem_dims: tuple, max_len: int) -> list[tuple[int, int, dict]]:
    """Runs of at most ``max_len`` elements of an access over ``mem_dims`` (the register dims that address
    memory, memory order); no dims (a batch-indexed scalar such as ``seq_lens[b]``, a rank-0
    ``mapping={ONE: 0}``): one element per register position."""
    if not mem_dims:
        return [(p, 1, off) for p, off in enumerate(layout.positions())]
    last = mem_dims[-1]
    runs: list[Run] = []
    for p, off in enumerate(layout.positions()):
        if runs:
            first, n, start = runs[-1]
            same_row = all(off[d] == start[d] for d in mem_dims[:-1])
            if same_row and off[last] == start[last] + n and n < max_len and first + n == p:
                runs[-1] = (first, n + 1, start)
                continue
        runs.append((p, 1, off))
    # Keep runs a power of two long so each is one vector instruction (a 6-element run is 4 + 2).
    out = []
    for first, n, start in runs:
        pos = 0
        while pos < n:
            size = 1 << ((n - pos).bit_length() - 1)
            off = dict(start)
            off[last] = start[last] + pos
            out.append((first + pos, size, off))
            pos += size
    return out


def run_cap(ctx: PassContext, dim, width: int) -> int:
    """The longest run along the contiguous ``dim`` (at most ``width``) whose rows all start aligned: a
    static size caps it at the largest power of two dividing it (a 29-wide f16 row takes single
    elements, a 30-wide one pairs); a dynamic size at ``ctx.run_caps`` (none: the launcher checks it)."""
    size = ctx.constraints.resolve(dim)
    if not size.is_Integer:
        return min(width, ctx.run_caps.get(dim, width))
    n = int(size)
    return width if n == 0 else min(width, n & -n)


def run_alignment(first_coord: sympy.Expr, length: int, elem_bytes: int) -> int:
    """Bytes of alignment of a run of ``length`` elements starting at logical ``first_coord``."""
    p = length
    while p > 1 and sympy.Mod(sympy.expand(first_coord), p) != 0:
        p //= 2
    return p * elem_bytes


def atomic_width(node: fx.Node, ctx: PassContext) -> int:
    """Elements one instruction of an atomic updates: an unused ``add`` is a ``red`` of a packed
    f16x2/bf16x2 pair where the target has one, into global memory of 2 or 4 words (``.v2``/``.v4``) on
    targets with vector reductions; anything else (a used result: ``atom``; min/max; AMD) one."""
    target, mtype = ctx.target, memory_operand(node).meta["type"]
    space = mtype.address_space
    if node.users or node.kwargs["kind"] != "add" or space not in (AddressSpace.GLOBAL, AddressSpace.SHARED):
        return 1
    if not target.has_red:
        return 1
    words = 4 if target.has_red_vector and space == AddressSpace.GLOBAL else 1  # vector red: global only
    if mtype.dtype == dt.f32:
        return words
    if mtype.dtype == dt.f16 or (mtype.dtype == dt.bf16 and target.has_red_bf16x2):
        return 2 * words
    return 1


def _aligned_pieces(runs: list[Run], aligns: list[int], elem_bytes: int, last) -> tuple[list[Run], list[int]]:
    """Runs cut into pieces no longer than their proven alignment (along the memory's ``last`` dim; each
    piece starts aligned as well)."""
    out: list[Run] = []
    out_aligns: list[int] = []
    for (first, n, off), align in zip(runs, aligns):
        piece = max(1, min(n, align // elem_bytes))
        for k in range(0, n, piece):
            out.append((first + k, piece, {**off, last: off[last] + k} if k else off))
            out_aligns.append(piece * elem_bytes)
    return out, out_aligns


def _relative(mem: fx.Node, dim, coord: sympy.Expr) -> sympy.Expr:
    mem = capture_root(mem)
    base = mem.kwargs.get("base") if mem.op == "call_function" else None
    return coord - sympy.sympify(base[dim]) if isinstance(base, dict) and base else coord


def _uses_ldmatrix(node: fx.Node, ctx: PassContext) -> bool:
    """Marks shared reads that ldmatrix can serve (``mma_role``, ``mma_dims``, ``transpose``)."""
    mma = ctx.constraints.mma_type
    if (
        node.meta.get("op") is not Read
        or mma is None
        or mma.spec.vendor != "nvidia"
        or memory_operand(node).meta["type"].address_space != AddressSpace.SHARED
    ):
        return False
    operand = node
    users = list(node.users)
    if len(users) == 1 and users[0].meta.get("op") is Permute:
        operand = users[0]
    role = operand.meta.get("mma_role")
    if role not in ("a", "b"):
        return False
    row_dim, k_dim = operand.meta["type"].dims
    transpose = node.meta["type"].dims[-1] != k_dim  # the tile is contiguous along the row (N) dim
    if transpose and (role != "b" or node.meta["type"].dtype.bytes != 2):  # .trans moves 16-bit elements
        return False
    if transpose and row_dim in padded_dims(ctx.constraints, node):  # (its 16-byte rows would pass the tile)
        return False
    node.meta.update(mma_role=role, mma_dims=(row_dim, k_dim), transpose=transpose)
    return True


def _pair_b_fragments(g: fx.Graph) -> None:
    """B fragments of neighbouring N tiles (same K step) share one ``ldmatrix.x4``: the first read of a
    pair gets ``meta["pair_with"]`` = the second, which is then produced by the same instruction."""
    reads = {}
    for n in g.nodes:
        if n.meta.get("access") == "ldmatrix" and n.meta.get("mma_role") == "b":
            reads[(n.args[0], n.meta["key"])] = n
    for (mem, key), n in reads.items():
        ndim = n.meta["mma_dims"][0]
        ni = dict(key)[ndim]
        partner = reads.get((mem, tuple((d, i + 1 if d == ndim else i) for d, i in key)))
        if ni % 2 == 0 and partner is not None:
            n.meta["pair_with"] = partner
            partner.meta["paired_by"] = n


def _check_descriptor_users(node: fx.Node) -> None:
    """A wgmma operand read becomes a matrix descriptor, which only the wgmma consumes: another user (a
    ``wc.debug_log`` of the operand) is the author's to change, by reading the memory again."""
    others = [u for u in node.users if u.meta.get("op") not in (MMA, Permute)]
    if others:
        raise ConstraintError(
            others[0].meta.get("loc") or node.meta.get("loc"),
            message=f"%{node.name} is a wgmma operand that stays in shared memory (a matrix descriptor), so only "
            f"wc.mma can use it, not %{others[0].name}; for other uses read the memory again (wc.read twice)",
        )


def coarsen_loads(trace: Trace, ctx: PassContext) -> None:
    for g in trace.graphs():
        for node in g.nodes:
            if node.meta.get("op") not in (Read, Write, AsyncCopy, Atomic):
                continue
            if _uses_ldmatrix(node, ctx):
                # warpgroup MMAs read shared operands themselves, through one matrix descriptor per tile
                node.meta["access"] = "descriptor" if ctx.constraints.group_waves > 1 else "ldmatrix"
                if ctx.constraints.group_waves > 1:
                    _check_descriptor_users(node)
                continue
            mem = memory_operand(node)
            mtype = mem.meta["type"]
            layout = node.meta["layout"]
            last = mtype.shape[-1]
            # batch and statically mapped dims are one coordinate per workgroup: runs live in the held dims;
            # a gathered dim is addressed by its index value's dims, contiguous only along the affine last dim
            affine = last in layout.dims and last not in index_operands(node)
            width = atomic_width(node, ctx) if node.meta["op"] is Atomic else MAX_ACCESS_BYTES // mtype.dtype.bytes
            if mtype.address_space == AddressSpace.GLOBAL:  # (a strided variant may cap one argument's runs)
                width = ctx.arg_cap(capture_root(mem).name, run_cap(ctx, last, max(1, width)))
            runs = access_runs(layout, access_dims(node), max(1, width) if affine else 1)
            aligns = [
                run_alignment(_relative(mem, last, layout.seq(last).start + off[last]), n, mtype.dtype.bytes)
                if affine
                else mtype.dtype.bytes
                for _first, n, off in runs
            ]
            if node.meta["op"] is Atomic:
                runs, aligns = _aligned_pieces(runs, aligns, mtype.dtype.bytes, last)
            node.meta["accesses"], node.meta["alignments"] = runs, aligns
        _pair_b_fragments(g)
