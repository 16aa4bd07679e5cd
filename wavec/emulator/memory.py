"""Memory of the emulator: strided memref views over flat buffers, checked loads/stores, race checker.

A :class:`MemRef` is a strided view (element offset, shape, strides) of a flat numpy array in the
memref's memory dtype.  The offset may be an array over lanes (private per-thread allocations).  Every
access is bounds-checked per dimension for the active lanes only.  Accesses to workgroup (shared)
memory also go through the race checker of their :class:`SharedBuf`, which tracks for every byte the
last writing wave and the set of reading waves since the last ``gpu.barrier``.  Plain stores to global
memory (bindings) go through the launch's :class:`GlobalWrites`: two lanes storing different values to one
byte is a race unless both are of one workgroup with a barrier between them (atomics are never recorded).
Equal values are not reported: lanes holding a replicated value (a row's reduction result) all store it,
and whichever store lands last leaves the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from wavec.emulator.interp import State
from wavec.emulator.types import ElemType
from wavec.errors import EmulatorError, GlobalMemoryRaceError, OutOfBoundsError, SharedMemoryRaceError

ATOMIC_WRITER = -2  # ``SharedBuf.wr_wave`` of bytes updated atomically since the last barrier


class SharedBuf:
    """One workgroup-memory allocation with per-byte race-tracking state."""

    def __init__(self, nbytes: int, name: str) -> None:
        self.raw = np.full(nbytes, 0xFF, np.uint8)  # uninitialised: NaN / -1 everywhere
        self.name = name
        self.wr_wave = np.full(nbytes, -1, np.int64)
        self.wr_op = np.zeros(nbytes, np.int64)
        self.rd_mask = np.zeros(nbytes, np.uint64)
        self.rd_op = np.zeros(nbytes, np.int64)
        # wave whose generic-proxy write of the byte no fence.proxy.async has yet ordered before async-proxy
        # reads (wgmma): -1 when fenced.  Checked by the wgmma emulation (``ops_nvvm``).
        self.unfenced_wave = np.full(nbytes, -1, np.int64)

    def reset(self) -> None:
        """A barrier: forget all accesses."""
        self.wr_wave.fill(-1)
        self.rd_mask.fill(0)

    def _race(self, st: State, byte: int, first: int, second: int) -> SharedMemoryRaceError:
        return SharedMemoryRaceError(address=byte, buffer=self.name, first=st.locs[first], second=st.locs[second])

    def _check_writers(self, st: State, b: np.ndarray, w: np.ndarray, op: int) -> None:
        """Raise if another wave wrote any of bytes ``b`` since the last barrier (any wave atomically)."""
        ww = self.wr_wave[b]
        bad = ((ww >= 0) & (ww != w)) | (ww == ATOMIC_WRITER)
        if bad.any():
            i = int(np.argmax(bad))
            raise self._race(st, int(b[i]), int(self.wr_op[b[i]]), op)

    def read(self, st: State, b: np.ndarray, w: np.ndarray, op: int) -> None:
        self._check_writers(st, b, w, op)
        np.bitwise_or.at(self.rd_mask, b, np.left_shift(np.uint64(1), w.astype(np.uint64)))
        self.rd_op[b] = op

    def atomic(self, st: State, b: np.ndarray, w: np.ndarray, op: int) -> None:
        """An atomic update: races with plain writes and other waves' reads since the last barrier, not
        with other atomics; a plain access of the bytes before the next barrier races with it."""
        ww = self.wr_wave[b]
        others = self.rd_mask[b] & ~np.left_shift(np.uint64(1), w.astype(np.uint64))
        bad = ((ww >= 0) & (ww != w)) | (others != 0)
        if bad.any():
            i = int(np.argmax(bad))
            first = self.wr_op[b[i]] if ww[i] >= 0 else self.rd_op[b[i]]
            raise self._race(st, int(b[i]), int(first), op)
        self.wr_wave[b] = ATOMIC_WRITER
        self.wr_op[b] = op

    def write(self, st: State, b: np.ndarray, w: np.ndarray, op: int) -> None:
        self._check_writers(st, b, w, op)
        others = self.rd_mask[b] & ~np.left_shift(np.uint64(1), w.astype(np.uint64))
        if others.any():
            i = int(np.argmax(others != 0))
            raise self._race(st, int(b[i]), int(self.rd_op[b[i]]), op)
        self.wr_wave[b] = w
        clash = self.wr_wave[b] != w  # two waves wrote the same byte in this one op
        if clash.any():
            i = int(np.argmax(clash))
            raise self._race(st, int(b[i]), op, op)
        self.wr_op[b] = op
        self.unfenced_wave[b] = w


class GlobalWrites:
    """The non-atomic stores of one launch to global memory: per binding byte, the writer (workgroup and
    lane, as ``workgroup * lanes + lane + 1``; 0: none yet), its workgroup's barrier epoch and the op."""

    def __init__(self, grid: tuple, lanes: int) -> None:
        self.grid, self.lanes = grid, lanes
        self.bufs: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def _who(self, code: int, op: int, st: State) -> str:
        wg, lane = divmod(code - 1, self.lanes)
        gx, gy = self.grid[0], self.grid[1]
        return f"{st.locs[op]} in lane {lane} of workgroup {(wg % gx, wg // gx % gy, wg // (gx * gy))}"

    def store(self, st: State, m: MemRef, addr: np.ndarray, lanes: np.ndarray, data: np.ndarray, op: int) -> None:
        """Record the stores of ``data`` (memory dtype) to elements ``addr`` of ``m`` by ``lanes`` (flat,
        one per element), before they land."""
        n, key = m.et.mem.itemsize, m.extra["binding"]
        if key not in self.bufs:
            size = np.asarray(st.bindings[key]).nbytes
            self.bufs[key] = (np.zeros(size, np.int64), np.zeros(size, np.int64), np.zeros(size, np.int32))
        who, epoch, ops = self.bufs[key]
        b = ((addr * n + m.extra["byte_offset"])[:, None] + np.arange(n)).reshape(-1)
        gx, gy, _ = self.grid
        wg = st.block_id[0] + gx * (st.block_id[1] + gy * st.block_id[2])
        me = np.repeat(wg * self.lanes + lanes + 1, n)
        new = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        held = np.asarray(st.bindings[key]).reshape(-1).view(np.uint8)[b]
        prev = who[b]
        unordered = ((prev - 1) // self.lanes != wg) | (epoch[b] == st.epoch)
        bad = (prev != 0) & (prev != me) & unordered & (held != new)
        order = np.argsort(b, kind="stable")  # two lanes of this one store on one byte
        dup = np.zeros(b.size, bool)
        same, after = order[:-1], order[1:]
        dup[after] = (b[after] == b[same]) & (me[after] != me[same]) & (new[after] != new[same])
        if bad.any() or dup.any():
            i = int(np.argmax(bad | dup))
            first = (int(prev[i]), int(ops[b[i]])) if bad[i] else (int(me[order[np.searchsorted(b[order], b[i])]]), op)
            elem = int(b[i] - m.extra["byte_offset"]) // n
            raise GlobalMemoryRaceError(
                index=[int(x) for x in np.unravel_index(elem, m.shape)] if m.strides == row_major(m.shape) else elem,
                buffer=m.name,
                first=self._who(first[0], first[1], st),
                second=self._who(int(me[i]), op, st),
            )
        who[b], epoch[b], ops[b] = me, st.epoch, op


@dataclass
class MemRef:
    """A strided view of a flat buffer ``arr`` (memory dtype of ``et``)."""

    arr: np.ndarray
    offset: int | np.ndarray
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    et: ElemType
    name: str
    shared: SharedBuf | None = None  # then ``arr`` is a view of all of ``shared.raw``
    extra: dict = field(default_factory=dict)


def row_major(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return tuple(reversed(strides))


def element_indices(idxs: list[np.ndarray], vshape: tuple[int, ...], vmap: list[int | None]) -> list:
    """Per-memref-dim index arrays of shape (L|1, *vshape) for a vector access at ``idxs``; vector dim ``i``
    walks along memref dim ``vmap[i]`` (None: a broadcast dim)."""
    r = len(vshape)
    out = [np.asarray(i, dtype=np.int64).reshape((-1,) + (1,) * r) for i in idxs]
    for i, d in enumerate(vmap):
        if d is None:
            continue
        shape = [1] * (r + 1)
        shape[i + 1] = vshape[i]
        out[d] = out[d] + np.arange(vshape[i], dtype=np.int64).reshape(shape)
    return out


def _valid(st: State, ndim: int, emask: np.ndarray | None) -> np.ndarray | None:
    """The active lanes (shaped to broadcast against a (lanes, ...) array of rank ``ndim``) and ``emask``."""
    lm = None if st.mask is None else st.mask.reshape((st.lanes,) + (1,) * (ndim - 1))
    if emask is None:
        return lm
    return emask if lm is None else (lm & emask)


def address(st: State, m: MemRef, eidx: list[np.ndarray], valid: np.ndarray | None, loc: str) -> np.ndarray:
    """Flat element addresses of an access; raises EmulatorError for an active out-of-bounds element."""
    addr = np.asarray(m.offset).reshape((-1,) + (1,) * (eidx[0].ndim - 1)) if eidx else m.offset
    for d, e in enumerate(eidx):
        bad = (e < 0) | (e >= m.shape[d])
        if valid is not None:
            bad = bad & valid
        if bad.any():
            shape = np.broadcast_shapes(bad.shape, e.shape)
            where = tuple(np.argwhere(np.broadcast_to(bad, shape))[0])
            val = np.broadcast_to(e, shape)[where]
            raise OutOfBoundsError(
                getattr(loc, "source", None),
                access=loc,
                index=int(val),
                dim=d,
                memory=f"{m.name} (shape {list(m.shape)})",
                bound=m.shape[d],
                who=f"lane {int(where[0])} of workgroup {tuple(int(x) for x in st.block_id)}",
            )
        addr = addr + e * m.strides[d]
    addr = np.asarray(addr, dtype=np.int64)
    bad = (addr < 0) | (addr >= m.arr.size)
    if valid is not None:
        bad = bad & valid
    if bad.any():
        raise EmulatorError(message=f"{loc}: access outside the buffer of {m.name}")
    return addr


def check_alignment(st: State, m: MemRef, eidx: list[np.ndarray], align: int, loc: str) -> None:
    """Raise EmulatorError where an active lane's vector access of a kernel binding (16-byte aligned base, as
    the launcher checks) starts off its ``alignment`` attribute: the GPU faults or tears such an access."""
    if not eidx or "binding" not in m.extra:
        return
    first = np.asarray(m.offset, dtype=np.int64).reshape(-1)
    for d, e in enumerate(eidx):
        first = first + e.reshape(e.shape[0], -1)[:, 0] * m.strides[d]
    bad = np.broadcast_to((first * m.arr.itemsize) % align != 0, (st.lanes,))  # a uniform index: one row
    if st.mask is not None:  # a lane counts when it accesses any element
        mask = np.asarray(st.mask, dtype=bool)
        active = np.asarray(mask.reshape(mask.shape[0] if mask.ndim else 1, -1).any(axis=1))
        bad = bad & np.broadcast_to(active, (st.lanes,))
    if bad.any():
        lane = int(np.argmax(bad))
        at = int(first[lane if first.size > 1 else 0]) * m.arr.itemsize
        raise EmulatorError(
            message=f"{loc}: lane {lane} accesses {m.name} at byte {at}, "
            f"not a multiple of the access's alignment {align}"
        )


def _race_bytes(st: State, m: MemRef, addr: np.ndarray, valid: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    full = (st.lanes,) + addr.shape[1:]
    a = np.broadcast_to(addr, full)
    w = np.broadcast_to(st.wave.reshape((-1,) + (1,) * (a.ndim - 1)), full)
    if valid is not None:
        sel = np.broadcast_to(valid, full)
        a, w = a[sel], w[sel]
    else:
        a, w = a.reshape(-1), w.reshape(-1)
    n = m.et.mem.itemsize
    b = (a * n)[:, None] + np.arange(n)
    return b.reshape(-1), np.repeat(w, n)


def load(
    st: State, m: MemRef, eidx: list[np.ndarray], loc: str, op: int, emask: np.ndarray | None = None
) -> np.ndarray:
    """Gather the register values at element indices ``eidx`` (inactive / masked elements read 0)."""
    ndim = eidx[0].ndim if eidx else 1
    valid = _valid(st, ndim, emask)
    addr = address(st, m, eidx, valid, loc)
    if valid is not None:
        addr = np.where(valid, addr, 0)
    if m.arr.size == 0:  # every element is masked off (bounds were checked above): nothing to read
        vals = np.zeros(np.shape(addr), dtype=m.arr.dtype)
    else:
        vals = m.arr[addr]
    if m.shared is not None and st.check_races:
        m.shared.read(st, *_race_bytes(st, m, addr, valid), op)
    return m.et.from_mem(vals)


def store(
    st: State, m: MemRef, eidx: list[np.ndarray], vals: np.ndarray, loc: str, op: int, emask: np.ndarray | None = None
) -> None:
    """Scatter register values ``vals`` to element indices ``eidx`` for active, unmasked elements."""
    ndim = max(eidx[0].ndim if eidx else 1, np.ndim(vals))
    valid = _valid(st, ndim, emask)
    addr = address(st, m, eidx, valid, loc)
    mem = m.et.to_mem(vals)
    shape = np.broadcast_shapes(addr.shape, mem.shape, valid.shape if valid is not None else ())
    addr_b, mem_b = np.broadcast_to(addr, shape), np.broadcast_to(mem, shape)
    if m.shared is not None and st.check_races:
        m.shared.write(st, *_race_bytes(st, m, addr_b, valid), op)
    elif st.global_writes is not None and "binding" in m.extra:
        full = (st.lanes,) + tuple(shape[1:])  # a uniform address is stored by every active lane
        lanes = np.broadcast_to(np.arange(st.lanes).reshape((-1,) + (1,) * (len(shape) - 1)), full)
        sel = np.ones(full, bool) if valid is None else np.broadcast_to(valid, full)
        data = np.broadcast_to(mem_b, full)[sel]
        st.global_writes.store(st, m, np.broadcast_to(addr_b, full)[sel], lanes[sel], data, op)
    if valid is None:
        m.arr[addr_b.reshape(-1)] = mem_b.reshape(-1)
    else:
        sel = np.broadcast_to(valid, shape)
        m.arr[addr_b[sel]] = mem_b[sel]
