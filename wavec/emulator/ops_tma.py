"""TMA and mbarrier ops: ``nvvm.mbarrier.{init,arrive.expect_tx,try_wait.parity}``,
``nvvm.fence.{mbarrier.init,proxy.acquire}``, ``nvvm.cp.async.bulk.tensor.shared.cluster.global`` (2- to
5-D tiles: rank-4 attention K/V boxes with batch coordinates) and ``llvm.inttoptr``; global bindings get
addresses so tensor maps can name them.

- Addresses: shared memory as in ``ops_nvvm`` (allocation i at the rounded-up sum of the sizes before it);
  binding ``b`` at ``global_address(b)`` = ``(b + 1) << 40`` (plus the subspan's byte offset).  A tensor map
  is wavec's 128-byte encoding (``runtime.tensor_map.encode_emulated``) that the emulator launcher writes
  into the kernel's tensor-map binding: global address, element size, dims, byte strides, box, swizzle.
- A box copy reads its source when issued (zeros outside the tensor: the hardware's out-of-bounds fill),
  checks its shared destination through the race checker then (a write by the issuing wave: reads of those
  bytes since the last barrier are a race), and lands (writes the bytes, completing their transaction
  count) at the latest point: when a thread waits for the phase of its mbarrier.  Destination byte ``a`` of
  box element (i_0 innermost, i_1, ...) is ``dst + elem * (i_0 + box_0 (i_1 + box_1 (...)))`` (dense,
  innermost first; out-of-bounds elements along any dimension are zeros), swizzled as the hardware does on
  the address: ``a ^ (((a >> 7) & (W/16 - 1)) << 4)`` for a W-byte swizzle.
- An mbarrier (8 bytes in a shared allocation, modelled beside it) has an arrival count per phase, a
  pending count, a transaction count and its number of completed phases; a phase completes when every
  arrival came and the transaction count is back to 0.  ``try_wait.parity(P)`` returns at once when the
  phase of parity P is the last completed one, else lands the copies in flight on that mbarrier and
  completes the phase.
- Ordering for the race checker: a wait that sees a phase complete forgets, in every shared allocation,
  the accesses the waves that arrived in that phase had made when they arrived (an over-approximation: it
  orders them before every wave, not only the waiting ones); a landed box is published to every thread.
- Errors (``EmulatorError``): a wait that can never complete (arrivals missing, or bytes announced by
  ``arrive.expect_tx`` that no copy in flight delivers), copies delivering more bytes than announced, more
  arrivals than the count in one phase (a stage refilled before its fill was waited for), a wait that
  passes on an older phase while a newer one is in progress (parity waits alias), an uninitialised
  mbarrier, a tensor map used without ``fence.proxy.acquire`` (tensormap) by the issuing thread, a
  destination not 128-byte aligned, and copies or half-arrived phases left when the workgroup ends.
"""

from __future__ import annotations

import functools

import numpy as np
from iree.compiler import ir

from wavec.emulator.coop import block_until, note_progress
from wavec.emulator.interp import Compiler, Instr, State, elementwise, register
from wavec.emulator.ops_nvvm import _bases, shared_at
from wavec.errors import EmulatorError
from wavec.runtime.tensor_map import MAP_BYTES, decode_emulated

GLOBAL_SHIFT = 40


def global_address(binding: int, byte_offset: int = 0) -> int:
    """The emulated global address of byte ``byte_offset`` of binding ``binding``."""
    return ((binding + 1) << GLOBAL_SHIFT) + byte_offset


def global_bytes(st: State, address: int, where: str) -> tuple[np.ndarray, int]:
    """(the raw bytes of the binding ``address`` points into, byte offset in it)."""
    b, off = (address >> GLOBAL_SHIFT) - 1, address & ((1 << GLOBAL_SHIFT) - 1)
    if not 0 <= b < len(st.bindings):
        raise EmulatorError(message=f"{where}: global address 0x{address:x} is not in any binding")
    return np.asarray(st.bindings[b]).reshape(-1).view(np.uint8), off


class MBarrier:
    __slots__ = (
        "count",
        "pending",
        "tx",
        "phase",
        "copies",
        "waited",
        "arrived",
        "released",
        "snaps",
        "released_snaps",
    )

    def __init__(self, count: int) -> None:
        self.count, self.pending, self.tx, self.phase = count, count, 0, 0
        self.copies: list = []  # (bytes, land) of box copies in flight that complete on this mbarrier
        self.waited = 0  # phases some thread has waited for
        self.arrived: set[int] = set()  # waves that arrived in the current phase
        self.released: set[int] = set()  # waves that arrived in the last completed phase
        # race checker: per wave, the shared bytes it had read / written when it arrived (current phase, last)
        self.snaps: dict[int, list] = {}
        self.released_snaps: dict[int, list] = {}

    def busy(self) -> bool:
        return bool(self.copies) or self.pending != self.count or self.tx != 0


def _mbarriers(st: State) -> dict[int, MBarrier]:
    if st.mbarriers is None:
        st.mbarriers = {}
        st.__dict__.setdefault("on_exit", []).append(_check_idle)
    return st.mbarriers


def _check_idle(st: State) -> None:
    for addr, bar in _mbarriers(st).items():
        if bar.busy():
            raise EmulatorError(
                message=f"mbarrier at shared address {addr}: the workgroup ends with "
                f"{len(bar.copies)} TMA copies in flight, {bar.pending} of {bar.count} arrivals "
                f"missing and {bar.tx} transaction bytes outstanding"
            )


def _lanes(st: State) -> np.ndarray:
    return np.nonzero(st.active())[0]


def _at(x, lane: int) -> int:
    a = np.asarray(x).reshape(-1)
    return int(a[lane if a.shape[0] > 1 else 0])


def _barrier(st: State, addr: int, where: str) -> MBarrier:
    bar = _mbarriers(st).get(addr)
    if bar is None:
        raise EmulatorError(message=f"{where}: mbarrier at shared address {addr} was never initialised")
    return bar


@register("llvm.inttoptr")
def _inttoptr(c: Compiler, op: ir.Operation) -> Instr:
    return elementwise(c, op, lambda x: np.asarray(x, np.int64))


@register("nvvm.mbarrier.init")
def _init(c: Compiler, op: ir.Operation) -> Instr:
    ins = c.ins(op)
    where = c.loc(op)

    def run(st: State) -> None:
        for lane in _lanes(st):
            addr, count = _at(st.env[ins[0]], lane), _at(st.env[ins[1]], lane)
            if addr % 8 or not any(b <= addr < b + buf.raw.size for b, buf in _bases(st)):
                raise EmulatorError(message=f"{where}: {addr} is not an 8-byte aligned shared address")
            old = _mbarriers(st).get(addr)
            if old is not None and old.busy():
                raise EmulatorError(message=f"{where}: re-initialises the mbarrier at {addr} while it is in use")
            _mbarriers(st)[addr] = MBarrier(count)

    return run


@register("nvvm.fence.mbarrier.init")
def _fence_init(c: Compiler, op: ir.Operation) -> None:
    return None  # initialisation is visible at once here; the workgroup barrier after it is what matters


@register("nvvm.fence.proxy.acquire")
def _fence_acquire(c: Compiler, op: ir.Operation) -> Instr:
    addr, _size = c.ins(op)[:2]

    def run(st: State) -> None:
        fenced = st.__dict__.setdefault("tensormaps_fenced", set())
        fenced.update((int(lane), _at(st.env[addr], lane)) for lane in _lanes(st))

    return run


@register("nvvm.mbarrier.arrive", "nvvm.mbarrier.arrive.expect_tx")
def _arrive(c: Compiler, op: ir.Operation) -> Instr:
    expect_tx = op.name.endswith("expect_tx")
    addr, tx = c.ins(op)[0], c.ins(op)[1] if expect_tx else None
    outs, where = c.outs(op), c.loc(op)
    if not expect_tx and len(op.operands) != 1:
        raise EmulatorError(message=f"{where}: only mbarrier.arrive with the default count of 1 is emulated")
    hint = " (a stage refilled before its previous fill was waited for?)" if expect_tx else ""

    def run(st: State) -> None:
        for lane in _lanes(st):
            a = _at(st.env[addr], lane)
            bar = _barrier(st, a, where)
            if bar.pending == 0:
                raise EmulatorError(
                    message=f"{where}: more than {bar.count} arrivals on the mbarrier at {a} in one phase{hint}"
                )
            bar.pending -= 1
            if tx is not None:  # arrive.expect_tx
                bar.tx += _at(st.env[tx], lane)
            bar.arrived.add(int(st.wave[lane]))
            if st.check_races:
                bar.snaps[int(st.wave[lane])] = _snapshot(st, int(st.wave[lane]))
            note_progress(st)
            if not expect_tx and bar.pending == 0 and bar.tx == 0 and not bar.copies:  # the phase completes now
                _complete(bar, a, where)
        for o in outs:
            st.env[o] = np.zeros(1, np.int64)

    return run


def _complete(bar: MBarrier, addr: int, where: str) -> None:
    """Land the copies in flight and complete the current phase, or say why it never completes."""
    for nbytes, land in bar.copies:
        land()
        bar.tx -= nbytes
    bar.copies = []
    if bar.tx < 0:
        raise EmulatorError(
            message=f"{where}: TMA copies delivered {-bar.tx} bytes more than arrive.expect_tx "
            f"announced on the mbarrier at {addr}"
        )
    if bar.pending or bar.tx:
        raise EmulatorError(
            message=f"{where}: waits for a phase of the mbarrier at {addr} that can never complete: "
            f"{bar.pending} of {bar.count} arrivals missing, {bar.tx} announced bytes that no copy "
            "in flight delivers"
        )
    bar.phase += 1
    bar.pending = bar.count
    bar.released, bar.arrived = bar.arrived, set()
    bar.released_snaps, bar.snaps = bar.snaps, {}


def _snapshot(st: State, wave: int) -> list:
    """(buffer, bytes read, bytes written) by ``wave`` so far: what its arrival orders before the waiters."""
    bit = np.left_shift(np.uint64(1), np.uint64(wave))
    return [(buf, np.nonzero(buf.rd_mask & bit)[0], np.nonzero(buf.wr_wave == wave)[0]) for _b, buf in _bases(st)]


def _phase_over(bar: MBarrier, parity: int) -> bool:
    """A wait on ``parity`` can return: that phase is over, or can complete now."""
    return bar.phase % 2 != parity or (bar.pending == 0 and bar.tx <= sum(n for n, _land in bar.copies))


def _acquire(st: State, bar: MBarrier) -> None:
    """A wait that saw a phase complete: what the waves that arrived in it did to shared memory before
    they arrived is ordered before what the waiting threads do next (modelled by forgetting those accesses
    in the race checker, as a barrier among them would).  Accesses after a wave's arrival stay: a stage
    released before the wgmma reading it retired races with its refill (a byte also accessed before the
    arrival is forgotten whole: the checker keeps one read bit per wave)."""
    if not st.check_races or not bar.released:
        return
    for w in sorted(bar.released):
        bit = np.left_shift(np.uint64(1), np.uint64(w))
        for buf, rd, wr in bar.released_snaps.get(w, ()):
            buf.rd_mask[rd] &= ~bit
            buf.wr_wave[wr[buf.wr_wave[wr] == w]] = -1


@register("nvvm.mbarrier.try_wait.parity")
def _try_wait_parity(c: Compiler, op: ir.Operation) -> Instr:
    addr, parity = c.ins(op)[:2]
    where = c.loc(op)

    def run(st: State) -> None:
        for a, p in sorted({(_at(st.env[addr], lane), _at(st.env[parity], lane) & 1) for lane in _lanes(st)}):
            bar = _barrier(st, a, where)
            if bar.phase % 2 == p:  # the phase of parity p is the current one: wait for it
                block_until(
                    st,
                    functools.partial(_phase_over, bar, p),
                    f"{where} on the mbarrier at {a}, parity {p} ({bar.pending} of {bar.count} arrivals "
                    f"missing, {bar.tx - sum(n for n, _ in bar.copies)} announced bytes not in flight)",
                )
            if bar.phase % 2 == p:  # (a warp-specialized thread may have seen it complete meanwhile)
                _complete(bar, a, where)
            elif bar.busy() and bar.waited >= bar.phase:
                raise EmulatorError(
                    message=f"{where}: waits for parity {p} on the mbarrier at {a}, whose last "
                    "completed phase was already waited for while the next one is in progress "
                    "(the parity aliases an older phase)"
                )
            bar.waited = bar.phase
            _acquire(st, bar)

    return run


def _swizzle(addr: np.ndarray, width: int) -> np.ndarray:
    return addr if width == 0 else addr ^ (((addr >> 7) & (width // 16 - 1)) << 4)


@register("nvvm.cp.async.bulk.tensor.shared.cluster.global")
def _tma_load(c: Compiler, op: ir.Operation) -> Instr:
    seg = list(op.attributes["operandSegmentSizes"])
    ins = c.ins(op)
    rank = seg[2]
    if not 2 <= rank <= 5 or any(seg[4:]):
        raise EmulatorError(
            message=f"{c.loc(op)}: only 2- to 5-D tile-mode TMA loads without multicast, im2col, "
            "cache hints or predicates are emulated"
        )
    dst, desc, coords, mbar = ins[0], ins[1], ins[2 : 2 + rank], ins[2 + rank]
    where, op_id = c.loc(op), c.op_id(op)

    def run(st: State) -> None:
        fenced = st.__dict__.get("tensormaps_fenced", set())
        for lane in _lanes(st):
            m = _at(st.env[desc], lane)
            if (int(lane), m) not in fenced:
                raise EmulatorError(
                    message=f"{where}: uses the tensor map at 0x{m:x} without a "
                    "fence.proxy.tensormap::generic.acquire by this thread first"
                )
            copy = _box(st, m, [_at(st.env[x], lane) for x in coords], _at(st.env[dst], lane), int(lane), op_id, where)
            a = _at(st.env[mbar], lane)
            _barrier(st, a, where).copies.append(copy)
            note_progress(st)

    return run


def _box(st: State, desc: int, coords: list[int], dst: int, lane: int, op_id: int, where: str) -> tuple:
    """(bytes, land) of one box copy; the source is read and the destination race-checked now."""
    raw, off = global_bytes(st, desc, where)
    try:
        _arg, elem, swizzle, address, dims, strides, box = decode_emulated(raw[off : off + MAP_BYTES].tobytes())
    except ValueError as e:
        raise EmulatorError(message=f"{where}: tensor map at 0x{desc:x}: {e}") from None
    src, src_off = global_bytes(st, address, where)
    if len(coords) != len(dims):
        raise EmulatorError(message=f"{where}: {len(coords)} coordinates for a rank-{len(dims)} tensor map")
    # box element (i_0 innermost, ..., i_{n-1}) as an array of box[n-1] x ... x box[0], the box's own order
    idx = np.indices(tuple(reversed(box))).reshape(len(box), -1)[::-1]  # idx[j] = index along dim j
    g = np.asarray(coords, np.int64)[:, None] + idx
    ok = np.all((g >= 0) & (g < np.asarray(dims, np.int64)[:, None]), axis=0)
    first = src_off + np.where(ok, (g * np.asarray(strides, np.int64)[:, None]).sum(axis=0), 0)
    byte = np.arange(elem)
    vals = np.where(ok[..., None], src[np.minimum(first[..., None] + byte, src.size - 1)], 0).astype(np.uint8)
    linear = np.arange(idx.shape[1])  # the box lands densely, innermost dimension first
    if dst % 128:
        raise EmulatorError(message=f"{where}: TMA destination {dst} is not 128-byte aligned")
    daddr = _swizzle(dst + linear * elem, swizzle)[..., None] + byte
    buf, rel = shared_at(st, daddr, f"{where}: TMA destination bytes")
    flat = rel.reshape(-1)
    if st.check_races:
        buf.write(st, flat, np.full(flat.size, st.wave[lane]), op_id)
        buf.unfenced_wave[flat] = -1  # written through the async proxy

    def land() -> None:
        buf.raw[flat] = vals.reshape(-1)
        if st.check_races:
            buf.wr_wave[flat] = -1  # the completed phase publishes the bytes to every waiting thread

    return vals.size, land


@register("nvvm.setmaxregister")
def _setmaxregister(c: Compiler, op: ir.Operation) -> Instr:
    """``setmaxnreg``: no effect here beyond its rules: every thread of a warpgroup executes it together
    (``.sync.aligned``), with a count in [24, 256] that is a multiple of 8."""
    count, where = int(op.attributes["regCount"].value), c.loc(op)
    if not 24 <= count <= 256 or count % 8:
        raise EmulatorError(message=f"{where}: register count {count} is not a multiple of 8 in [24, 256]")

    def run(st: State) -> None:
        act = st.active()
        if st.lanes % 128 or np.any(act.reshape(-1, 128).any(axis=1) != act.reshape(-1, 128).all(axis=1)):
            raise EmulatorError(
                message=f"{where}: setmaxnreg executed by part of a warpgroup (it must be warpgroup-uniform)"
            )

    return run
