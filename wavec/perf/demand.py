"""What one executed MLIR op demands of the GPU's pipelines and memories, per executing thread.

Requires: a :class:`~wavec.perf.evaluate.Walker` evaluating the op's operands; the kernel's tensor maps (for
TMA box sizes) and threads per wave.

Guarantees: :meth:`Demand.count` adds to the walker, per thread that executes the op:

* ``tensor:<kind>:<dtype>``: FLOPs (2·m·n·k per instruction) of mma.sync (per warp), wgmma (per warpgroup of
  128 threads; inline-PTX or ``nvvm.wgmma.mma_async``) and MFMA (per wave);
* ``fma:<dtype>``: floating-point element results (add, mul, fma, min/max, compare, reductions; a division
  is one ``xu:rcp`` and one multiply), ``xu:<fn>``: transcendental results (exp2, rcp, rsqrt, tanh, ...),
  ``alu:int`` / ``alu:cvt`` / ``alu:shuffle``: integer, conversion and shuffle results;
* ``global_read`` / ``global_write``: bytes requested from global memory (vector and scalar loads and
  stores, ``cp.async`` sources with their run-time byte counts: a masked tail reads 0, TMA boxes),
  ``shared_in`` / ``shared_out``: bytes written to / read from shared memory (``cp.async`` and TMA
  destinations, stores, ldmatrix, loads, wgmma operands read from shared memory).

For a data-dependent launch (integer tensors given as values) :attr:`Demand.touched` records, per binding,
the leading-dimension indices (slices) that executing threads read from global memory through loads and
``cp.async`` sources (a masked tail reading 0 bytes touches nothing); a binding also read where the index
cannot be evaluated is listed in :attr:`Demand.untracked`.  The decomposer's footprint counts a read tensor
as only its touched slices: the DRAM bytes stay a lower bound when routing leaves experts' weights unread.

Ops that move data between registers only (extract, shuffle of vectors, casts of shape) demand nothing; any
other op name not listed is recorded in ``Demand.unknown`` so that a new op cannot go silently uncounted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..errors import PerfError
from ..runtime.tensor_map import TensorMapSpec
from .evaluate import SSA_NAME, Value, Walker, operands
from .mlir_text import DTYPE_BYTES, Op, elem_type, memref_types, vector_elems

__all__ = ["Demand"]

_FREE = {
    "vector.shape_cast",
    "vector.extract",
    "vector.extract_strided_slice",
    "vector.insert",
    "vector.insert_strided_slice",
    "vector.broadcast",
    "vector.from_elements",
    "vector.shuffle",
    "vector.bitcast",
    "vector.splat",
    "llvm.extractvalue",
    "llvm.insertvalue",
    "llvm.mlir.undef",
    "llvm.mlir.poison",
    "llvm.inttoptr",
    "llvm.ptrtoint",
    "arith.constant",
    "arith.bitcast",
    "hal.interface.constant.load",
    "hal.interface.binding.subspan",
    "memref.alloc",
    "memref.extract_aligned_pointer_as_index",
    "memref.subview",
    "memref.reinterpret_cast",
    "memref.assume_alignment",
    "gpu.block_id",
    "gpu.thread_id",
    "gpu.lane_id",
    "gpu.grid_dim",
    "gpu.block_dim",
    "gpu.barrier",
    "nvgpu.device_async_create_group",
    "nvgpu.device_async_wait",
    "func.return",
    "return",
    "amdgpu.lds_barrier",
}
_FREE_PREFIX = tuple(
    ("nvvm.mbarrier", "nvvm.fence", "nvvm.wgmma.fence", "nvvm.wgmma.commit", "nvvm.wgmma.wait")
    + ("nvvm.setmaxregister", "nvvm.barrier", "rocdl.s.")
)
_FMA = {"addf", "subf", "mulf", "maximumf", "minimumf", "maxnumf", "minnumf", "negf", "cmpf", "fma", "absf"}
_FMA |= {"copysign", "remf"}
_CVT = {"truncf", "extf", "fptosi", "fptoui", "sitofp", "uitofp"}
_XU_MATH = {"exp2": "exp2", "exp": "exp", "log": "log", "log2": "log2", "rsqrt": "rsqrt", "sqrt": "sqrt"}
_XU_MATH |= {"tanh": "tanh", "sin": "sin", "cos": "cos", "erf": "erf", "powf": "pow"}
_XU_INTRINSIC = tuple(
    (("ex2", "exp2"), ("exp2", "exp2"), ("rcp", "rcp"), ("rsq", "rsqrt"), ("lg2", "log2"))
    + (("log", "log2"), ("tanh", "tanh"), ("sin", "sin"), ("cos", "cos"), ("sqrt", "sqrt"))
)
_PTX_DTYPES = {"f16": "f16", "bf16": "bf16", "tf32": "tf32", "e4m3": "f8", "e5m2": "f8", "s8": "i8", "u8": "i8"}
_WGMMA_ASM = re.compile(r"wgmma\.mma_async(?:\.sp)?\.sync\.aligned\.m(\d+)n(\d+)k(\d+)\.(\w+)\.(\w+)\.(\w+)")
_WGMMA_OP = re.compile(r"<m = (\d+), n = (\d+), k = (\d+)>.*A\[<(\w+)>.*B\[<(\w+)>")
_MFMA = re.compile(r"(\d+)x(\d+)x(\d+)")
_TENSOR_MAP_BYTES = 128


def _dtype(name: str) -> str:
    name = name.lower()
    if name.startswith("f8") or name.startswith("e4m3") or name.startswith("e5m2"):
        return "f8"
    return _PTX_DTYPES.get(name, name)


def _elements(op: Op) -> tuple[int, str]:
    """(elements, element type) of the op's result type (or its operand's, for compares)."""
    types = op.text.split(" : ", 1)[1] if " : " in op.text else ""
    vec = vector_elems(types)
    if vec:
        return vec
    scalar = re.search(r"\b(f64|f32|f16|bf16|i64|i32|i16|i8|i1|index)\b", types)
    return 1, scalar.group(1) if scalar else "f32"


def _is_shared(memref: str) -> bool:
    return "workgroup" in memref or "address_space<3>" in memref


def _comment_asm(op: Op) -> bool:
    """Inline assembly that is only a comment (wavec's register fences for LLVM): it emits nothing."""
    m = re.match(r'^(?:has_side_effects\s+)?"([^"]*)"', op.text)
    return op.name == "llvm.inline_asm" and m is not None and m.group(1).strip().startswith("//")


@dataclass(frozen=True)
class Buffer:
    """A kernel binding as a value (its memref)."""

    binding: int


class Demand:
    """The per-op counting rules of one kernel."""

    def __init__(
        self,
        tensor_maps: tuple[TensorMapSpec, ...],
        tensor_map_binding: int | None,
        wave: int,
        data: dict[int, np.ndarray] | None = None,
    ) -> None:
        self.maps, self.map_binding, self.wave = tensor_maps, tensor_map_binding, wave
        self.data = data or {}  # binding -> the integer values of that tensor (routing, lengths, tables)
        self.unknown: set[str] = set()
        self.touched: dict[int, set[int]] = {}  # binding -> leading indices read (data-dependent launches only)
        self.untracked: set[int] = set()
        self.splats: set[str] = set()  # results that repeat one lane (a one-lane vector shuffled or broadcast)

    def value_of(self, op: Op, w: Walker) -> Value:
        """Values the walker cannot compute itself: a binding is a :class:`Buffer`; the tensor-map binding's
        base pointer is 0 (a map pointer evaluates to its byte offset ``128 * index``); a one-element
        integer load from a tensor whose values were given is gathered from them."""
        if op.name == "hal.interface.binding.subspan":
            m = re.search(r"binding\((\d+)\)", op.text)
            return Buffer(int(m.group(1))) if m else None
        names = operands(op.text)
        first = w.get(names[0]) if names else None
        if self.data and self._splat(op, names):
            return first
        if op.name == "memref.extract_aligned_pointer_as_index":
            return np.int64(0) if isinstance(first, Buffer) and first.binding == self.map_binding else None
        if op.name in ("memref.load", "vector.load") and isinstance(first, Buffer) and first.binding in self.data:
            vec = vector_elems(op.text.split(" : ", 1)[1]) if " : " in op.text else None
            if vec is not None and vec[0] != 1:
                return None
            index = [w.get(n) for n in SSA_NAME.findall(op.text[op.text.find("[") : op.text.find("]")])]
            if any(i is None for i in index):
                return None
            array = self.data[first.binding]
            flat: Value = np.int64(0)
            for i, size in zip(index, array.shape, strict=False):
                flat = flat * size + np.asarray(i)
            return np.take(array.reshape(-1), np.clip(flat, 0, array.size - 1)).astype(np.int64)
        return None

    def _splat(self, op: Op, names: list[str]) -> bool:
        """Whether ``op`` makes or reads a splat: a one-lane vector shuffled to all lanes from lane 0 (how
        the lowering broadcasts an index loaded from routing data) is its element, and so is any lane of it."""
        if op.name == "vector.shuffle" and re.search(r"\[(0, )*0\] : vector<1x", op.text):
            self.splats.update(op.results)
            return True
        return op.name == "vector.extract" and bool(names) and names[0] in self.splats

    def count(self, op: Op, w: Walker) -> None:
        name = op.name
        if name in _FREE or name.startswith(_FREE_PREFIX) or _comment_asm(op):
            return
        dialect, _, short = name.partition(".")
        if dialect == "arith":
            self._arith(op, short, w)
        elif dialect == "math":
            n, dt = _elements(op)
            w.add(f"xu:{_XU_MATH[short]}" if short in _XU_MATH else f"fma:{dt}", n)
        elif name in ("vector.fma",):
            n, dt = _elements(op)
            w.add(f"fma:{dt}", n)
        elif name == "vector.reduction":
            n, dt = _elements(op)
            w.add(f"fma:{dt}" if dt.startswith(("f", "b")) else "alu:int", max(1, n - 1))
        elif name in ("gpu.shuffle", "nvvm.shfl.sync"):
            w.add("alu:shuffle", 1)
        elif name == "llvm.call_intrinsic":
            self._intrinsic(op, w)
        elif name.startswith("nvvm.convert"):
            w.add("alu:cvt", _elements(op)[0])
        elif not self._matrix(op, w) and not self._memory(op, w):
            self.unknown.add(name)

    def _arith(self, op: Op, short: str, w: Walker) -> None:
        n, dt = _elements(op)
        if short in _FMA:
            w.add(f"fma:{dt}", n)
        elif short == "divf":
            w.add("xu:rcp", n)
            w.add(f"fma:{dt}", n)
        elif short in _CVT:
            w.add("alu:cvt", n)
        else:
            w.add("alu:int", n)

    def _intrinsic(self, op: Op, w: Walker) -> None:
        m = re.match(r'^"([^"]+)"', op.text)
        parts = [p for p in (m.group(1) if m else "").lower().split(".")[1:] if p not in ("nvvm", "amdgcn")]
        n, dt = _elements(op)
        for token, kind in _XU_INTRINSIC:
            if parts and parts[0].startswith(token):
                w.add(f"xu:{kind}", n)
                return
        w.add(f"fma:{dt}", n)

    def _matrix(self, op: Op, w: Walker) -> bool:
        if op.name == "nvgpu.mma.sync":
            m, n, k = (int(x) for x in re.findall(r"mmaShape = \[(\d+), (\d+), (\d+)\]", op.text)[0])
            dt = _dtype(vector_elems(op.text.split(" : ", 1)[1])[1])  # type: ignore[index]
            w.add(f"tensor:mma.sync:{dt}", 2.0 * m * n * k / 32)
        elif op.name == "llvm.inline_asm" and "wgmma.mma_async" in op.text:
            g = _WGMMA_ASM.search(op.text)
            if not g:
                raise PerfError(message=f"line {op.line}: cannot read the wgmma shape of {op.text[:160]!r}")
            m, n, k = int(g.group(1)), int(g.group(2)), int(g.group(3))
            a_regs = re.search(r"\}, \{", op.text) is not None
            self._wgmma(w, m, n, k, _dtype(g.group(5)), _dtype(g.group(6)), a_regs)
        elif op.name == "nvvm.wgmma.mma_async":
            g = _WGMMA_OP.search(op.text)
            if not g:
                raise PerfError(message=f"line {op.line}: cannot read the wgmma shape of {op.text[:160]!r}")
            self._wgmma(w, int(g.group(1)), int(g.group(2)), int(g.group(3)), _dtype(g.group(4)), _dtype(g.group(5)))
        elif op.name in ("amdgpu.mfma", "rocdl.mfma"):
            shape = _MFMA.search(op.text)
            attrs = dict(re.findall(r"\b([mnk]|blocks) = (\d+)", op.text))
            if shape:
                m, n, k = (int(x) for x in shape.groups())
            else:
                m, n, k = (int(attrs[x]) for x in "mnk")
            flops = 2.0 * m * n * k * int(attrs.get("blocks", 1))
            dt = _dtype(vector_elems(op.text.split(" : ", 1)[1])[1])  # type: ignore[index]
            w.add(f"tensor:mfma:{dt}", flops / self.wave)
        else:
            return False
        return True

    def _wgmma(self, w: Walker, m: int, n: int, k: int, a: str, b: str, a_regs: bool = False) -> None:
        w.add(f"tensor:wgmma:{a}", 2.0 * m * n * k / 128)
        shared = n * k * DTYPE_BYTES.get(b, 1) + (0 if a_regs else m * k * DTYPE_BYTES.get(a, 1))
        w.add("shared_out", shared / 128)

    def _memory(self, op: Op, w: Walker) -> bool:
        name = op.name
        types = op.text.split(" : ", 1)[1] if " : " in op.text else ""
        refs = memref_types(types)
        if name in ("vector.load", "vector.store", "vector.maskedload", "vector.maskedstore", "vector.transfer_read"):
            vec = vector_elems(types)
            if vec is None or not refs:
                return False
            size = vec[0] * DTYPE_BYTES.get(vec[1], 4)
            store = name.endswith("store")
            self._move(w, refs[0], size, store)
            if not store and not _is_shared(refs[0]):
                self._touch(op.text, w, vec[0], True)
        elif name in ("memref.load", "memref.store"):
            if not refs:
                return False
            self._move(w, refs[0], DTYPE_BYTES.get(elem_type(refs[0]) or "f32", 4), name.endswith("store"))
            if name == "memref.load" and not _is_shared(refs[0]):
                self._touch(op.text, w, 1, True)
        elif name == "nvgpu.device_async_copy":
            self._async_copy(op, w, refs)
        elif name == "nvgpu.ldmatrix":
            vec = vector_elems(types.split("->")[-1])
            if vec is None:
                return False
            w.add("shared_out", vec[0] * DTYPE_BYTES.get(vec[1], 2))
        elif name.startswith("nvvm.cp.async.bulk.tensor.shared"):
            size = self._box_bytes(op, w, 1)
            w.add("global_read", size)
            w.add("shared_in", size)
        elif name.startswith("nvvm.cp.async.bulk.tensor.global"):
            size = self._box_bytes(op, w, 0)
            w.add("global_write", size)
            w.add("shared_out", size)
        elif name in ("memref.atomic_rmw", "memref.generic_atomic_rmw"):
            size = DTYPE_BYTES.get(elem_type(refs[0]) or "f32", 4) if refs else 4
            w.add("global_read", size)
            w.add("global_write", size)
        else:
            return False
        return True

    def _move(self, w: Walker, memref: str, size: int, store: bool) -> None:
        if "private" in memref:
            return
        if _is_shared(memref):
            w.add("shared_in" if store else "shared_out", size)
        else:
            w.add("global_write" if store else "global_read", size)

    def _async_copy(self, op: Op, w: Walker, refs: list[str]) -> None:
        head = re.sub(r"\[[^\]]*\]", "", op.text.split(" : ")[0])
        parts = [p.strip().split()[0] for p in head.split(",") if p.strip()]
        elem = DTYPE_BYTES.get((elem_type(refs[0]) if refs else None) or "f16", 2)
        dst_elems = int(parts[2])
        src: Value = dst_elems
        if len(parts) > 3:
            src = w.get(parts[3])
            if src is None:
                w.notes.add(f"line {op.line}: a cp.async byte count depends on data; counted in full")
                src = dst_elems
        w.add("global_read", np.asarray(src) * elem)
        w.add("shared_in", dst_elems * elem)
        self._touch(op.text, w, dst_elems, np.asarray(src) > 0)

    def _touch(self, text: str, w: Walker, elems: int, reads: Value) -> None:
        """Record the leading indices of the global tensor that ``text``'s first ``%buf[...]`` reads, for the
        threads that execute it and read something (``reads``); a rank-1 tensor's slices are its elements."""
        if not self.data:
            return  # only data-dependent launches need it; the others touch their whole tensors
        m = re.match(r"^\s*(%[\w.$#-]+)\[([^\]]*)\]", text)
        buffer = w.get(m.group(1)) if m else None
        if not isinstance(buffer, Buffer) or m is None:
            return
        index = [w.get(n) for n in SSA_NAME.findall(m.group(2))]
        if not index or index[0] is None:
            self.untracked.add(buffer.binding)
            return
        lead, live = np.broadcast_arrays(np.asarray(index[0]), np.logical_and(w.mask, reads))
        first = np.unique(lead[live])
        if len(index) == 1 and elems > 1:
            first = np.unique(first[:, None] + np.arange(elems)[None, :])
        self.touched.setdefault(buffer.binding, set()).update(first.tolist())

    def _box_bytes(self, op: Op, w: Walker, map_operand: int) -> Value:
        names = operands(op.text)
        pointer = w.get(names[map_operand]) if len(names) > map_operand else None
        sizes = {m.box_bytes for m in self.maps}
        if pointer is not None:
            index = np.asarray(pointer) // _TENSOR_MAP_BYTES
            table = np.array([m.box_bytes for m in self.maps] or [0], dtype=np.float64)
            return table[np.clip(index, 0, len(table) - 1)]
        if len(sizes) == 1:
            return float(next(iter(sizes)))
        raise PerfError(message=f"line {op.line}: cannot tell which tensor map a TMA copy uses")
