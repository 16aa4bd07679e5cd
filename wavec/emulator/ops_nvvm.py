"""Hopper ops: ``nvvm.wgmma.*`` over warpgroups, ``nvvm.fence.proxy``, the shared-memory address of a
tile (``memref.extract_aligned_pointer_as_index``) and the ``llvm`` struct ops that carry accumulators.

- Shared memory has one address space per workgroup: allocation ``i`` starts at the sum of the sizes of
  the allocations before it, each rounded up to 1024 bytes (the hardware packs them at least 128-byte
  aligned; 1024 keeps every swizzle atom aligned).  Descriptors carry these addresses.
- ``wgmma.mma_async`` m64nNk16 f16/bf16, m64nNk32 s8 (s32 results, wrapping) and m64nNk8 tf32 (PTX
  ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"; K is 32 bytes in each): a warpgroup
  is 4 consecutive warps (128 lanes); both descriptors must be uniform over it.  A (64 x K)
  and B (N x K, K-major) are read through the decoded descriptors (start address, LBO, SBO, swizzle
  mode).  Mode none: element ``(r, k)`` at ``start + (r // 8) * SBO + (k // e) * LBO + (r % 8) * 16 +
  (k % e) * bytes`` with ``e`` elements per 16 bytes; W-byte swizzle (128, 64, 32): at
  ``a ^ (((a >> 7) & (W/16 - 1)) << 4)`` for ``a = start + (r // 8) * SBO + (r % 8) * W + k * bytes`` (the
  XOR acts on the address, so allocations are 1024-byte aligned here as on the GPU).  Accumulator
  register ``4j + 2r + e`` of lane ``l`` (warp ``w = l // 32``, ``g = l % 32 // 4``, ``t = l % 4``) is
  ``D[16w + g + 8r, 8j + 2t + e]``.
- Asynchrony is modelled at its latest point: a wgmma reads shared memory and writes its result when a
  ``wgmma.wait_group`` retires its group; until then its result is an ``InFlight`` value that only the
  next wgmma of the chain and the loop may pass along: reading it (``llvm.extractvalue``) is an error,
  and overwriting a tile an in-flight wgmma reads gives wrong numbers.  A wgmma with no
  ``wgmma.fence`` since the last wait is an error; so is one reading shared bytes that a thread wrote
  (through the generic proxy) without a ``fence.proxy.async`` since (checked with the race checker on).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from iree.compiler import ir

from wavec.abi import FENCE_OPERANDS
from wavec.emulator.interp import Compiler, Instr, State, constant, elementwise, enum_name, full_lanes, register
from wavec.emulator.memory import SharedBuf
from wavec.emulator.ops_atomic import red_asm
from wavec.emulator.ops_vector import insert_at
from wavec.emulator.types import bf16_bits_to_f32
from wavec.errors import EmulatorError

GROUP = 128  # lanes of a warpgroup
ALLOC_ALIGN = 1024


def _bases(st: State) -> list[tuple[int, SharedBuf]]:
    out, addr = [], 0
    for buf in st.shared:
        out.append((addr, buf))
        addr += -(-buf.raw.size // ALLOC_ALIGN) * ALLOC_ALIGN
    return out


def shared_at(st: State, addr: np.ndarray, what: str) -> tuple[SharedBuf, np.ndarray]:
    """The shared allocation holding every byte address of ``addr`` and the offsets into it; else an
    ``EmulatorError`` naming ``what``."""
    for base, buf in _bases(st):
        rel = addr - base
        if rel.min() >= 0 and rel.max() < buf.raw.size:
            return buf, rel
    raise EmulatorError(message=f"{what} {addr.min()}..{addr.max()} are not in one shared allocation")


@register("memref.extract_aligned_pointer_as_index")
def _aligned_pointer(c: Compiler, op: ir.Operation) -> Instr:
    (src,), (o,) = c.ins(op), c.outs(op)
    loc = c.loc(op)

    def run(st: State) -> None:
        m = st.env[src]
        if m.shared is None:
            if "binding" not in m.extra:
                raise EmulatorError(message=f"{loc}: only shared-memory and binding addresses are emulated")
            from wavec.emulator.ops_tma import global_address  # bindings: TMA tensor maps and their tensors

            st.env[o] = np.array([global_address(m.extra["binding"], m.extra["byte_offset"])], np.int64)
            return
        st.env[o] = np.array([next(a for a, buf in _bases(st) if buf is m.shared)], np.int64)

    return run


_STRUCT_ELEMS = {"f32": np.float32, "i32": np.int32}


def _struct_type(t: ir.Type) -> tuple[int, type]:
    """(length, numpy type) of a struct of f32 (an f32 accumulator) or of i32 (an s32 one)."""
    text = str(t)
    elems = set(text[len("!llvm.struct<(") : -2].split(", "))
    if not text.startswith("!llvm.struct<(") or len(elems) != 1 or not elems <= set(_STRUCT_ELEMS):
        raise EmulatorError(message=f"unsupported struct type {t} (only structs of f32 or of i32)")
    (name,) = elems
    return text.count(name), _STRUCT_ELEMS[name]


@register("llvm.mlir.undef", "llvm.mlir.poison")
def _undef(c: Compiler, op: ir.Operation) -> Instr:
    (o,) = c.outs(op)
    n, kind = _struct_type(op.results[0].type)
    return constant(o, np.full((1, n), np.nan, np.float32) if kind is np.float32 else np.zeros((1, n), kind))


@register("llvm.insertvalue")
def _insertvalue(c: Compiler, op: ir.Operation) -> Instr:
    (pos,), where = list(op.attributes["position"]), c.loc(op)
    at, kind = (slice(None), pos), _struct_type(op.results[0].type)[1]
    return elementwise(c, op, lambda s, v: insert_at(_settled(s, where), np.asarray(v, kind).reshape(-1), at))


@dataclass(eq=False)
class InFlight:
    """The result of a wgmma whose group has not been waited for: nothing may read it (``value`` is
    set when a ``wgmma.wait_group`` retires the group)."""

    value: np.ndarray | None = None


def _early_read(where: str) -> EmulatorError:
    return EmulatorError(message=f"{where}: reads a wgmma accumulator before the wgmma.wait_group that retires it")


def _settled(x, where: str) -> np.ndarray:
    if isinstance(x, InFlight):
        if x.value is None:
            raise _early_read(where)
        return x.value
    return np.asarray(x)


@dataclass(eq=False)
class InFlightPart:
    """One register of an in-flight wgmma result (``llvm.extractvalue`` before the wait): only a
    register-A wgmma (inline PTX, whose accumulator operands are scalars) may take it; anything else
    that reads it (numpy conversion) is the error of reading before the ``wgmma.wait_group``."""

    flight: InFlight
    pos: int
    where: str

    def settled(self) -> np.ndarray:
        return _settled(self.flight, self.where)[:, self.pos]

    def __array__(self, dtype=None, copy=None):
        raise _early_read(self.where)


@register("llvm.extractvalue")
def _extractvalue(c: Compiler, op: ir.Operation) -> Instr:
    (pos,), where = list(op.attributes["position"]), c.loc(op)

    def fn(x: np.ndarray | InFlight) -> np.ndarray | InFlightPart:
        if isinstance(x, InFlight) and x.value is None:
            return InFlightPart(x, pos, where)
        return _settled(x, where)[:, pos]

    return elementwise(c, op, fn)


def _decode(desc: int) -> tuple[int, int, int, int]:
    """(start address, LBO, SBO, swizzle mode) of a 64-bit matrix descriptor."""
    return ((desc & 0x3FFF) << 4, ((desc >> 16) & 0x3FFF) << 4, ((desc >> 32) & 0x3FFF) << 4, (desc >> 62) & 3)


def _operand_bytes(desc: int, rows: int, elem_bytes: int, mn_major: bool = False) -> np.ndarray:
    """Byte addresses (rows, K, elem_bytes) of a rows x K operand (K: 32 bytes, the instruction's), K-major
    or (imm-trans = 1, 16-bit types only) MN-major."""
    start, lbo, sbo, mode = _decode(desc)
    e = 16 // elem_bytes
    r, k = np.arange(rows)[:, None], np.arange(32 // elem_bytes)[None, :]
    width = {0: 16, 1: 128, 2: 64, 3: 32}[mode]
    if mn_major and mode == 0:  # core matrices of 8 K rows x 16 bytes of M/N: SBO along M/N, LBO along K
        elem = start + (r // e) * sbo + (k // 8) * lbo + (k % 8) * 16 + (r % e) * elem_bytes
    elif mn_major:  # W-byte rows along M/N, LBO per W bytes of M/N, SBO per 8 K rows
        per = width // elem_bytes
        elem = start + (r // per) * lbo + (k // 8) * sbo + (k % 8) * width + (r % per) * elem_bytes
    elif mode == 0:  # core matrices: 8 rows x 16 bytes, LBO along K, SBO along M/N
        elem = start + (r // 8) * sbo + (k // e) * lbo + (r % 8) * 16 + (k % e) * elem_bytes
    else:  # W-byte rows of K, SBO per 8-row atom
        elem = start + (r // 8) * sbo + (r % 8) * width + k * elem_bytes
    if mode:  # W-byte swizzle (mode 1, 2, 3: W = 128, 64, 32): the 16-byte chunk bits [4, 4 + log2(W/16))
        # of the address XOR bits [7, 7 + log2(W/16))
        elem = elem ^ (((elem >> 7) & (width // 16 - 1)) << 4)
    return elem[..., None] + np.arange(elem_bytes)


def _gather(st: State, addr: np.ndarray, waves: np.ndarray, dtype: str, op_id: int, where: str) -> np.ndarray:
    """Values (rows, K) at byte addresses ``addr`` read by ``waves``, through the race/proxy checks: f16 /
    bf16 / tf32 as f32 (tf32: the f32 with its low 13 bits dropped, as the tensor core reads it), s8 as
    int64."""
    buf, rel = shared_at(st, addr, f"{where}: descriptor addresses")
    flat = rel.reshape(-1)
    if st.check_races:
        if (buf.unfenced_wave[flat] >= 0).any():
            raise EmulatorError(
                message=f"{where}: wgmma reads shared memory written without a "
                "fence.proxy.async since (the async proxy may not see the write)"
            )
        buf.read(st, np.tile(flat, len(waves)), np.repeat(waves, flat.size), op_id)
    return _decode_elements(buf.raw[rel], dtype)


def _decode_elements(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Elements from their little-endian bytes (the last axis of ``raw``)."""
    if dtype == "s8":
        return raw[..., 0].astype(np.uint8).view(np.int8).astype(np.int64)
    if dtype == "tf32":
        word = sum(raw[..., i].astype(np.uint32) << np.uint32(8 * i) for i in range(4))
        return (word & np.uint32(0xFFFFE000)).view(np.float32)
    bits = raw[..., 0].astype(np.uint16) | (raw[..., 1].astype(np.uint16) << 8)
    return bits.view(np.float16).astype(np.float32) if dtype == "f16" else bf16_bits_to_f32(bits)


_ELEM_BYTES = {"f16": 2, "bf16": 2, "s8": 1, "tf32": 4}


def _acc_positions(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of accumulator register i of lane l, shape (128, n / 2)."""
    lane, i = np.arange(GROUP)[:, None], np.arange(n // 2)[None, :]
    w, g, t = lane // 32, lane % 32 // 4, lane % 4
    j, r, e = i // 4, i % 4 // 2, i % 2
    return 16 * w + g + 8 * r, 8 * j + 2 * t + e


def _wgmma_attrs(op: ir.Operation) -> tuple[int, str, bool, bool]:
    """(N, operand type, A MN-major, B MN-major) of an ``nvvm.wgmma.mma_async``."""
    shape = re.search(r"m\s*=\s*(\d+),\s*n\s*=\s*(\d+),\s*k\s*=\s*(\d+)", str(op.attributes["shape"]))
    if shape is None:
        raise EmulatorError(message=f"{op.name}: unreadable shape {op.attributes['shape']}")
    m, n, k = (int(x) for x in shape.groups())
    type_a = enum_name(op.attributes["typeA"])
    same = str(op.attributes["typeB"]) == str(op.attributes["typeA"])
    if m != 64 or type_a not in _ELEM_BYTES or k * _ELEM_BYTES[type_a] != 32 or not same:
        raise EmulatorError(message=f"{op.name}: only m64nNk16 f16/bf16, k32 s8 and k8 tf32 are emulated")
    if "satfinite" in op.attributes:
        raise EmulatorError(message=f"{op.name}: satfinite is not emulated")
    if enum_name(op.attributes["scaleD"]) != "one":
        raise EmulatorError(message=f"{op.name}: only scaleD = one is emulated")
    return n, type_a, enum_name(op.attributes["layoutA"]) == "col", enum_name(op.attributes["layoutB"]) == "row"


def _group_operand(
    st: State, desc: np.ndarray, grp: int, rows: int, mn_major: bool, dtype: str, op_id: int, where: str
) -> np.ndarray:
    """The (rows, K) operand a warpgroup's descriptor addresses, read through the race/proxy checks."""
    d, waves = desc[grp * GROUP : (grp + 1) * GROUP], np.arange(grp * 4, grp * 4 + 4)
    if np.any(d != d[0]):
        raise EmulatorError(message=f"{where}: matrix descriptor differs across the lanes of a warpgroup")
    if mn_major and _ELEM_BYTES[dtype] != 2:
        raise EmulatorError(message=f"{where}: an MN-major {dtype} operand (PTX allows transposes for 16-bit only)")
    addr = _operand_bytes(int(d[0]), rows, _ELEM_BYTES[dtype], mn_major)
    return _gather(st, addr, waves, dtype, op_id, where)


def _a_from_registers(regs: list[np.ndarray], dtype: str) -> np.ndarray:
    """The 64 x K A of one warpgroup from its lanes' four 32-bit registers (128, 4) of p elements each (2
    f16/bf16, 4 s8, 1 tf32): warp w holds rows 16w..16w+15 as the m16n8k(8p) A fragment, reg h =
    A[16w + g + 8(h%2), pt + 4p(h//2) + e]."""
    eb = _ELEM_BYTES[dtype]
    p = 4 // eb
    bits = np.stack([np.asarray(r).astype(np.int64) & 0xFFFFFFFF for r in regs], axis=1)  # (128, 4)
    raw = np.stack([(bits >> (8 * i)) & 0xFF for i in range(4)], axis=2).astype(np.uint8)  # (128, 4, 4)
    vals = _decode_elements(raw.reshape(GROUP, 4, p, eb), dtype)  # (128, 4, p)
    lane, h, e = np.arange(GROUP)[:, None, None], np.arange(4)[None, :, None], np.arange(p)[None, None, :]
    w, g, t = lane // 32, lane % 32 // 4, lane % 4
    a = np.zeros((64, 8 * p), vals.dtype)
    rows, cols = (np.broadcast_to(x, vals.shape) for x in (16 * w + g + 8 * (h % 2), p * t + 4 * p * (h // 2) + e))
    a[rows, cols] = vals
    return a


def _issue(st: State, where: str, acc_in, operands, n: int) -> InFlight:
    """Queue one wgmma: ``operands(st, grp) -> (A, B)`` is evaluated, with ``acc_in``, at its retirement."""
    if st.lanes % GROUP:
        raise EmulatorError(message=f"{where}: {st.lanes} threads are not whole warpgroups")
    if not st.wgmma_fenced:
        raise EmulatorError(message=f"{where}: wgmma.mma_async without a wgmma.fence since the last wait")
    rows, cols = _acc_positions(n)
    result = InFlight()
    issued = st.active().reshape(-1, GROUP).any(axis=1)  # warpgroups outside the branch issue nothing

    def retire(st: State) -> None:
        c_in = acc_in()
        out = np.array(c_in, copy=True)
        for grp in np.nonzero(issued)[0]:
            lanes = slice(grp * GROUP, (grp + 1) * GROUP)
            a, b = operands(st, grp)
            if out.dtype == np.int32:  # s32: exact, wrapping (no .satfinite)
                cmat = np.zeros((64, n), np.int64)
                cmat[rows, cols] = c_in[lanes]
                d = (a.astype(np.int64) @ b.astype(np.int64).T + cmat).astype(np.int32)
            else:
                cmat = np.zeros((64, n), np.float32)
                cmat[rows, cols] = c_in[lanes]
                d = (a.astype(np.float64) @ b.astype(np.float64).T + cmat).astype(np.float32)
            out[lanes] = d[rows, cols]
        result.value = out

    st.__dict__.setdefault("wgmma_open", []).append(retire)
    return result


@register("nvvm.wgmma.mma_async")
def _wgmma(c: Compiler, op: ir.Operation) -> Instr:
    ins, (o,) = c.ins(op), c.outs(op)
    acc = next(s for s, v in zip(ins, op.operands) if str(v.type).startswith("!llvm.struct"))
    desc_a, desc_b = (s for s, v in zip(ins, op.operands) if str(v.type) == "i64")
    n, dtype, a_mn, b_mn = _wgmma_attrs(op)
    where, op_id = c.loc(op), c.op_id(op)
    kind = _struct_type(op.results[0].type)[1]

    def run(st: State) -> None:
        da, db = (full_lanes(np.asarray(st.env[d], np.int64).reshape(-1), st.lanes) for d in (desc_a, desc_b))
        # an accumulator chained from an in-flight wgmma is read when that one retires (groups retire in order)
        acc_in = st.env[acc]
        if not isinstance(acc_in, InFlight):
            acc_in = np.array(full_lanes(np.asarray(acc_in, kind), st.lanes))

        def operands(st: State, grp: int):
            return (
                _group_operand(st, da, grp, 64, a_mn, dtype, op_id, where),
                _group_operand(st, db, grp, n, b_mn, dtype, op_id, where),
            )

        st.env[o] = _issue(st, where, lambda: _settled(acc_in, where), operands, n)

    return run


_WGMMA_ASM = re.compile(
    r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k(?:16\.f32\.(b?f16)\.b?f16|32\.s32\.(s8)\.s8|8\.f32\.(tf32)\.tf32)\s+"
    r"\{[^}]*\},\s*"
    r"\{[^}]*\},\s*\$\d+,\s*p(?:,\s*1,\s*1)?(?:,\s*([01]))?;"
)


def _fence_operands(c: Compiler, op: ir.Operation) -> Instr:
    ins, (o,) = c.ins(op), c.outs(op)
    where = c.loc(op)
    kind = _struct_type(op.results[0].type)[1]

    def run(st: State) -> None:
        cols: list[np.ndarray] = [np.asarray(_settled(st.env[x], where), kind).reshape(-1) for x in ins]
        st.env[o] = np.stack([full_lanes(x, st.lanes) for x in cols], axis=1)

    return run


@register("llvm.inline_asm")
def _inline_asm(c: Compiler, op: ir.Operation) -> Instr:
    """The ``red``/``atom`` of ``ops_atomic.red_asm``, the operand fence, and the register-A ``wgmma.mma_async``
    that ``codegen.hopper.wgmma`` emits: operands are the N/2
    accumulator registers (none with scale-d = 0: D = A B), the four A registers and the B descriptor."""
    text = ir.StringAttr(op.attributes["asm_string"]).value
    if text == FENCE_OPERANDS:  # an accumulator's registers fenced for the compiler: the identity
        return _fence_operands(c, op)
    atomic = red_asm(c, op, text)  # red/atom of codegen/dynamic_access.py
    if atomic is not None:
        return atomic
    m, scale = _WGMMA_ASM.search(text), re.search(r"setp\.ne\.b32 p, ([01]), 0;", text)
    if m is None or scale is None or (m.group(2) and f"{m.group(2)}.{m.group(2)} " not in text):
        raise EmulatorError(message=f"{c.loc(op)}: unsupported inline PTX {text!r}")
    n, dtype, b_mn = int(m.group(1)), m.group(2) or m.group(3) or m.group(4), m.group(5) == "1"
    if (m.group(5) is None) != (dtype != "f16" and dtype != "bf16") or (dtype == "s8") != (", 1, 1" not in text):
        raise EmulatorError(message=f"{c.loc(op)}: wgmma immediates do not match the {dtype} form: {text!r}")
    kind = _struct_type(op.results[0].type)[1]
    ins, (o,) = c.ins(op), c.outs(op)
    count = n // 2 if scale.group(1) == "1" else 0  # scale-d = 0: D = A B, no accumulator operands
    acc, a_regs, desc_b = ins[:count], ins[count : count + 4], ins[count + 4]
    where, op_id = c.loc(op), c.op_id(op)

    def run(st: State) -> None:
        parts = [st.env[x] for x in acc]
        regs = [full_lanes(np.asarray(st.env[x]).reshape(-1), st.lanes) for x in a_regs]
        db = full_lanes(np.asarray(st.env[desc_b], np.int64).reshape(-1), st.lanes)

        def acc_in() -> np.ndarray:
            if not parts:
                return np.zeros((st.lanes, n // 2), kind)
            cols = [p.settled() if isinstance(p, InFlightPart) else np.asarray(p, kind).reshape(-1) for p in parts]
            return np.stack([full_lanes(x, st.lanes) for x in cols], axis=1).astype(kind)

        def operands(st: State, grp: int):
            lanes = slice(grp * GROUP, (grp + 1) * GROUP)
            return (
                _a_from_registers([r[lanes] for r in regs], dtype),
                _group_operand(st, db, grp, n, b_mn, dtype, op_id, where),
            )

        st.env[o] = _issue(st, where, acc_in, operands, n)

    return run


@register("nvvm.wgmma.fence.aligned", "nvvm.wgmma.commit.group.sync.aligned", "nvvm.wgmma.wait.group.sync.aligned")
def _wgmma_sync(c: Compiler, op: ir.Operation) -> Instr:
    """fence: wgmmas may issue; commit: those issued since the last commit form a group; wait: retire all
    groups but the newest ``group``."""
    kind = op.name.split(".")[2]
    keep = int(op.attributes["group"].value) if kind == "wait" else 0

    def run(st: State) -> None:
        groups = st.__dict__.setdefault("wgmma_groups", [])
        if kind == "fence":
            st.wgmma_fenced = True
        elif kind == "commit":
            groups.append(st.__dict__.pop("wgmma_open", []))
        else:
            while len(groups) > keep:
                for retire in groups.pop(0):
                    retire(st)
            st.wgmma_fenced = False

    return run


@register("nvvm.fence.proxy")
def _fence_proxy(c: Compiler, op: ir.Operation) -> Instr:
    kind = str(op.attributes["kind"])
    if "async.shared" not in kind and enum_name(op.attributes["kind"]) != "async":
        raise EmulatorError(message=f"{c.loc(op)}: only fence.proxy.async(.shared::cta) is emulated, not {kind}")

    def run(st: State) -> None:
        waves = np.unique(st.wave[st.active()])
        for buf in st.shared:
            buf.unfenced_wave[np.isin(buf.unfenced_wave, waves)] = -1

    return run
