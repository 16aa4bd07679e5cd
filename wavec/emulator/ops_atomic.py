"""``memref.atomic_rmw``: per-lane atomic read-modify-write of global or shared memory.

The lanes of a wave apply their updates one after another in lane order, each returning the value it
replaced, so lanes hitting one address all land (a GPU orders them arbitrarily; sums then differ only by
float rounding order).  Addresses are bounds-checked like loads and stores; an atomic never counts as a
race with other atomics (shared memory: with plain accesses of the same bytes between two barriers).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from iree.compiler import ir
from iree.compiler.dialects import arith

from wavec.emulator.interp import Compiler, Instr, State, register
from wavec.emulator.memory import _race_bytes, address, element_indices
from wavec.errors import EmulatorError

_COMBINE: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "addf": np.add, "addi": np.add, "maximumf": np.maximum, "minimumf": np.minimum, "maxs": np.maximum,
    "mins": np.minimum, "maxu": np.maximum, "minu": np.minimum, "assign": lambda old, v: v,
}  # fmt: skip


def _kind(op: ir.Operation) -> str:
    """The ``arith.AtomicRMWKind`` name (the attribute is its integer value)."""
    return arith.AtomicRMWKind(ir.IntegerAttr(op.attributes["kind"]).value).name


@register("memref.atomic_rmw")
def _atomic_rmw(c: Compiler, op: ir.Operation) -> Instr:
    (v, m, *idx), (o,) = c.ins(op), c.outs(op)
    kind, loc, op_id = _kind(op), c.loc(op), c.op_id(op)
    if kind not in _COMBINE:
        raise EmulatorError(message=f"{loc}: memref.atomic_rmw kind {kind} is not emulated")
    combine = _COMBINE[kind]

    def run(st: State) -> None:
        mem = st.env[m]
        eidx = element_indices([st.env[i] for i in idx], (), [])
        valid = st.mask
        addr = np.broadcast_to(address(st, mem, eidx, valid, loc).reshape(-1), (st.lanes,))
        vals = np.broadcast_to(mem.et.to_mem(np.asarray(st.env[v])).reshape(-1), (st.lanes,))
        if mem.shared is not None and st.check_races:  # ordered against plain accesses only
            lanes: np.ndarray | None = None
            if valid is not None:  # a lane updates when its (one) element is active
                lanes = np.asarray(np.asarray(valid, dtype=bool).reshape(st.lanes, -1).all(axis=1)).reshape(-1, 1)
            mem.shared.atomic(st, *_race_bytes(st, mem, addr.reshape(-1, 1), lanes), op_id)
        old = np.zeros(st.lanes, dtype=mem.arr.dtype)
        for lane in range(st.lanes):
            if valid is None or valid[lane].all():
                a = int(addr[lane])
                old[lane] = mem.arr[a]
                new = combine(mem.et.from_mem(mem.arr[a : a + 1]), mem.et.from_mem(vals[lane : lane + 1]))
                mem.arr[a] = mem.et.to_mem(new)[0]
        st.env[o] = mem.et.from_mem(old)

    return run
