"""Walk a kernel's MLIR over every workgroup, thread and loop iteration at once, evaluating index values.

Requires: the op tree of :mod:`wavec.perf.mlir_text`; integer values of the launch's constants (sizes),
``None`` for those not known (float scalars); the workgroup's thread shape; a ``count(op, walker)`` callback
that records one op's demand through :meth:`Walker.add`.

Guarantees: index and integer values (one-element integer vectors included) are numpy arrays over the axes
(workgroup, one per enclosing loop, thread), broadcast so that a value depending only on the thread id
costs one row; a value the ``value_of`` callback does not give (a load of a tensor whose values are not
known, a float, a loop-carried argument) is ``None``.  Every ``scf.for`` is evaluated for all of its
iterations (in windows along a new axis, bounded per workgroup and thread by its own trip count), every
``scf.if`` under the mask of the threads that take it, so masked edges, causal triangles and per-workgroup
trip counts are exact.  A loop bound that cannot be evaluated raises :class:`~wavec.errors.PerfError`; an
``scf.if`` condition that cannot be (it depends on data) counts its then-region for every thread and is noted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import PerfError
from .mlir_text import Op

__all__ = ["Walker", "Value"]

Value = Any  # np.ndarray | int | None
WINDOW_ELEMENTS = 1 << 21  # elements of one loop window's widest value: bounds memory and time per step
SSA_NAME = re.compile(r"%[\w.$#-]+")
_FOR = re.compile(r"^(%[\w.$-]+) = (%[\w.$#-]+) to (%[\w.$#-]+) step (%[\w.$#-]+)(?:\s+iter_args\((.*)\))?")
_CMP = {
    "eq": np.equal,
    "ne": np.not_equal,
    "slt": np.less,
    "sle": np.less_equal,
    "sgt": np.greater,
    "sge": np.greater_equal,
}


def operands(text: str) -> list[str]:
    return SSA_NAME.findall(text.split(" : ")[0])


def _u(x: Value) -> np.ndarray:
    return np.asarray(x).astype(np.uint64)


def _div(a: Value, b: Value, rem: bool) -> Value:
    b = np.asarray(b)
    safe = np.where(b == 0, 1, b)
    return np.asarray(a) % safe if rem else np.asarray(a) // safe


def _trunc_div(a: Value, b: Value, rem: bool) -> Value:
    a, b = np.asarray(a), np.asarray(b)
    b = np.where(b == 0, 1, b)
    q = np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))
    return a - q * b if rem else q


_BINARY: dict[str, Callable[[Value, Value], Value]] = {
    "arith.addi": lambda a, b: np.add(a, b),
    "arith.subi": lambda a, b: np.subtract(a, b),
    "arith.muli": lambda a, b: np.multiply(a, b),
    "arith.divui": lambda a, b: _div(a, b, False),
    "arith.remui": lambda a, b: _div(a, b, True),
    "arith.floordivsi": lambda a, b: _div(a, b, False),
    "arith.divsi": lambda a, b: _trunc_div(a, b, False),
    "arith.remsi": lambda a, b: _trunc_div(a, b, True),
    "arith.ceildivui": lambda a, b: -_div(-np.asarray(a), b, False),
    "arith.ceildivsi": lambda a, b: -_div(-np.asarray(a), b, False),
    "arith.minui": lambda a, b: np.where(_u(a) <= _u(b), a, b),
    "arith.maxui": lambda a, b: np.where(_u(a) >= _u(b), a, b),
    "arith.minsi": lambda a, b: np.minimum(a, b),
    "arith.maxsi": lambda a, b: np.maximum(a, b),
    "arith.andi": lambda a, b: np.bitwise_and(a, b),
    "arith.ori": lambda a, b: np.bitwise_or(a, b),
    "arith.xori": lambda a, b: np.bitwise_xor(a, b),
    "arith.shli": lambda a, b: np.left_shift(a, b),
    "arith.shrui": lambda a, b: np.right_shift(_u(a), _u(b)).astype(np.int64),
    "arith.shrsi": lambda a, b: np.right_shift(a, b),
}
_PASS = frozenset(
    ("arith.index_cast", "arith.index_castui", "arith.extui", "arith.extsi", "arith.trunci", "llvm.inttoptr")
    + ("llvm.ptrtoint", "arith.bitcast")
)
_ONE_LANE = frozenset(("vector.broadcast", "vector.extract", "vector.shape_cast", "vector.splat"))
_IDS = {"gpu.block_id": "block", "gpu.thread_id": "thread", "gpu.grid_dim": "grid", "gpu.block_dim": "dim"}


class Walker:
    """Evaluate one chunk of workgroups (``first`` .. ``first + count - 1`` in launch order)."""

    def __init__(
        self,
        ops: list[Op],
        constants: list[int | None],
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        first: int,
        count: int,
        on_op: Callable[[Op, Walker], None],
        value_of: Callable[[Op, Walker], Value],
    ) -> None:
        self.ops, self.constants, self.grid, self.block = ops, constants, grid, block
        self.on_op, self.value_of = on_op, value_of
        threads = math.prod(block)
        self.domain = [count, threads]
        wg = np.arange(first, first + count, dtype=np.int64)[:, None]
        tid = np.arange(threads, dtype=np.int64)[None, :]
        gx, gy, _ = grid
        bx, by, _ = block
        self.ids = {
            ("block", "x"): wg % gx,
            ("block", "y"): (wg // gx) % gy,
            ("block", "z"): wg // (gx * gy),
            ("thread", "x"): tid % bx,
            ("thread", "y"): (tid // bx) % by,
            ("thread", "z"): tid // (bx * by),
        }
        for i, axis in enumerate("xyz"):
            self.ids[("grid", axis)] = np.int64(grid[i])
            self.ids[("dim", axis)] = np.int64(block[i])
        self.scopes: list[dict[str, Value]] = [{}]
        self.mask: Value = True
        self.counts: dict[str, np.ndarray] = {}
        self.trips: dict[str, np.ndarray] = {}
        self.notes: set[str] = set()

    # ----- values -----
    def get(self, name: str) -> Value:
        for scope in reversed(self.scopes):
            if name in scope:
                return self._expand(scope[name])
        return None  # block arguments of regions we do not model (scf.while) and names defined later

    def _expand(self, value: Value) -> Value:
        """``value`` with a unit axis for each loop entered since it was made (axes go before the thread's)."""
        n = len(self.domain)
        if isinstance(value, np.ndarray) and 0 < value.ndim < n:
            return value.reshape(value.shape[:-1] + (1,) * (n - value.ndim) + value.shape[-1:])
        return value

    def set(self, name: str, value: Value) -> None:
        self.scopes[-1][name] = value

    def value(self, op: Op, index: int = 0) -> Value:
        names = operands(op.text)
        return self.get(names[index]) if index < len(names) else None

    # ----- demand -----
    def add(self, key: str, amount: Value) -> None:
        """Add ``amount`` per executing thread (an array over the axes, or a number) under the mask."""
        if amount is None:
            return
        x = np.asarray(amount, dtype=np.float64) * np.asarray(self.mask, dtype=np.float64)
        self.counts[key] = self.counts.get(key, 0.0) + self._per_workgroup(x)

    def _per_workgroup(self, x: np.ndarray) -> np.ndarray:
        factor = 1.0
        if x.ndim == 0:
            return np.full(self.domain[0], float(x) * math.prod(self.domain[1:]))
        axes = tuple(i for i in range(1, x.ndim) if x.shape[i] > 1)
        factor = math.prod(self.domain[i] for i in range(1, x.ndim) if x.shape[i] == 1)
        out = x.sum(axis=axes) if axes else x
        return np.broadcast_to(out.reshape(out.shape[0], -1)[:, 0] * factor, (self.domain[0],)).copy()

    # ----- walking -----
    def run(self) -> None:
        self.region(self.ops)

    def region(self, ops: list[Op]) -> list[Value]:
        yielded: list[Value] = []
        for op in ops:
            if op.name == "scf.yield":
                yielded = [self.get(n) for n in operands(op.text)]
            elif op.name == "scf.for":
                self.loop(op)
            elif op.name == "scf.if":
                self.branch(op)
            else:
                if op.regions and op.name != "scf.while":
                    raise PerfError(message=f"line {op.line}: {op.name} with regions is not modelled")
                if op.name == "scf.while":
                    raise PerfError(message=f"line {op.line}: scf.while loops (data-dependent) are not modelled yet")
                self.evaluate(op)
                self.on_op(op, self)
        return yielded

    def evaluate(self, op: Op) -> None:
        if not op.results:
            return
        value: Value = None
        name = op.name
        if name in _BINARY:
            a, b = self.value(op, 0), self.value(op, 1)
            value = None if a is None or b is None else _BINARY[name](a, b)
        elif name in _PASS:
            value = self.value(op, 0)
        elif name == "arith.constant":
            m = re.match(r"^(?:dense<)?(-?\d+|true|false)>?(?:\s*:\s*(vector<1xi\d+>|\w+))?$", op.text)
            if m and (m.group(2) or "i1")[0] in "icv":
                value = {"true": 1, "false": 0}.get(m.group(1), None)
                value = np.int64(int(m.group(1)) if value is None else value)
        elif name in _ONE_LANE and "vector<1x" in op.text and re.search(r"vector<(?!1x)", op.text) is None:
            value = self.value(op, 0)  # a one-element vector is its element
        elif name == "arith.cmpi":
            pred = op.text.split(",")[0].strip()
            a, b = self.value(op, 0), self.value(op, 1)
            if a is not None and b is not None:
                value = self._compare(pred, a, b)
        elif name == "arith.select":
            c, a, b = self.value(op, 0), self.value(op, 1), self.value(op, 2)
            if c is not None and a is not None and b is not None:
                value = np.where(np.asarray(c) != 0, a, b)
        elif name == "hal.interface.constant.load":
            m = re.search(r"ordinal\((\d+)\)", op.text)
            k = int(m.group(1)) if m else -1
            got = self.constants[k] if 0 <= k < len(self.constants) else None
            value = None if got is None else np.int64(got)
        elif name in _IDS:
            value = self.ids.get((_IDS[name], op.text.split()[0]))
        elif name == "gpu.lane_id":
            value = self.ids[("thread", "x")] % 32
        else:
            value = self.value_of(op, self)
        for r in op.results:
            self.set(r, value)

    def _compare(self, pred: str, a: Value, b: Value) -> Value:
        if pred.startswith("u"):
            fn = _CMP["s" + pred[1:]]
            return fn(_u(a), _u(b)).astype(np.int64)
        return _CMP[pred](np.asarray(a), np.asarray(b)).astype(np.int64)

    def branch(self, op: Op) -> None:
        cond = self.value(op, 0)
        outer = self.mask
        results: list[list[Value]] = []
        for i, body in enumerate(op.regions):
            if cond is None:
                self.notes.add(f"line {op.line}: an scf.if on data; its then-region counted for every thread")
                if i:
                    results.append([None] * len(op.results))
                    continue
                taken: Value = outer
            else:
                c = np.asarray(cond) != 0
                taken = np.logical_and(outer, c if i == 0 else ~c)
            self.mask = taken
            self.scopes.append({})
            results.append(self.region(body))
            self.scopes.pop()
        self.mask = outer
        for j, r in enumerate(op.results):
            vals = [res[j] if j < len(res) else None for res in results]
            both = len(vals) == 2 and cond is not None and all(v is not None for v in vals)
            self.set(r, np.where(np.asarray(cond) != 0, vals[0], vals[1]) if both else None)

    def loop(self, op: Op) -> None:
        m = _FOR.match(op.text)
        if not m:
            raise PerfError(message=f"line {op.line}: cannot read the scf.for header {op.text[:100]!r}")
        iv, lb, ub, step = m.group(1), self.get(m.group(2)), self.get(m.group(3)), self.get(m.group(4))
        if lb is None or ub is None or step is None:
            raise PerfError(message=f"line {op.line}: the loop's bounds depend on data (not modelled yet)")
        carried = re.findall(r"(%[\w.$-]+) = ", m.group(5) or "")
        lb, ub, step = (np.asarray(x, dtype=np.int64) for x in (lb, ub, step))
        trips = np.maximum(0, -((lb - ub) // np.where(step == 0, 1, step)))
        if len(self.domain) == 2:
            self.trips[f"line {op.line}"] = self._max_per_workgroup(trips)
        longest = int(trips.max()) if trips.size else 0
        outer_mask, outer_domain = self.mask, self.domain
        width = max(1, min(longest, WINDOW_ELEMENTS // max(1, math.prod(outer_domain))))
        for start in range(0, longest, width):
            size = min(width, longest - start)
            self.domain = outer_domain[:-1] + [size] + outer_domain[-1:]
            n = len(self.domain)
            it = np.arange(start, start + size, dtype=np.int64).reshape((1,) * (n - 2) + (size, 1))
            lb_e, step_e, trips_e, mask_e = (self._expand(x) for x in (lb, step, trips, np.asarray(outer_mask)))
            self.mask = np.logical_and(mask_e, it < trips_e)
            self.scopes.append({iv: lb_e + it * step_e, **dict.fromkeys(carried)})
            self.region(op.regions[0])
            self.scopes.pop()
        self.mask, self.domain = outer_mask, outer_domain
        for r in op.results:
            self.set(r, None)

    def _max_per_workgroup(self, x: np.ndarray) -> np.ndarray:
        if x.ndim == 0:
            return np.full(self.domain[0], int(x))
        flat = x.reshape(x.shape[0], -1).max(axis=1)
        return np.broadcast_to(flat, (self.domain[0],)).copy()
