"""``gpu`` ops (ids, barrier, shuffle, subgroup_reduce) and the ``hal.interface`` id/constant ops.

Waves (warps) are groups of ``wave_size`` consecutive linear thread ids (x fastest).  ``gpu.shuffle``
follows the hardware: a lane whose source lane falls outside its ``width``-wide segment gets its own
value back and ``valid = false``.
"""

from __future__ import annotations

import numpy as np
from iree.compiler import ir

from wavec.emulator.interp import Compiler, Instr, State, full_lanes, register
from wavec.emulator.types import value_type
from wavec.errors import EmulatorError

_DIMS = {"x": 0, "y": 1, "z": 2}


def _dim(op: ir.Operation) -> int:
    attr = op.attributes["dimension"]
    if isinstance(attr, ir.IntegerAttr):
        return attr.value
    return _DIMS[str(attr).split("<")[-1].rstrip(">")]


@register("gpu.thread_id", "gpu.block_id", "gpu.block_dim", "gpu.grid_dim", "gpu.global_id")
@register("hal.interface.workgroup.id", "hal.interface.workgroup.count", "hal.interface.workgroup.size")
def _ids(c: Compiler, op: ir.Operation) -> Instr:
    (o,) = c.outs(op)
    d, name = _dim(op), op.name.split(".")[-1]
    dtype = value_type(op.results[0].type)[1].reg

    def run(st: State) -> None:
        if name == "thread_id":
            st.env[o] = st.tid[d]
        elif name == "global_id":
            st.env[o] = st.tid[d] + st.block_id[d] * st.block[d]
        else:
            v = {"block_id": st.block_id, "id": st.block_id, "block_dim": st.block, "size": st.block}.get(
                name, st.grid
            )[d]
            st.env[o] = np.array([v], dtype)

    return run


@register("gpu.lane_id", "gpu.subgroup_id", "gpu.num_subgroups", "gpu.subgroup_size")
def _wave_ids(c: Compiler, op: ir.Operation) -> Instr:
    (o,) = c.outs(op)
    name = op.name

    def run(st: State) -> None:
        if name == "gpu.lane_id":
            st.env[o] = st.linear % st.wave_size
        elif name == "gpu.subgroup_id":
            st.env[o] = st.wave
        elif name == "gpu.num_subgroups":
            st.env[o] = np.array([-(-st.lanes // st.wave_size)], np.int64)
        else:
            st.env[o] = np.array([st.wave_size], np.int64)

    return run


@register("hal.interface.constant.load")
def _constant_load(c: Compiler, op: ir.Operation) -> Instr:
    (o,) = c.outs(op)
    ordinal = op.attributes["ordinal"].value
    dtype = value_type(op.results[0].type)[1].reg
    loc = c.loc(op)

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
    mode = str(op.attributes["mode"]).split("<")[-1].rstrip(">")

    def run(st: State) -> None:
        env = st.env
        w = np.asarray(env[width]).astype(np.int64)
        src, valid = _shuffle_src(st, mode, np.asarray(env[off]), w)
        env[o] = full_lanes(env[v], st.lanes)[src]
        env[ov] = valid

    return run


_REDUCE = {
    "add": np.add, "mul": np.multiply, "minnumf": np.fmin, "maxnumf": np.fmax, "minimumf": np.minimum,
    "maximumf": np.maximum, "minsi": np.minimum, "maxsi": np.maximum, "and": np.bitwise_and,
    "or": np.bitwise_or, "xor": np.bitwise_xor,
}  # fmt: skip


@register("gpu.subgroup_reduce")
def _subgroup_reduce(c: Compiler, op: ir.Operation) -> Instr:
    (v,), (o,) = c.ins(op), c.outs(op)
    kind = str(op.attributes["op"]).split("<")[-1].rstrip(">")
    if kind not in _REDUCE:
        raise EmulatorError(message=f"{c.loc(op)}: unsupported reduction {kind}")
    fn, fix = _REDUCE[kind], value_type(op.results[0].type)[1].fix
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
