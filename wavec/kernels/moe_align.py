"""Routing preparation for a mixture of experts: the ``moe_align_block_size`` contract of vLLM and SGLang.

For ``topk_ids`` [T, k] (int32; int64 is converted) over ``E`` experts and a token block ``B``:

- ``sorted_token_ids`` int32 [T*k + E*(B-1)]: flat indices into ``topk_ids`` grouped by expert (expert 0
  first; order within an expert unspecified), each expert's segment padded to a multiple of ``B`` with
  the sentinel ``T*k``; the slots past the last segment hold the sentinel too;
- ``expert_ids`` int32 [(T*k + E*(B-1)) // B]: the expert of each block, -1 past the last segment;
- ``num_tokens_post_pad`` int32 [1]: the padded total;
- ``counts`` int32 [E]: the histogram of ``topk_ids``.

Built with the data-dependent DSL.  Up to ``SMALL_TOKENS`` ids one workgroup does everything in one
launch: a loop stores the sentinel into every slot of ``sorted_token_ids`` (16-byte stores, ``FILL_TILE``
slots a step: the code does not grow with ``E * B``), then the histogram with shared-memory atomics whose
old values are the tokens' ranks within their expert, ``wc.cumsum`` of the padded counts for the segment
offsets, the scatter of token ids to ``offset + rank`` (after a barrier: it overwrites sentinels), and the
block experts as the ``wc.cumsum`` of a histogram of segment ends (the expert of block ``j`` is the number
of segments ending at or before it).  Beyond, three launches: histogram and global ranks per workgroup
(global atomics give each workgroup its base within every expert), the scan with the block experts (one
workgroup per block tile; the first writes the per-expert outputs and scatters the sentinel into each
expert's ``B - 1`` filler slots: its padding, then its share of the tail, every slot written exactly
once), and the scatter.  ``counts`` starts zeroed there (``torch.zeros``: one memset).

The Python wrapper keeps one ``_Call`` per (ids' tensor key, experts, block, backend): a repeated call is
one dictionary lookup, one ``torch.empty`` split into the outputs and the prepared launch
(docs/performance.md, "Host path"); ``fused_experts`` runs the same launches into its own buffers.
"""

from __future__ import annotations

import math
from typing import Any

import wavec as wc
from wavec import Memory, Register
from wavec.kernels.fastpath import Decisions, tensor_key
from wavec.knobs import code_key

N, E, S, J, P, ONE = wc.sym.N, wc.sym.E, wc.sym.S, wc.sym.J, wc.sym.P, wc.sym.ONE
MAX_EXPERTS = 512
SMALL_TOKENS = 4096  # T*k served by the single-launch kernel
WAVES = 8
LARGE_TILE = 2048  # ids per workgroup of the multi-launch histogram and scatter
BLOCK_TILE = 256  # blocks of expert_ids per workgroup of the multi-launch scan
FILL_TILE = 1024  # sentinel slots per step of the single-launch kernel's fill loop (32 per lane)


def _constraints(tokens: int | None, experts: int, blocks: int | None, fill: bool = False) -> list:
    """Ids along axis 0 (split over the waves), blocks along axis 1, experts along axis 2; an [E] or [J]
    value is one instruction tile per wave (``wc.cumsum``) and held by every wave; ``fill``: a loop over
    the sorted slots ``S``, ``FILL_TILE`` a step (every wave stores the same runs)."""
    ids = [wc.WorkgroupConstraint(N, tokens, 0), wc.WaveConstraint(N, tokens // WAVES)] if tokens else []
    shapes = {E: experts, P: 1} | ({N: 32} if tokens else {}) | ({J: blocks} if blocks else {})  # ids: runs of 1
    return (
        ids
        + ([wc.WorkgroupConstraint(J, blocks, 1)] if blocks else [])
        + ([wc.TilingConstraint(S, FILL_TILE)] if fill else [])
        + [
            wc.WorkgroupConstraint(E, experts, 2),
            wc.WorkgroupConstraint(P, P, None),
            wc.HardwareConstraint(threads_per_wave=32, vector_shapes=shapes | ({S: 128} if fill else {})),
        ]
    )


def _scan(c, block: int):
    """From the counts ``c`` [E]: (padded counts, exclusive offsets, inclusive ends, padded total)."""
    padded = (c + (block - 1)) // block * block
    incl = wc.cumsum(padded, E)
    total = wc.cast(wc.sum(wc.cast(padded, wc.f32), E), wc.i32)
    return padded, incl - padded, incl, total


def _segments(c, block: int, sentinel, sorted_ids, ntp, offsets=None, counts=None):
    """From the counts ``c`` [E]: (exclusive offsets, inclusive ends, padded total, a function writing the
    per-expert outputs: filler sentinels, total, counts or offsets)."""
    padded, excl, incl, total = _scan(c, block)
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
    """One workgroup: sentinels into every slot (a loop), histogram (shared atomics), scan, scatter of the
    ids, block experts.  ``sorted_ids``' size is a multiple of 4 (16-byte stores)."""

    @wc.wave(_constraints(tokens, experts, blocks, fill=True))
    def moe_align(
        topk_ids: Memory[N, wc.i32],
        sorted_ids: Memory[S, wc.i32],
        expert_ids: Memory[J, wc.i32],
        ntp: Memory[ONE, wc.i32],
        counts: Memory[E, wc.i32],
    ):
        @wc.iterate(S, init_args=[])
        def _fill() -> list:
            wc.write(wc.index(S) * 0 + N, sorted_ids)
            return []

        wc.barrier()  # the id scatter below overwrites sentinels other threads stored
        hist = wc.allocate((E,), wc.i32)
        wc.write(Register[E, wc.i32](0), hist)
        ids = wc.read(topk_ids)
        rank = wc.atomic_add(Register[N, wc.i32](1), hist, mapping={E: ids})
        c = wc.read(hist)
        _padded, excl, incl, total = _scan(c, block)
        wc.write(total, ntp, mapping={ONE: 0})
        wc.write(c, counts)
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
    key = (*key, code_key())
    if key not in _COMPILED:
        _COMPILED[key] = wc.compile(make(), subs, backend=backend)
    return _COMPILED[key]


def _check(topk_ids: Any, num_experts: int, block_size: int) -> None:
    import torch

    if not isinstance(topk_ids, torch.Tensor) or topk_ids.dtype not in (torch.int32, torch.int64):
        got = getattr(topk_ids, "dtype", type(topk_ids).__name__)
        raise wc.WavecError(message=f"moe_align_block_size: topk_ids must be an int32 or int64 tensor, got {got}")
    if type(num_experts) is not int or not 1 <= num_experts <= MAX_EXPERTS:
        raise wc.WavecError(message=f"moe_align_block_size: num_experts must be in 1..{MAX_EXPERTS}, got {num_experts}")
    if type(block_size) is not int or block_size < 2:
        raise wc.WavecError(message=f"moe_align_block_size: block_size must be an int >= 2, got {block_size}")
    if topk_ids.numel() >= 2**31 - num_experts * block_size:
        raise wc.WavecError(message=f"moe_align_block_size: {topk_ids.numel()} ids do not fit int32 slots")


def _check_range(flat: Any, num_experts: int) -> None:
    """The emulator's buffers are padded: an id outside the experts is caught here (a GPU does not)."""
    if flat.numel():
        lo, hi = int(flat.min()), int(flat.max())
        if lo < 0 or hi >= num_experts:
            raise wc.WavecError(
                message=f"moe_align_block_size: topk_ids holds {lo if lo < 0 else hi}, outside [0, {num_experts})"
            )


def _round4(n: int) -> int:
    return (n + 3) // 4 * 4


class _Call:
    """Everything about one (tensor key, experts, block, backend) of ``moe_align_block_size`` that does not
    depend on the ids: the kernels, the sizes, the split of the one output buffer, the prepared launches
    (on the first ``run``)."""

    def __init__(self, topk_ids: Any, num_experts: int, block_size: int, backend: str | None) -> None:
        import torch

        self.empty, self.i32 = torch.empty, torch.int32
        self.device = topk_ids.device
        self.direct = topk_ids.dtype == torch.int32 and topk_ids.is_contiguous()  # its pointer is the flat ids
        self.num_experts, self.block_size = num_experts, block_size
        self.numel = numel = topk_ids.numel()
        e_mem = self.e_mem = _round4(num_experts)
        self.slots = numel + num_experts * (block_size - 1)
        self.small = 0 < numel <= SMALL_TOKENS
        self.launches: tuple | None = None
        subs = {E: e_mem, P: block_size - 1, ONE: 1}
        experts = padded_experts(e_mem)
        if self.small:  # the fill loop covers every slot: no filler slots for the experts past num_experts
            s_mem = _round4(self.slots)
            self.blocks = _round4(self.slots // block_size)
            tokens, tile = small_config(numel, e_mem, block_size)
            key = ("small", tokens, experts, block_size, tile, e_mem, backend)
            self.kernel = _compiled(key, lambda: make_align_small(tokens, experts, block_size, tile), subs, backend)
            # sorted ids, expert ids, the total (then 3 spare words: 16-byte starts), counts
            self.pieces = [s_mem, self.blocks, 1, 3, e_mem]
            self.total = sum(self.pieces)
            self.exact = (s_mem == self.slots, self.blocks == self.slots // block_size, e_mem == num_experts)
            kernels: tuple = (self.kernel,)
        else:
            self.s_mem = numel + e_mem * (block_size - 1)
            self.blocks = _round4(self.s_mem // block_size)
            no_ntp = {E: e_mem, P: block_size - 1}  # the kernels without the [ONE] total
            hist = _compiled(("hist", experts, e_mem, backend), lambda: make_align_histogram(experts), no_ntp, backend)
            scan_key = ("scan", experts, block_size, e_mem, backend)
            scan = _compiled(scan_key, lambda: make_align_scan(experts, block_size), subs, backend)
            scatter = _compiled(
                ("scatter", experts, e_mem, backend), lambda: make_align_scatter(experts), no_ntp, backend
            )
            kernels = self.kernels = (hist, scan, scatter)
        # the emulator's buffers are padded: its ids are range-checked on every call (a GPU's are not)
        self.check_range = kernels[0].backend == "emulator"

    def buffers(self, separate: bool = False) -> tuple:
        """Fresh buffers of the launches at the kernels' (rounded) sizes: sorted ids, expert ids, the total,
        counts, then the multi-launch path's ranks and offsets (None on the single launch); ``separate``:
        each in its own allocation (a ``torch.library`` custom op may not return views of one another)."""
        empty, i32, dev = self.empty, self.i32, self.device
        if not self.small:
            sizes = (self.s_mem, self.blocks, 1, self.e_mem, self.numel, self.e_mem)
            return tuple(empty(n, dtype=i32, device=dev) for n in sizes)
        if separate:
            return (*(empty(n, dtype=i32, device=dev) for n in self.pieces[:3] + self.pieces[4:]), None, None)
        sorted_ids, expert_ids, ntp, _spare, counts = empty(self.total, dtype=i32, device=dev).split_with_sizes(
            self.pieces
        )
        return sorted_ids, expert_ids, ntp, counts, None, None

    def run(self, flat: Any, bufs: tuple) -> None:
        """The launches from the int32 ids ``flat`` (their pointer: any contiguous int32 tensor of the ids)
        into ``bufs`` (``buffers``), prepared on the first call (``CompiledKernel.prepare``)."""
        launches = self.launches or self._prepare(flat, bufs)
        sorted_ids, expert_ids, ntp, counts, ranks, offsets = bufs
        if self.small:
            launches[0](flat, sorted_ids, expert_ids, ntp, counts)
            return
        hist, scan, scatter = launches
        counts.zero_()  # the histogram adds into it
        hist(flat, counts, ranks)
        scan(counts, sorted_ids, expert_ids, ntp, offsets, self.numel)
        scatter(flat, offsets, ranks, sorted_ids)

    def _prepare(self, flat: Any, bufs: tuple) -> tuple:
        sorted_ids, expert_ids, ntp, counts, ranks, offsets = bufs
        flat = flat.view(-1)
        if self.small:
            self.launches = (self.kernel.prepare(flat, sorted_ids, expert_ids, ntp, counts, fresh_outputs=True),)
        else:
            hist, scan, scatter = self.kernels
            self.launches = (
                hist.prepare(flat, counts, ranks, fresh_outputs=True),
                scan.prepare(counts, sorted_ids, expert_ids, ntp, offsets, self.numel, fresh_outputs=True),
                scatter.prepare(flat, offsets, ranks, sorted_ids, fresh_outputs=True),
            )
        return self.launches

    def views(self, bufs: tuple) -> tuple:
        """The four outputs of ``bufs`` at the contract's sizes (views where the kernels' are rounded)."""
        sorted_ids, expert_ids, ntp, counts = bufs[:4]
        if self.small:
            exact_s, exact_j, exact_e = self.exact
            return (
                sorted_ids if exact_s else sorted_ids[: self.slots],
                expert_ids if exact_j else expert_ids[: self.slots // self.block_size],
                ntp,
                counts if exact_e else counts[: self.num_experts],
            )
        slots = self.slots
        return sorted_ids[:slots], expert_ids[: slots // self.block_size], ntp, counts[: self.num_experts]

    def __call__(self, topk_ids: Any, separate: bool = False) -> tuple:
        """The four outputs, fresh tensors (``buffers``)."""
        flat = topk_ids if self.direct else topk_ids.reshape(-1).to(self.i32).contiguous()
        if self.check_range:
            _check_range(flat.view(-1), self.num_experts)
        bufs = self.buffers(separate)
        if self.numel:
            self.run(flat, bufs)
        elif not self.small:  # no ids: the scan still writes the empty segments' outputs
            bufs[3].zero_()
            self.kernels[1](bufs[3], *bufs[:3], bufs[5], 0)
        return self.views(bufs)


_CALLS = Decisions("moe_align_block_size")  # (ids' tensor key, experts, block, backend) -> _Call


def moe_align_block_size(topk_ids, num_experts: int, block_size: int, *, backend: str | None = None):
    """``(sorted_token_ids, expert_ids, num_tokens_post_pad, counts)`` for ``topk_ids`` [T, k] (module
    docstring).  Ids outside ``[0, num_experts)`` are a user error: checked for CPU tensors (the emulator),
    not on the GPU.

    The kernels see the experts rounded up to a multiple of 4 (16-byte runs of [E] values; the extra
    experts count nothing) and ``sorted_token_ids`` and ``expert_ids`` rounded up likewise: the outputs
    are views of one ``torch.empty`` (their first elements where rounded).  A repeated call (same ids
    key and integers) is one lookup, the allocation and the prepared launch."""
    call = _CALLS.get((tensor_key(topk_ids), num_experts, block_size, type(num_experts), type(block_size), backend))
    if call is None:
        call = new_call(topk_ids, num_experts, block_size, backend)
    return call(topk_ids)


def new_call(topk_ids: Any, num_experts: int, block_size: int, backend: str | None) -> _Call:
    """The ``_Call`` of these arguments, checked and built on a miss (what ``fused_experts`` runs on its
    flat int32 ids)."""
    _check(topk_ids, num_experts, block_size)
    key = (tensor_key(topk_ids), num_experts, block_size, type(num_experts), type(block_size), backend)
    call: Any = _CALLS.get(key)
    if call is None:
        call = _Call(topk_ids, num_experts, block_size, backend)
        _CALLS.remember(key, call)
    return call


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
        return new_call(topk_ids, num_experts, block_size, None)(topk_ids, separate=True)

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
