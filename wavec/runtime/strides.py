"""Binding of a strided variant's tensors: their strides become launch values (docs/sizes_and_strides.md).

Requires: a :class:`~wavec.runtime.binding.BindingPlan` whose metadata has ``ArgSpec.strides`` (a kernel
compiled with ``strided=``); torch tensors.

Guarantees: :meth:`StridedBinding.bind_launch` is the plan's ``bind_launch`` (same contract: symbol and
stride values, base pointers, device, grid).  Per distinct (shapes, strides) it derives once: each stride
constant's value (a dimension of size 1 passes 0: its index is always 0), each tensor's span in bytes
(from its first element to its last) for the overlap check, and the argument caps a mismatch needs.  It
raises :class:`~wavec.errors.ArgumentError` naming the argument for a zero or negative stride of a
dimension of size > 1, a stride beyond int32, or an output whose strides make two of its elements share
memory; and :class:`~wavec.errors.StrideMiss` (caught by ``CompiledKernel``, which launches the variant it
asks for) for an innermost stride other than 1 where the kernel takes it as 1 (cap 0: element-wise
access), or an outer stride or base pointer not a multiple of the binding's ``multiple`` (cap: the largest
power of two dividing all of them).  Every miss of one launch comes in one exception.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from wavec.errors import StrideMiss

if TYPE_CHECKING:
    from wavec.runtime.binding import BindingPlan

__all__ = ["StridedBinding", "dense_miss", "span_elements"]

_INT32_MAX = 2**31 - 1
_MAX_LAYOUTS = 256  # distinct (shapes, strides) remembered per plan


def span_elements(shape: Sequence[int], strides: Sequence[int]) -> int:
    """Elements from a view's first element to its last, inclusive (0 for an empty view)."""
    if not all(shape):
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(shape, strides))


def _pow2_dividing(multiple: int, values: Sequence[int]) -> int:
    """The largest power of two dividing ``multiple`` and every value (``multiple`` a power of two)."""
    g = math.gcd(multiple, *values) if values else multiple
    return g & -g


def _self_overlapping(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether two elements of the view may share memory: false when, dims of size > 1 sorted by stride,
    each stride is at least the extent of the dims inside it (every slice, permutation and transpose)."""
    dims = sorted((s, n) for n, s in zip(shape, strides) if n > 1)
    reach = 0
    for s, n in dims:
        if s <= reach:
            return True
        reach = s * (n - 1) + reach
    return False


def dense_miss(plan: BindingPlan, tensors: Sequence[Any], arg: Any, why: str) -> NoReturn:
    """A dense kernel's answer to a non-contiguous or misaligned tensor: the strided variant, with the
    arguments whose innermost stride is not 1 read element by element."""
    inner = {}
    for t, a in zip(tensors, plan.args):
        shape, stride = t.shape, t.stride()
        if len(shape) and shape[-1] > 1 and stride[-1] != 1:
            inner[a.name] = 0
    raise StrideMiss(
        inner,
        kernel=plan.kernel,
        arg=arg.name,
        message=f"{why}; a kernel from wc.compile launches its strided variant instead",
    ) from None


class StridedBinding:
    """The stride half of a strided variant's :class:`BindingPlan` (module docstring)."""

    def __init__(self, plan: BindingPlan) -> None:
        self.plan = plan
        specs = plan.meta.args
        # per argument: (stride constant per dim or None for an implied 1, innermost taken as 1, multiple)
        self.layout = tuple(
            (tuple(s if isinstance(s, str) else None for s in spec.strides), spec.strides[-1:] == (1,), spec.multiple)
            for spec in specs
        )
        self._by_layout: dict[tuple, tuple[dict[str, int], tuple[int, ...], dict[str, int]]] = {}

    def bind_launch(self, tensors: Sequence[Any]) -> tuple[dict[str, int], list[int], int, tuple | None]:
        plan = self.plan
        device, ptrs, shapes = plan.tensors(tensors)
        strides = [t.stride() for t in tensors[: len(plan.args)]]
        base, _nbytes, grid = plan._derived(shapes)
        values, spans, missed = self._derived(base, shapes, strides)
        caps = dict(missed) if missed else None  # (the cached dict stays as derived)
        for (_names, _inner, multiple), a, ptr, span in zip(self.layout, plan.args, ptrs, spans):
            if multiple > 1 and span and ptr % (multiple * a.itemsize):
                caps = caps or {}
                cap = _pow2_dividing(multiple, [ptr // a.itemsize])
                caps[a.name] = min(caps.get(a.name, multiple), cap)
        if caps:
            self._miss(caps, shapes, strides, ptrs)
        if plan.outputs:
            plan._check_overlap(ptrs, spans)
        if plan.scalars:
            values = dict(values)
            plan._bind_scalars(tensors, values)
        return values, ptrs, -1 if device is None else device, grid

    def _derived(
        self, base: dict[str, int], shapes: list[Any], strides: list[Any]
    ) -> tuple[dict[str, int], tuple[int, ...], dict[str, int]]:
        """(values with the strides, span in bytes per argument, caps missed) of these shapes and strides,
        checked on their first launch (all three shared between launches: do not change them)."""
        key = (tuple(shapes), tuple(strides))
        hit = self._by_layout.get(key)
        if hit is None:
            hit = self._derive(base, shapes, strides)
            if len(self._by_layout) >= _MAX_LAYOUTS:
                self._by_layout.clear()
            self._by_layout[key] = hit
        return hit

    def _derive(self, base: dict[str, int], shapes: list[Any], strides: list[Any]) -> tuple:
        plan = self.plan
        values = dict(base)
        spans, caps = [], {}
        for (names, inner_one, multiple), a, shape, stride in zip(self.layout, plan.args, shapes, strides):
            for d, (n, s) in enumerate(zip(shape, stride)):
                if n > 1 and s <= 0:
                    why = "zero (a broadcast view, e.g. from expand)" if s == 0 else "negative"
                    where = f"stride {s} of dimension {d} (strides {tuple(stride)}, shape {tuple(shape)})"
                    plan._fail(a, f"{where} is {why}; call .contiguous()")
                if n > 1 and s > _INT32_MAX:
                    plan._fail(
                        a, f"stride {s} of dimension {d} does not fit in int32 (strides are 32-bit launch constants)"
                    )
            for d, name in enumerate(names):
                if name is not None:
                    values[name] = stride[d] if shape[d] > 1 else 0
            if a.is_output and _self_overlapping(shape, stride):
                plan._fail(
                    a,
                    f"output strides {tuple(stride)} (shape {tuple(shape)}) make elements share memory; pass an "
                    "output whose elements are distinct",
                )
            if inner_one and len(shape) and shape[-1] > 1 and stride[-1] != 1:
                caps[a.name] = 0
            outer = [s for n, s in zip(shape[:-1], stride[:-1]) if n > 1]
            if multiple > 1 and a.name not in caps and any(s % multiple for s in outer):
                caps[a.name] = _pow2_dividing(multiple, outer)
            spans.append(span_elements(shape, stride) * a.itemsize)
        return values, tuple(spans), caps

    def _miss(self, caps: dict[str, int], shapes: list, strides: list, ptrs: list[int]) -> NoReturn:
        plan = self.plan
        i = next(j for j, arg in enumerate(plan.args) if arg.name in caps)
        a = plan.args[i]
        cap = caps[a.name]
        multiple = self.layout[i][2]
        if cap == 0:
            why = f"innermost stride {strides[i][-1]} (strides {tuple(strides[i])}): this variant reads it contiguously"
        else:
            why = (
                f"strides {tuple(strides[i])} or base pointer 0x{ptrs[i]:x} not a multiple of {multiple} elements "
                f"(its rows are accessed {multiple} elements at a time)"
            )
        raise StrideMiss(
            caps, kernel=plan.kernel, arg=a.name, message=f"{why}; a kernel from wc.compile launches a variant for it"
        ) from None
