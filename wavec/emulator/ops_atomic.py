"""Atomics: ``memref.atomic_rmw`` (global or shared memory) and the inline PTX ``red``/``atom`` of NVIDIA
targets (``codegen/dynamic_access.py``), with the ``memref.subview``/``extract_strided_metadata`` that
give the latter their addresses.

The lanes of a wave apply their updates one after another in lane order, each returning the value it
replaced, so lanes hitting one address all land (a GPU orders them arbitrarily; sums then differ only by
float rounding order).  A subview is bounds-checked per dimension like a load (for the active lanes), so
an inline ``red`` names the index out of range like any access; an atomic never counts as a race with
other atomics (shared memory: with plain accesses of the same bytes between two barriers).

Inline PTX is parsed strictly: exactly the strings ``dynamic_access`` emits (``red``/``atom``,
``.relaxed.gpu.global`` or, one word, ``.relaxed.cta.shared`` at a shared-window address), add/min/max
of ``.f32``/``.u32``/``.s32``/``.noftz.f16x2``/``.noftz.bf16x2``,
``.v2``/``.v4`` for ``red``), with their constraints, and the two strings of ``wc.arrive`` (``abi.py``)
(``fence.acq_rel.gpu`` and the wrapping ``atom.acq_rel.gpu.global.inc.u32``); anything else is an
error.  Packed halves add per half in that precision (round to nearest), as the hardware does.

Fences (that inline ``fence.acq_rel.gpu``, AMD's ``llvm.fence`` at agent scope) order nothing here:
workgroups run one after another, each to its end, so every store of an earlier workgroup is visible
to a later one, which is what the fences guarantee on a GPU between a release and the acquire that
observes it (``wc.arrive``).  Which workgroup of a group is last is therefore the one launched last.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
from iree.compiler import ir
from iree.compiler.dialects import arith

from wavec.abi import ARRIVE_PTX, FENCE_PTX
from wavec.emulator.interp import KDYN, Compiler, Instr, State, full_lanes, register
from wavec.emulator.memory import MemRef, _race_bytes, address, element_indices
from wavec.emulator.types import bf16_bits_to_f32, f32_to_bf16_bits
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


@register("memref.subview")
def _subview(c: Compiler, op: ir.Operation) -> Instr:
    """A view at per-lane offsets (unit strides, static sizes: what ``dynamic_access`` emits), bounds-checked
    for its first and last element."""
    src, *dyn = c.ins(op)
    (o,), loc = c.outs(op), c.loc(op)
    offsets = list(ir.DenseI64ArrayAttr(op.attributes["static_offsets"]))
    sizes = list(ir.DenseI64ArrayAttr(op.attributes["static_sizes"]))
    if KDYN in sizes or set(ir.DenseI64ArrayAttr(op.attributes["static_strides"])) != {1}:
        raise EmulatorError(message=f"{loc}: only static sizes and unit strides are emulated")
    slots = iter(dyn)
    where = [next(slots) if x == KDYN else None for x in offsets]

    def run(st: State) -> None:
        m = st.env[src]
        offs = [np.asarray(st.env[w], np.int64) if w is not None else np.int64(x) for w, x in zip(where, offsets)]
        for shift in ((0,) * len(sizes), tuple(n - 1 for n in sizes)):
            eidx = element_indices([off + d for off, d in zip(offs, shift)], (), [])
            address(st, m, eidx, st.mask, loc)
        start = m.offset + sum(np.reshape(off, -1) * s for off, s in zip(offs, m.strides))
        st.env[o] = MemRef(m.arr, start, tuple(sizes), m.strides, m.et, m.name, m.shared, m.extra)

    return run


@register("memref.extract_strided_metadata")
def _strided_metadata(c: Compiler, op: ir.Operation) -> Instr:
    """(the buffer as a rank-0 view at element 0, element offset, sizes, strides) of a view."""
    (src,), (base, offset, *rest) = c.ins(op), c.outs(op)

    def run(st: State) -> None:
        m = st.env[src]
        st.env[base] = MemRef(m.arr, 0, (), (), m.et, m.name, m.shared, m.extra)
        st.env[offset] = np.reshape(np.asarray(m.offset, np.int64), -1)
        for slot, v in zip(rest, list(m.shape) + list(m.strides)):
            st.env[slot] = np.array([v], np.int64)

    return run


_ASM = re.compile(
    r"(?P<inst>red|atom)\.relaxed\.(?P<space>gpu\.global|cta\.shared)\.(?P<kind>add|min|max)(?P<noftz>\.noftz)?(?:\.v(?P<words>[24]))?"
    r"\.(?P<type>f32|u32|s32|f16x2|bf16x2)"
)
_COMBINE_F: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add, "min": np.minimum, "max": np.maximum
}  # fmt: skip
# per PTX type: how the old and the new words combine
_WORDS: dict[str, Callable[[str, np.ndarray, np.ndarray], np.ndarray]] = {
    "f32": lambda k, old, v: _COMBINE_F[k](old.view(np.float32), v.view(np.float32)).view(np.uint32),
    "u32": lambda k, old, v: (old.astype(np.uint64) + v).astype(np.uint32),
    "s32": lambda k, old, v: _COMBINE_F[k](old.view(np.int32), v.view(np.int32)).view(np.uint32),
    "f16x2": lambda k, old, v: (old.view(np.float16) + v.view(np.float16)).view(np.uint32),
    "bf16x2": lambda k, old, v: f32_to_bf16_bits(
        bf16_bits_to_f32(old.view(np.uint16)) + bf16_bits_to_f32(v.view(np.uint16))
    ).view(np.uint32),
}
_LEGAL = {("add", "f32"), ("add", "u32"), ("min", "s32"), ("max", "s32"), ("add", "f16x2"), ("add", "bf16x2")}


def _parse_asm(text: str, constraints: str, where: str) -> tuple[str, str, str, int, bool]:
    """(instruction, kind, PTX type, words, shared) of a red/atom string exactly as ``dynamic_access``
    writes it."""
    m = _ASM.match(text)
    if m is None:
        raise EmulatorError(message=f"{where}: unsupported inline PTX {text!r}")
    inst, kind, ty, words = m["inst"], m["kind"], m["type"], int(m["words"] or 1)
    reg = "f" if ty == "f32" else "r"
    shared = m["space"] == "cta.shared"
    legal = (kind, ty) in _LEGAL and (ty in ("f16x2", "bf16x2")) == bool(m["noftz"])
    legal = legal and not (shared and words > 1)  # vector reductions: global memory only
    if inst == "atom":
        want = f"{m[0]} $0, [$1], $2;", f"={reg},l,{reg}"
        legal = legal and words == 1
    else:
        regs = ", ".join(f"${i + 1}" for i in range(words))
        want = f"{m[0]} [$0], {{{regs}}};" if words > 1 else f"{m[0]} [$0], $1;", ",".join(["l"] + [reg] * words)
    if not legal or (text, constraints) != want:
        raise EmulatorError(message=f"{where}: unsupported inline PTX {text!r} (constraints {constraints!r})")
    return inst, kind, ty, words, shared


def red_asm(c: Compiler, op: ir.Operation, text: str) -> Instr | None:
    """The instruction of an inline ``red``/``atom`` or of ``wc.arrive``'s fence (None: ``text`` is none
    of them)."""
    where = c.loc(op)
    if text in (FENCE_PTX, ARRIVE_PTX):
        return _arrive_asm(c, op, text, where)
    if not text.startswith(("red.", "atom.")):
        return None
    inst, kind, ty, words, shared = _parse_asm(text, ir.StringAttr(op.attributes["constraints"]).value, where)
    (addr, *vals), outs = c.ins(op), c.outs(op)
    combine, op_id = _WORDS[ty], c.op_id(op)

    def run(st: State) -> None:
        from wavec.emulator.ops_tma import global_bytes

        a = full_lanes(np.reshape(np.asarray(st.env[addr], np.int64), -1), st.lanes)
        bits = [full_lanes(_word_bits(st.env[v]), st.lanes) for v in vals]
        old = np.zeros(st.lanes, np.uint32)
        if shared:
            _shared_update(st, a, bits[0], old, lambda o, v: combine(kind, o, v), where, op_id)
        for lane in np.flatnonzero(st.active()) if not shared else ():
            raw, off = global_bytes(st, int(a[lane]), where)
            if off % (4 * words) or off + 4 * words > raw.size:
                raise EmulatorError(message=f"{where}: {inst} at byte {off} of a binding: misaligned or outside it")
            mem = raw[off : off + 4 * words].view(np.uint32)
            old[lane] = mem[0]
            mem[:] = combine(kind, mem.copy(), np.array([b[lane] for b in bits], np.uint32))
        if outs:
            st.env[outs[0]] = old.view(np.float32 if ty == "f32" else np.int32)

    return run


def _shared_update(st: State, a: np.ndarray, bits: np.ndarray, old: np.ndarray, combine, where: str, op: int) -> None:
    """One word per active lane at shared-window addresses ``a``, in lane order (``old``: the words
    replaced); recorded as an atomic for the race checker."""
    from wavec.emulator.ops_nvvm import shared_at

    lanes = np.flatnonzero(st.active())
    if not lanes.size:
        return
    buf, rel = shared_at(st, a[lanes], f"{where}: shared atom/red addresses")
    if (rel % 4).any():
        raise EmulatorError(message=f"{where}: shared atom/red at a misaligned byte offset {int(rel[rel % 4 != 0][0])}")
    words = buf.raw.view(np.uint32)
    if st.check_races:
        b = (rel[:, None] + np.arange(4)).reshape(-1)
        buf.atomic(st, b, np.repeat(st.wave[lanes], 4), op)
    for lane, off in zip(lanes, rel // 4):
        old[lane] = words[off]
        words[off] = combine(words[off : off + 1].copy(), np.array([bits[lane]], np.uint32))[0]


def _word_bits(x) -> np.ndarray:
    """A 32-bit register's bits (an f32 or an i32) as uint32."""
    x = np.asarray(x)
    return x.astype(np.float32).view(np.uint32) if x.dtype.kind == "f" else x.astype(np.int64).astype(np.uint32)


def _arrive_asm(c: Compiler, op: ir.Operation, text: str, where: str) -> Instr:
    """``fence.acq_rel.gpu`` (nothing to order: see the module docstring) or the arrival's ``atom.inc``:
    per active lane in lane order, ``old = *a; *a = old >= wrap ? 0 : old + 1`` (unsigned), ``old`` back."""
    constraints = ir.StringAttr(op.attributes["constraints"]).value
    if (text, constraints) not in ((FENCE_PTX, "~{memory}"), (ARRIVE_PTX, "=r,l,r,~{memory}")):
        raise EmulatorError(message=f"{where}: unsupported inline PTX {text!r} (constraints {constraints!r})")
    if text == FENCE_PTX:
        return lambda st: None
    (addr, wrap), (out,) = c.ins(op), c.outs(op)

    def run(st: State) -> None:
        from wavec.emulator.ops_tma import global_bytes

        a = full_lanes(np.reshape(np.asarray(st.env[addr], np.int64), -1), st.lanes)
        top = full_lanes(_word_bits(st.env[wrap]), st.lanes)
        old = np.zeros(st.lanes, np.uint32)
        for lane in np.flatnonzero(st.active()):
            raw, off = global_bytes(st, int(a[lane]), where)
            if off % 4 or off + 4 > raw.size:
                raise EmulatorError(message=f"{where}: atom.inc at byte {off} of a binding: misaligned or outside it")
            word = raw[off : off + 4].view(np.uint32)
            old[lane] = word[0]
            word[0] = 0 if word[0] >= top[lane] else word[0] + 1
        st.env[out] = old.view(np.int32)

    return run


@register("llvm.fence")
def _fence(c: Compiler, op: ir.Operation) -> Instr:
    """An agent-scope acquire or release fence (``codegen/arrive.py`` on AMD): nothing to order here."""
    scope = op.attributes["syncscope"] if "syncscope" in op.attributes else None
    if scope is None or ir.StringAttr(scope).value != "agent":
        raise EmulatorError(message=f"{c.loc(op)}: only agent-scope fences are emulated, got {op}")
    return lambda st: None
