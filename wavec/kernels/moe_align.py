"""Routing preparation for a mixture of experts: the ``moe_align_block_size`` contract of vLLM and SGLang.

For ``topk_ids`` [T, k] (int32; int64 is converted) over ``E`` experts and a token block ``B``:

- ``sorted_token_ids`` int32 [T*k + E*(B-1)]: flat indices into ``topk_ids`` grouped by expert (expert 0
  first; order within an expert unspecified), each expert's segment padded to a multiple of ``B`` with
  the sentinel ``T*k``; the slots past the last segment hold the sentinel too;
- ``expert_ids`` int32 [(T*k + E*(B-1)) // B]: the expert of each block, -1 past the last segment;
- ``num_tokens_post_pad`` int32 [1]: the padded total;
- ``counts`` int32 [E]: the histogram of ``topk_ids``.

Built with the data-dependent DSL: the histogram with shared-memory atomics whose old values are the
tokens' ranks within their expert, ``wc.cumsum`` of the padded counts for the segment offsets, a scatter
of token ids to ``offset + rank``, a scatter of the sentinel into each expert's ``B - 1`` filler slots (its
padding, then its share of the tail: every slot written exactly once, no masks), and the block experts
as the ``wc.cumsum`` of a histogram of segment ends (the expert of block ``j`` is the number of segments
ending at or before it).  Up to ``SMALL_TOKENS`` ids one workgroup does everything in one launch; beyond,
three launches: histogram and global ranks per workgroup (global atomics give each workgroup its base
within every expert), the scan with the block experts (one workgroup per block tile; the first writes the
per-expert outputs), and the scatter.  ``counts`` starts zeroed there (``torch.zeros``: one memset).
"""

from __future__ import annotations

import math
from typing import Any

import wavec as wc
from wavec import Memory, Register

N, E, S, J, P, ONE = wc.sym.N, wc.sym.E, wc.sym.S, wc.sym.J, wc.sym.P, wc.sym.ONE
MAX_EXPERTS = 512
SMALL_TOKENS = 4096  # T*k served by the single-launch kernel
WAVES = 8
LARGE_TILE = 2048  # ids per workgroup of the multi-launch histogram and scatter
BLOCK_TILE = 256  # blocks of expert_ids per workgroup of the multi-launch scan


def _constraints(tokens: int | None, experts: int, blocks: int | None) -> list:
    """Ids along axis 0 (split over the waves), blocks along axis 1, experts along axis 2; an [E] or [J]
    value is one instruction tile per wave (``wc.cumsum``) and held by every wave."""
    ids = [wc.WorkgroupConstraint(N, tokens, 0), wc.WaveConstraint(N, tokens // WAVES)] if tokens else []
    shapes = {E: experts, P: 1} | ({N: 32} if tokens else {}) | ({J: blocks} if blocks else {})  # ids: runs of 1
    return (
        ids
        + ([wc.WorkgroupConstraint(J, blocks, 1)] if blocks else [])
        + [
            wc.WorkgroupConstraint(E, experts, 2),
            wc.WorkgroupConstraint(P, P, None),
            wc.HardwareConstraint(threads_per_wave=32, vector_shapes=shapes),
        ]
    )


def _segments(c, block: int, sentinel, sorted_ids, ntp, offsets=None, counts=None):
    """From the counts ``c`` [E]: (exclusive offsets, inclusive ends, padded total, a function writing the
    per-expert outputs: filler sentinels, total, counts or offsets)."""
    padded = (c + (block - 1)) // block * block
    incl = wc.cumsum(padded, E)
    excl = incl - padded
    total = wc.cast(wc.sum(wc.cast(padded, wc.f32), E), wc.i32)
    pad = padded - c
    pad_before = wc.cumsum(pad, E) - pad
    p = wc.index(P)
    # expert e's B - 1 filler slots: its padding, then the tail slots the experts before it left over
    tail = wc.index(E) * (block - 1) - pad_before - pad + total + p  # [E, P]
    slot = wc.where(pad > p, excl + c + p, tail)

    def per_expert() -> None:
        wc.write(slot * 0 + sentinel, sorted_ids, mapping={S: slot})
        wc.write(total, ntp, mapping={ONE: 0})
        if counts is not None:
            wc.write(c, counts)
        if offsets is not None:
            wc.write(excl, offsets)

    return excl, incl, total, per_expert


def _block_experts(incl, total, block: int, blocks: int, expert_ids) -> None:
    """``expert_ids`` of this workgroup's blocks: the running count of segments ending at or before each
    block (ends before the tile count at its first block; the extra slot takes ends past it)."""
    ends = wc.allocate((J,), wc.i32, distributed_shape=(blocks + 1,))
    wc.write(Register[J, wc.i32](0), ends)
    first = wc.tile_start(J)  # the buffer is indexed by block coordinates, from the tile's first block
    at = wc.clip(incl // block, first, first + blocks)
    wc.atomic_add(wc.index(E) * 0 + 1, ends, mapping={J: at})
    eid = wc.cumsum(wc.read(ends), J)
    wc.write(wc.where(wc.index(J) * block < total, eid, -1), expert_ids)


def make_align_small(tokens: int, experts: int, block: int, blocks: int) -> wc.WaveKernel:
    """One workgroup: histogram (shared atomics), scan, scatter of ids and sentinels, block experts."""

    @wc.wave(_constraints(tokens, experts, blocks))
    def moe_align(
        topk_ids: Memory[N, wc.i32],
        sorted_ids: Memory[S, wc.i32],
        expert_ids: Memory[J, wc.i32],
        ntp: Memory[ONE, wc.i32],
        counts: Memory[E, wc.i32],
    ):
        hist = wc.allocate((E,), wc.i32)
        wc.write(Register[E, wc.i32](0), hist)
        ids = wc.read(topk_ids)
        rank = wc.atomic_add(Register[N, wc.i32](1), hist, mapping={E: ids})
        c = wc.read(hist)
        excl, incl, total, per_expert = _segments(c, block, N, sorted_ids, ntp, counts=counts)
        per_expert()
        offsets = wc.allocate((E,), wc.i32)
        wc.write(excl, offsets)
        wc.write(wc.index(N), sorted_ids, mapping={S: wc.read(offsets, mapping={E: ids}) + rank})
        _block_experts(incl, total, block, blocks, expert_ids)

    return moe_align


def make_align_histogram(experts: int) -> wc.WaveKernel:
    """Per workgroup of ``LARGE_TILE`` ids: a shared histogram, added to the global ``counts`` (whose old
    values are the workgroup's base in each expert), and each id's global rank in its expert."""

    @wc.wave(_constraints(LARGE_TILE, experts, None))
    def moe_align_histogram(topk_ids: Memory[N, wc.i32], counts: Memory[E, wc.i32], ranks: Memory[N, wc.i32]):
        hist = wc.allocate((E,), wc.i32)
        wc.write(Register[E, wc.i32](0), hist)
        ids = wc.read(topk_ids)
        rank = wc.atomic_add(Register[N, wc.i32](1), hist, mapping={E: ids})
        base = wc.atomic_add(wc.read(hist), counts)  # one replica adds; it writes the bases back below
        wc.write(base, hist)
        wc.write(wc.read(hist, mapping={E: ids}) + rank, ranks)

    return moe_align_histogram


def make_align_scan(experts: int, block: int) -> wc.WaveKernel:
    """One workgroup per ``BLOCK_TILE`` blocks: the scan of the counts, this tile's ``expert_ids``; the
    first workgroup also writes the offsets, the total and the filler sentinels."""

    @wc.wave(_constraints(None, experts, BLOCK_TILE))
    def moe_align_scan(
        counts: Memory[E, wc.i32],
        sorted_ids: Memory[S, wc.i32],
        expert_ids: Memory[J, wc.i32],
        ntp: Memory[ONE, wc.i32],
        offsets: Memory[E, wc.i32],
        numel: wc.Scalar[wc.i32],
    ):
        excl, incl, total, per_expert = _segments(wc.read(counts), block, numel, sorted_ids, ntp, offsets)
        wc.conditional(wc.tile_start(J) < 1)(per_expert)
        _block_experts(incl, total, block, BLOCK_TILE, expert_ids)

    return moe_align_scan


def make_align_scatter(experts: int) -> wc.WaveKernel:
    """``sorted_ids[offsets[e] + rank] = i`` for every id ``i`` of expert ``e``."""

    @wc.wave(_constraints(LARGE_TILE, experts, None))
    def moe_align_scatter(
        topk_ids: Memory[N, wc.i32], offsets: Memory[E, wc.i32], ranks: Memory[N, wc.i32], sorted_ids: Memory[S, wc.i32]
    ):
        slot = wc.read(offsets, mapping={E: wc.read(topk_ids)}) + wc.read(ranks)
        wc.write(wc.index(N), sorted_ids, mapping={S: slot})

    return moe_align_scatter


def _lanes_pow2(n: int) -> int:
    """32 lanes times a power of two elements each, at least ``n`` (runs never straddle a bound)."""
    return 32 * (1 << max(0, math.ceil(n / 32) - 1).bit_length())


def padded_experts(num_experts: int) -> int:
    """The expert tile (experts past ``num_experts`` count nothing)."""
    return _lanes_pow2(num_experts)


def small_config(numel: int, num_experts: int, block_size: int) -> tuple[int, int]:
    """(ids tile, blocks tile) of the single-launch kernel: powers of two from 256 ids up, and room for
    every block plus one (the end of the last segment)."""
    tokens = max(256, 1 << max(0, numel - 1).bit_length())
    blocks = (tokens + num_experts * (block_size - 1)) // block_size + 1
    return tokens, _lanes_pow2(blocks)


_COMPILED: dict = {}


def _compiled(key: tuple, make, subs: dict, backend: str | None):
    if key not in _COMPILED:
        _COMPILED[key] = wc.compile(make(), subs, backend=backend)
    return _COMPILED[key]


def _check(topk_ids: Any, num_experts: int, block_size: int):
    import torch

    if not isinstance(topk_ids, torch.Tensor) or topk_ids.dtype not in (torch.int32, torch.int64):
        got = getattr(topk_ids, "dtype", type(topk_ids).__name__)
        raise wc.WavecError(message=f"moe_align_block_size: topk_ids must be an int32 or int64 tensor, got {got}")
    if not isinstance(num_experts, int) or not 1 <= num_experts <= MAX_EXPERTS:
        raise wc.WavecError(message=f"moe_align_block_size: num_experts must be in 1..{MAX_EXPERTS}, got {num_experts}")
    if not isinstance(block_size, int) or block_size < 2:
        raise wc.WavecError(message=f"moe_align_block_size: block_size must be an int >= 2, got {block_size}")
    if topk_ids.numel() >= 2**31 - num_experts * block_size:
        raise wc.WavecError(message=f"moe_align_block_size: {topk_ids.numel()} ids do not fit int32 slots")
    flat = topk_ids.reshape(-1).to(torch.int32).contiguous()
    if flat.device.type == "cpu" and flat.numel():  # the emulator's buffers are padded: check here (a GPU does not)
        lo, hi = int(flat.min()), int(flat.max())
        if lo < 0 or hi >= num_experts:
            raise wc.WavecError(
                message=f"moe_align_block_size: topk_ids holds {lo if lo < 0 else hi}, outside [0, {num_experts})"
            )
    return flat


def _round4(n: int) -> int:
    return (n + 3) // 4 * 4


def moe_align_block_size(topk_ids, num_experts: int, block_size: int, *, backend: str | None = None):
    """``(sorted_token_ids, expert_ids, num_tokens_post_pad, counts)`` for ``topk_ids`` [T, k] (module
    docstring).  Ids outside ``[0, num_experts)`` are a user error: checked for CPU tensors (the emulator),
    not on the GPU.

    The kernels see the experts rounded up to a multiple of 4 (16-byte runs of [E] values; the extra
    experts count nothing and their filler slots lie past the returned slots) and ``expert_ids`` rounded
    up likewise; the outputs are views of the first elements."""
    import torch

    flat = _check(topk_ids, num_experts, block_size)
    numel, dev = flat.numel(), flat.device
    e_mem = _round4(num_experts)
    slots = numel + num_experts * (block_size - 1)
    blocks = _round4((numel + e_mem * (block_size - 1)) // block_size)
    sorted_ids = torch.empty(numel + e_mem * (block_size - 1), dtype=torch.int32, device=dev)
    expert_ids = torch.empty(blocks, dtype=torch.int32, device=dev)
    ntp = torch.empty(1, dtype=torch.int32, device=dev)
    experts = padded_experts(e_mem)
    subs = {E: e_mem, P: block_size - 1, ONE: 1}
    if 0 < numel <= SMALL_TOKENS:
        counts = torch.empty(e_mem, dtype=torch.int32, device=dev)
        tokens, tile = small_config(numel, e_mem, block_size)
        key = ("small", tokens, experts, block_size, tile, e_mem, backend)
        kernel = _compiled(key, lambda: make_align_small(tokens, experts, block_size, tile), subs, backend)
        kernel(flat, sorted_ids, expert_ids, ntp, counts)
    else:
        counts = torch.zeros(e_mem, dtype=torch.int32, device=dev)
        ranks = torch.empty(numel, dtype=torch.int32, device=dev)
        offsets = torch.empty(e_mem, dtype=torch.int32, device=dev)
        no_ntp = {E: e_mem, P: block_size - 1}  # the kernels without the [ONE] total
        hist = _compiled(("hist", experts, e_mem, backend), lambda: make_align_histogram(experts), no_ntp, backend)
        scan = _compiled(
            ("scan", experts, block_size, e_mem, backend), lambda: make_align_scan(experts, block_size), subs, backend
        )
        scatter = _compiled(("scatter", experts, e_mem, backend), lambda: make_align_scatter(experts), no_ntp, backend)
        if numel:
            hist(flat, counts, ranks)
        scan(counts, sorted_ids, expert_ids, ntp, offsets, numel)
        if numel:
            scatter(flat, offsets, ranks, sorted_ids)
    return sorted_ids[:slots], expert_ids[: slots // block_size], ntp, counts[:num_experts]


def register_moe_align_op(name: str = "wavec::moe_align_block_size"):
    """``torch.ops.wavec.moe_align_block_size(topk_ids, num_experts, block_size)`` returning the four
    tensors (a ``torch.library.custom_op``: the output sizes depend on the two integers, which
    ``register_torch_op``'s inputs-only size inference does not cover)."""
    import torch

    ns, op = name.split("::")
    existing = getattr(getattr(torch.ops, ns), op, None) if hasattr(torch.ops, ns) else None
    if existing is not None:
        return existing

    schema = "(Tensor topk_ids, int num_experts, int block_size) -> (Tensor, Tensor, Tensor, Tensor)"

    @torch.library.custom_op(name, mutates_args=(), schema=schema)
    def _op(topk_ids, num_experts, block_size):
        return moe_align_block_size(topk_ids, num_experts, block_size)

    @_op.register_fake
    def _fake(topk_ids, num_experts, block_size):
        slots = topk_ids.numel() + num_experts * (block_size - 1)
        new = topk_ids.new_empty
        return (
            new(slots, dtype=torch.int32),
            new(slots // block_size, dtype=torch.int32),
            new(1, dtype=torch.int32),
            new(num_experts, dtype=torch.int32),
        )

    return getattr(getattr(torch.ops, ns), op)


def reference(topk_ids, num_experts: int, block_size: int):
    """The contract in torch (sorted_ids with each expert's ids in ascending order)."""
    import torch

    flat = topk_ids.reshape(-1).long().cpu()
    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + block_size - 1) // block_size * block_size
    slots = flat.numel() + num_experts * (block_size - 1)
    sorted_ids = torch.full((slots,), flat.numel(), dtype=torch.int32)
    expert_ids = torch.full((slots // block_size,), -1, dtype=torch.int32)
    start = 0
    for e in range(num_experts):
        ids = torch.nonzero(flat == e).flatten()
        sorted_ids[start : start + len(ids)] = ids.int()
        expert_ids[start // block_size : (start + int(padded[e])) // block_size] = e
        start += int(padded[e])
    return sorted_ids, expert_ids, torch.tensor([start], dtype=torch.int32), counts.int()


def check_alignment(got, want, block_size: int) -> None:
    """Raise ``AssertionError`` unless ``got`` matches ``want`` (``reference``): equal counts, total and
    block experts, and every expert's padded segment holding the same ids (any order) and sentinels."""
    import torch

    s, e, n, c = (t.cpu() for t in got)
    ws, we, wn, wcount = want
    for name, a, b in (("counts", c, wcount), ("num_tokens_post_pad", n, wn), ("expert_ids", e, we)):
        if a.shape != b.shape or not torch.equal(a, b):
            raise AssertionError(f"{name}: got {a.tolist()}, want {b.tolist()}")
    if s.shape != ws.shape:
        raise AssertionError(f"sorted_token_ids: shape {list(s.shape)}, want {list(ws.shape)}")
    padded = (wcount + block_size - 1) // block_size * block_size
    starts = torch.cumsum(padded, 0) - padded
    for x, (start, size) in enumerate(zip(starts.tolist(), padded.tolist())):
        if sorted(s[start : start + size].tolist()) != sorted(ws[start : start + size].tolist()):
            raise AssertionError(f"sorted_token_ids: expert {x}'s segment [{start}, {start + size}) differs")
    if not torch.equal(s[int(wn) :], ws[int(wn) :]):
        raise AssertionError("sorted_token_ids: the slots past the last segment are not all the sentinel")
