"""``gpu`` ops (ids, barrier, shuffle, subgroup_reduce) and the ``hal.interface`` id/constant ops.

Waves (warps) are groups of ``wave_size`` consecutive linear thread ids (x fastest).  ``gpu.shuffle``
follows the hardware: a lane whose source lane falls outside its ``width``-wide segment gets its own
value back and ``valid = false``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from iree.compiler import ir

from wavec.emulator.interp import Compiler, Instr, State, enum_name, full_lanes, register
from wavec.emulator.ops_arith import reduction
from wavec.emulator.types import value_type
from wavec.errors import EmulatorError

_IDS: dict[str, Callable[[State, int], Any]] = {
    "gpu.thread_id": lambda st, d: st.tid[d],
    "gpu.global_id": lambda st, d: st.tid[d] + st.block_id[d] * st.block[d],
    "gpu.block_id": lambda st, d: st.block_id[d],
    "hal.interface.workgroup.id": lambda st, d: st.block_id[d],
    "gpu.block_dim": lambda st, d: st.block[d],
    "hal.interface.workgroup.size": lambda st, d: st.block[d],
    "gpu.grid_dim": lambda st, d: st.grid[d],
    "hal.interface.workgroup.count": lambda st, d: st.grid[d],
    "gpu.lane_id": lambda st, d: st.linear % st.wave_size,
    "gpu.subgroup_id": lambda st, d: st.wave,
    "gpu.num_subgroups": lambda st, d: -(-st.lanes // st.wave_size),
    "gpu.subgroup_size": lambda st, d: st.wave_size,
}


@register(*_IDS)
def _ids(c: Compiler, op: ir.Operation) -> Instr:
    """Per-lane ids are arrays; uniform ones (Python ints) become (1,) arrays of the result type."""
    (o,), fn = c.outs(op), _IDS[op.name]
    d = 0  # the wave ops have no dimension
    if "dimension" in op.attributes:
        attr = op.attributes["dimension"]
        d = attr.value if isinstance(attr, ir.IntegerAttr) else "xyz".index(enum_name(attr))
    dtype = value_type(op.results[0].type)[1].reg

    def run(st: State) -> None:
        v = fn(st, d)
        st.env[o] = v if isinstance(v, np.ndarray) else np.array([v], dtype)

    return run


@register("hal.interface.constant.load")
def _constant_load(c: Compiler, op: ir.Operation) -> Instr:
    (o,), ordinal, loc = c.outs(op), op.attributes["ordinal"].value, c.loc(op)
    dtype = value_type(op.results[0].type)[1].reg

    def run(st: State) -> None:
        if ordinal >= len(st.constants):
            raise EmulatorError(message=f"{loc}: constant {ordinal} not given ({len(st.constants)} given)")
        v = np.array([int(st.constants[ordinal]) & 0xFFFFFFFF], np.uint32).view(np.int32)
        st.env[o] = v.astype(dtype)

    return run


@register("gpu.barrier")
def _barrier(c: Compiler, op: ir.Operation) -> Instr:
    loc = c.loc(op)

    def run(st: State) -> None:
        if st.mask is not None and not st.mask.all():
            raise EmulatorError(message=f"{loc}: barrier reached by only some threads (divergent control flow)")
        for buf in st.shared:
            buf.reset()
        st.epoch += 1

    return run


def _shuffle_src(st: State, mode: str, off: np.ndarray, width: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lw = st.linear % st.wave_size
    seg = (lw // width) * width
    off = off.astype(np.int64)
    if mode == "xor":
        j = lw ^ off
        valid = (j >= seg) & (j < seg + width)
    elif mode == "down":
        j = lw + off
        valid = j < seg + width
    elif mode == "up":
        j = lw - off
        valid = j >= seg
    else:
        j = off + 0 * lw
        valid = (j >= 0) & (j < width)
    return st.linear - lw + np.where(valid, j, lw), valid


@register("gpu.shuffle")
def _shuffle(c: Compiler, op: ir.Operation) -> Instr:
    v, off, width = c.ins(op)
    o, ov = c.outs(op)
    mode = enum_name(op.attributes["mode"])

    def run(st: State) -> None:
        env = st.env
        w = np.asarray(env[width]).astype(np.int64)
        src, valid = _shuffle_src(st, mode, np.asarray(env[off]), w)
        env[o] = full_lanes(env[v], st.lanes)[src]
        env[ov] = valid

    return run


@register("gpu.subgroup_reduce")
def _subgroup_reduce(c: Compiler, op: ir.Operation) -> Instr:
    (v,), (o,) = c.ins(op), c.outs(op)
    fn, fix = reduction(c, op, "op")
    size = op.attributes["cluster_size"].value if "cluster_size" in op.attributes else None
    stride = op.attributes["cluster_stride"].value if "cluster_stride" in op.attributes else 1

    def run(st: State) -> None:
        x = full_lanes(st.env[v], st.lanes)
        lw = st.linear % st.wave_size
        step, n = stride, size or st.wave_size // stride
        while step < stride * n:  # butterfly, as the GPU lowering does: same rounding in every lane
            x = fix(fn(x, x[st.linear - lw + (lw ^ step)]))
            step *= 2
        st.env[o] = x

    return run


@register("nvvm.barrier", "nvvm.barrier.arrive")
def _named_barrier(c: Compiler, op: ir.Operation) -> Instr:
    """``bar.sync id, n`` / ``bar.arrive id, n`` (the consumer warpgroups' ping-pong).  Lanes run in lockstep
    here, so a sync cannot wait for the other warpgroup's arrival; what is checked is what makes the real
    protocol complete: whole warps with one id each, and every barrier's arrivals a multiple of its
    thread count when the workgroup ends (each phase complete: no warpgroup left waiting)."""
    ins, loc = c.ins(op), c.loc(op)
    if len(ins) != 2:  # (barrier id, thread count): wavec always gives both
        raise EmulatorError(message=f"{loc}: {op.name} needs a barrier id and a thread count")

    def run(st: State) -> None:
        act = st.active()
        ids = np.broadcast_to(np.asarray(st.env[ins[0]]).reshape(-1), act.shape)
        count = int(np.asarray(st.env[ins[1]]).reshape(-1)[0])
        warps = act.reshape(-1, st.wave_size)
        if np.any(warps.any(axis=1) != warps.all(axis=1)):
            raise EmulatorError(message=f"{loc}: {op.name} executed by part of a warp (it is .aligned)")
        counts = st.__dict__.setdefault("named_barriers", {})
        if not counts:
            st.__dict__.setdefault("on_exit", []).append(_check_named_barriers)
        for bar in np.unique(ids[act]):
            per_warp = ids.reshape(-1, st.wave_size)[warps.all(axis=1)]
            if np.any((per_warp == bar).any(axis=1) != (per_warp == bar).all(axis=1)):
                raise EmulatorError(message=f"{loc}: the lanes of one warp name different barriers")
            old = counts.get(int(bar), (count, 0))
            if old[0] != count:
                raise EmulatorError(message=f"{loc}: barrier {bar} used with {count} and {old[0]} threads")
            counts[int(bar)] = (count, old[1] + int((ids[act] == bar).sum()))

    return run


def _check_named_barriers(st: State) -> None:
    for bar, (count, arrivals) in st.__dict__.pop("named_barriers", {}).items():
        if arrivals % count:
            raise EmulatorError(
                message=f"named barrier {bar}: the workgroup ends with {arrivals % count} of {count} threads "
                "arrived in its last phase (a warpgroup would wait forever)"
            )
