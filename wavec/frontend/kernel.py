"""``@wc.wave(constraints)``: a kernel definition (traced lazily, once per compile)."""

from __future__ import annotations

import functools
import sys

from ..errors import ConstraintError, KernelDefinitionError
from .constraints import HardwareConstraint, SchedulingConstraint, TilingConstraint, WaveConstraint, WorkgroupConstraint
from .tracing import Trace, trace_kernel

_KINDS = (WorkgroupConstraint, WaveConstraint, TilingConstraint, HardwareConstraint, SchedulingConstraint)


class WaveKernel:
    """A traced-on-demand kernel: the Python body plus its constraint list."""

    def __init__(self, fn, constraints, scope_locals: dict | None = None) -> None:
        for c in constraints:
            if not isinstance(c, _KINDS):
                raise ConstraintError(message=f"{fn.__name__}: {c!r} is not a wavec constraint")
        self.fn = fn
        self.constraints = list(constraints)
        self.name = fn.__name__
        # String annotations may name locals of the defining scope (a kernel factory's ``dtype``).
        self.scope_locals = dict(scope_locals or {})
        functools.update_wrapper(self, fn)

    def trace(self) -> Trace:
        batch = tuple(c.dim for c in self.constraints if isinstance(c, WorkgroupConstraint) and c.is_batch)
        return trace_kernel(self.fn, self.scope_locals, batch)

    def __call__(self, *args, **kwargs):
        raise KernelDefinitionError(
            message=f"{self.name} is a wavec kernel definition: compile it first with "
            f"wc.compile({self.name}, subs={{...}}) and call the result"
        )

    def __repr__(self) -> str:
        return f"<wavec kernel {self.name}>"


def wave(constraints):
    """Decorator: define a wave-level kernel with the given constraint list."""
    caller = sys._getframe(1).f_locals

    def deco(fn) -> WaveKernel:
        return WaveKernel(fn, constraints, caller)

    return deco
