"""``wc.debug_log``: copy a register value to a host tensor at launch (Wave's ``debug_log``).

A log is not an op of its own: it adds a hidden output to the kernel, ``Memory[*batch dims, *value dims]``
(with ``iterations``, a leading dim per logged loop, of that many slots) and writes the value there with an
ordinary ``wc.write``; inside loops the write takes the iteration's slot (``mapping={ITER: $ARG_K}``) under a
``wc.conditional`` that skips iterations past the last slot.  So every pass, the emulator and both GPU
targets treat it as the write it is, and a kernel without logs is unchanged.

Requires: the active tracer (its ``args``, ``loops`` and ``debug_logs``).  Guarantees: each call appends
one ``DebugLog`` to ``tracer.debug_logs`` and one ``KernelArg`` (an output) after the kernel's own
arguments; ``trace_kernel`` moves them to ``Trace.meta["debug_logs"]`` and ``Trace.meta["debug_subs"]``
(each iteration dim's static size), and ``CompiledKernel`` allocates, fills and returns the logs
(``runtime/debug_logs.py``).  The labels, printers and handlers stay out of the artifact and its cache
key: the kernel's MLIR depends only on the logs' shapes and positions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import sympy

from ..errors import DTypeError, ShapeError
from ..indexing.symbols import induction_symbol, shape_symbol
from . import dtypes as dt
from .ops import _need_register, write
from .ops_control import conditional
from .tracing import Value, active_tracer, current_loc
from .types import AddressSpace, TensorType


@dataclass(frozen=True)
class DebugLog:
    """One log: the hidden argument ``arg`` it fills, its ``label`` (the key of ``kernel.debug_logs``), the
    loop dims of its leading iteration dims, and the callbacks the launch calls with it."""

    arg: str
    label: str
    iteration_dims: tuple[sympy.Symbol, ...]
    printer: Callable[..., Any] | None
    handler: Callable[..., Any] | None


def _iterations(op: str, iterations, loops: list) -> dict:
    """``iterations`` as {loop dim: slots}: an int logs the innermost enclosing loop."""
    if iterations is None:
        return {}
    if isinstance(iterations, int) and not isinstance(iterations, bool):
        if not loops:
            raise ShapeError(current_loc(), op=op, message="iterations= needs an enclosing wc.iterate loop")
        iterations = {loops[-1]: iterations}
    if not isinstance(iterations, Mapping):
        raise ShapeError(
            current_loc(), op=op, message=f"iterations must be an int or {{loop dim: int}}, got {iterations!r}"
        )
    for d, n in iterations.items():
        if d not in loops:
            raise ShapeError(
                current_loc(),
                op=op,
                message=f"iterations: {d} is not the dim of an enclosing wc.iterate (enclosing: {loops or 'none'})",
            )
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ShapeError(current_loc(), op=op, message=f"iterations[{d}] must be a positive int, got {n!r}")
    return dict(iterations)


def _fresh_name(taken: set[str], stem: str) -> str:
    name, i = stem, 0
    while name in taken:
        i += 1
        name = f"{stem}_{i}"
    return name


def debug_log(
    value: Value,
    label: str | None = None,
    *,
    mapping: dict | None = None,
    iterations: int | Mapping[sympy.Symbol, int] | None = None,
    printer: Callable[[str, Any], Any] | None = None,
    handler: Callable[[dict], Any] | None = None,
) -> None:
    """Copy ``value`` to a host tensor on each launch, for debugging (Wave's ``debug_log``).

    The log has the kernel's batch dimensions, ``mapping``'s keys, then ``value``'s dims (every workgroup
    writes its part, so it holds the whole distributed value); elements no workgroup wrote are NaN (0 for
    integers).  After a launch it is ``kernel.debug_logs[label]["value"]`` (``label`` defaults to
    ``debug_log_output_<i>``); a dict passed as ``kernel(..., debug_logs=d)`` receives the same entries.

    ``mapping``: as for ``wc.write``, keys among the log's dims.  ``iterations``: inside ``wc.iterate``,
    keep the value of each of the first ``n`` iterations of the innermost loop (an int) or of named
    enclosing loops (``{K: n}``): a leading dim of ``n`` slots per loop, iteration ``i`` in slot ``i``;
    later iterations are not logged.  ``printer(label, tensor)`` is called per log after the launch,
    ``handler(logs)`` once with every log.  A kernel with logs cannot be a torch operator; logging costs a
    write per value, so leave it out of kernels you time."""
    op = "debug_log"
    tr = active_tracer(op)
    val = _need_register(op, "value", value)
    if val.dtype == dt.i1:
        raise DTypeError(current_loc(), op=op, message="value is i1 (a mask); wc.cast it to i32 to log it")
    label = f"debug_log_output_{len(tr.debug_logs)}" if label is None else label
    if not isinstance(label, str) or any(log.label == label for log in tr.debug_logs):
        raise ShapeError(current_loc(), op=op, message=f"label must be a str not used by another log, got {label!r}")
    for name, fn in (("printer", printer), ("handler", handler)):
        if fn is not None and not callable(fn):
            raise ShapeError(current_loc(), op=op, message=f"{name} must be callable, got {fn!r}")
    slots = _iterations(op, iterations, tr.loops)
    arg = _fresh_name({a.name for a in tr.args} | {s.name for s in tr.scalars}, f"debug_log_{len(tr.debug_logs)}")
    iter_syms = {d: shape_symbol(f"{arg.upper()}_{d.name}") for d in slots}
    shape = (*iter_syms.values(), *_log_dims(tr.batch_dims, val, mapping or {}))
    mem = tr.memory_argument(arg, TensorType(shape, val.dtype, AddressSpace.GLOBAL))
    tr.debug_subs.update({s: slots[d] for d, s in iter_syms.items()})
    tr.debug_logs.append(DebugLog(arg, label, tuple(slots), printer, handler))
    where = {**(mapping or {}), **{s: induction_symbol(d) for d, s in iter_syms.items()}}
    _guarded_write(val, mem, where, [(induction_symbol(d), slots[d]) for d in slots])


def _log_dims(batch: tuple, val: Value, mapping: dict) -> list:
    """The log's dims past its iteration slots: the batch dims, the mapping's keys (a mapped coordinate
    the value no longer holds), then the value's dims that no index tensor of the mapping stands for."""
    indexed = {d for e in mapping.values() if isinstance(e, Value) for d in e.type.dims}
    dims = list(batch)
    dims += [d for d in mapping if d not in dims]
    return dims + [d for d in val.type.dims if d not in dims and d not in indexed]


def _guarded_write(val: Value, mem: Value, mapping: dict, guards: list) -> None:
    """``wc.write(val, mem, mapping)`` inside one ``wc.conditional(iteration < slots)`` per guard."""
    if not guards:
        write(val, mem, mapping=mapping or None)
        return
    iv, n = guards[0]

    @conditional(sympy.StrictLessThan(iv, n))
    def _() -> None:
        _guarded_write(val, mem, mapping, guards[1:])


__all__ = ["DebugLog", "debug_log"]
