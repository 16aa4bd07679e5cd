"""Structured control flow (``scf.for``/``if``/``while``) and ``affine.apply``/``min``/``max``.

Uniform conditions and bounds run one path.  Lane-divergent ones run masked: ``State.mask`` holds the
active lanes, memory is written only by active lanes, and loop-carried / region results are selected
per lane.  A warpgroup-uniform ``scf.if`` whose two regions both wait on mbarriers (a warp-specialized
producer/consumer split) runs its branches as cooperating threads of control (``coop.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from iree.compiler import ir

from wavec.emulator.coop import run_split
from wavec.emulator.interp import Compiler, Instr, State, find_ops, register, run_block
from wavec.emulator.types import value_type
from wavec.errors import EmulatorError


def _where(cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    nd = max(np.ndim(a), np.ndim(b))
    return np.where(cond.reshape(cond.shape + (1,) * (nd - 1)), a, b)


def _split(st: State, cond: np.ndarray) -> tuple[bool | None, np.ndarray]:
    """(uniform truth value or None if divergent, active lanes)."""
    act = st.active()
    ca = cond if cond.shape[0] == 1 else cond[act]
    if ca.all() or not ca.any():
        return bool(ca.all()), act
    return None, act


def _set_mask(st: State, m: np.ndarray) -> None:
    st.mask = None if m.all() else m


@register("scf.for")
def _for(c: Compiler, op: ir.Operation) -> Instr:
    lb, ub, step, *inits = c.ins(op)
    outs = c.outs(op)
    body = op.regions[0].blocks[0]
    iv, *iargs = c.args(body)
    instrs, term = c.block(body)
    ys = c.ins(term) if term is not None else []
    dtype = value_type(op.operands[0].type)[1].reg

    def uniform_loop(st: State, lo: int, hi: int, s: int, vals: list) -> list:
        env = st.env
        for i in range(lo, hi, s):
            env[iv] = np.array([i], dtype)
            for a, v in zip(iargs, vals, strict=False):
                env[a] = v
            run_block(st, instrs)
            vals = [env[y] for y in ys]
        return vals

    def run(st: State) -> None:
        env = st.env
        lo, hi, s = (np.asarray(env[i]) for i in (lb, ub, step))
        vals = [env[i] for i in inits]
        bounds = np.broadcast_arrays(lo, hi, s)
        act = st.active()
        if all(b.shape[0] == 1 or np.all(b[act] == b[act][0]) for b in bounds) and act.any():
            lo_i, hi_i, s_i = (int(b[act][0]) if b.shape[0] > 1 else int(b[0]) for b in bounds)
            vals = uniform_loop(st, lo_i, hi_i, s_i, vals)
        else:
            vals = _divergent_loop(st, instrs, iv, iargs, ys, bounds, vals)
        for o, v in zip(outs, vals, strict=False):
            env[o] = v

    return run


def _divergent_loop(
    st: State, instrs: list, iv: int, iargs: list, ys: list, bounds: Sequence[np.ndarray], vals: list
) -> list:
    lo, hi, s = (np.broadcast_to(b, (st.lanes,)).astype(np.int64) for b in bounds)
    trip = np.maximum(0, -((lo - hi) // s))
    saved, base = st.mask, st.active()
    env = st.env
    n = int(trip[base].max()) if base.any() else 0
    for k in range(n):
        act = base & (trip > k)
        _set_mask(st, act)
        env[iv] = (lo + k * s).astype(bounds[0].dtype)
        for a, v in zip(iargs, vals, strict=False):
            env[a] = v
        run_block(st, instrs)
        vals = [_where(act, env[y], v) for y, v in zip(ys, vals, strict=False)]
    st.mask = saved
    return vals


WAIT_OP = "nvvm.mbarrier.try_wait.parity"
WARPGROUP = 128


def _waits(region: ir.Region) -> bool:
    """Whether the region contains an mbarrier wait (at any depth)."""
    ops = [o.operation for block in region.blocks for o in block.operations]
    return any(o.name == WAIT_OP or find_ops(o, WAIT_OP) for o in ops)


def _warpgroup_uniform(st: State, cnd: np.ndarray, act: np.ndarray) -> bool:
    if st.lanes % WARPGROUP:
        return False
    c, a = cnd.reshape(-1, WARPGROUP), act.reshape(-1, WARPGROUP)
    return all(len(set(c[g][a[g]].tolist())) <= 1 for g in range(c.shape[0]))


@register("scf.if")
def _if(c: Compiler, op: ir.Operation) -> Instr:
    (cond,), outs = c.ins(op), c.outs(op)
    has_else = len(op.regions[1].blocks) > 0
    split = not outs and has_else and all(_waits(r) for r in op.regions)
    then_i, then_t = c.block(op.regions[0].blocks[0])
    then_y = c.ins(then_t) if then_t is not None else []
    else_i, else_t = c.block(op.regions[1].blocks[0]) if has_else else ([], None)
    else_y = c.ins(else_t) if else_t is not None else []

    def run(st: State) -> None:
        env = st.env
        cnd = np.asarray(env[cond])
        u, act = _split(st, cnd)
        if u is not None:
            run_block(st, then_i if u else else_i)
            for o, y in zip(outs, then_y if u else else_y, strict=False):
                env[o] = env[y]
            return
        if split and _warpgroup_uniform(st, np.broadcast_to(cnd, act.shape), act):
            run_split(st, [(act & cnd, then_i), (act & ~cnd, else_i)])
            return
        saved = st.mask
        st.mask = act & cnd
        run_block(st, then_i)
        tv = [env[y] for y in then_y]
        st.mask = act & ~cnd
        run_block(st, else_i)
        for o, t, y in zip(outs, tv, else_y, strict=False):
            env[o] = _where(cnd, t, env[y])
        st.mask = saved

    return run


@register("scf.while")
def _while(c: Compiler, op: ir.Operation) -> Instr:
    inits, outs = c.ins(op), c.outs(op)
    before, after = op.regions[0].blocks[0], op.regions[1].blocks[0]
    b_args, a_args = c.args(before), c.args(after)
    b_i, b_t = c.block(before)
    a_i, a_t = c.block(after)
    cond, *fwd = c.ins(b_t)
    ys = c.ins(a_t)

    def run(st: State) -> None:
        env = st.env
        saved, act = st.mask, st.active()
        vals, res = [env[i] for i in inits], None
        while True:
            for a, v in zip(b_args, vals, strict=False):
                env[a] = v
            run_block(st, b_i)
            cnd = np.broadcast_to(np.asarray(env[cond]), (st.lanes,))
            fw = [env[f] for f in fwd]
            leave, stay = act & ~cnd, act & cnd
            res = fw if res is None else [_where(leave, f, r) for f, r in zip(fw, res, strict=False)]
            if not stay.any():
                break
            act = stay
            _set_mask(st, act)
            for a, v in zip(a_args, fw, strict=False):
                env[a] = v
            run_block(st, a_i)
            vals = [env[y] for y in ys]
        st.mask = saved
        for o, r in zip(outs, res, strict=False):
            env[o] = r

    return run


# ---------------------------------------------------------------- affine

AffineFn = Callable[[list], np.ndarray]


def compile_expr(e: ir.AffineExpr, n_dims: int) -> AffineFn:
    """An affine expression as a function of the map's operands (dims then symbols)."""
    if isinstance(e, ir.AffineConstantExpr):
        v = e.value
        return lambda xs: np.int64(v)
    if isinstance(e, ir.AffineDimExpr):
        p = e.position
        return lambda xs: xs[p]
    if isinstance(e, ir.AffineSymbolExpr):
        p = n_dims + e.position
        return lambda xs: xs[p]
    lhs, rhs = compile_expr(e.lhs, n_dims), compile_expr(e.rhs, n_dims)
    if isinstance(e, ir.AffineAddExpr):
        return lambda xs: lhs(xs) + rhs(xs)
    if isinstance(e, ir.AffineMulExpr):
        return lambda xs: lhs(xs) * rhs(xs)
    if isinstance(e, ir.AffineModExpr):
        return lambda xs: np.mod(lhs(xs), rhs(xs))
    if isinstance(e, ir.AffineFloorDivExpr):
        return lambda xs: np.floor_divide(lhs(xs), rhs(xs))
    if isinstance(e, ir.AffineCeilDivExpr):
        return lambda xs: -np.floor_divide(-lhs(xs), rhs(xs))
    raise EmulatorError(message=f"unsupported affine expression {e}")


@register("affine.apply", "affine.min", "affine.max")
def _affine(c: Compiler, op: ir.Operation) -> Instr:
    ins, (o,) = c.ins(op), c.outs(op)
    amap = op.attributes["map"].value
    fns = [compile_expr(e, amap.n_dims) for e in amap.results]
    red = np.maximum if op.name == "affine.max" else np.minimum  # affine.apply: one result, never reduced

    def run(st: State) -> None:
        xs = [np.asarray(st.env[i], np.int64) for i in ins]
        vals = [np.asarray(f(xs), np.int64).reshape(-1) for f in fns]
        r = vals[0]
        for v in vals[1:]:
            r = red(r, v)
        st.env[o] = r

    return run
