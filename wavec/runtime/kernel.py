"""``CompiledKernel``: what ``wc.compile`` returns — an artifact bound to a backend, callable on tensors.

Requires: torch, imported lazily (by the backend's launcher and by :class:`OutputPlan`); importing this
module imports only the standard library and wavec.

Guarantees — the two calling conventions of ``kernel(*tensors)``:

* **All arguments** (inputs and outputs, in binding order): outputs written in place; returns ``None``.
* **Inputs only** (the arguments whose ``ArgSpec.is_output`` is False, in binding order): every output is
  a fresh ``torch.empty`` (dtype from its ``ArgSpec``, shape from the symbols bound by the inputs or at
  compile time, on the first input's device) that the kernel writes in full; returns it (a tuple in
  binding order if several).  An output dimension that neither an input nor ``static_symbols`` binds
  raises :class:`~wavec.errors.ArgumentError` asking for the outputs.  The launcher then validates the
  inputs exactly as in the all-arguments form.
* Any other argument count raises :class:`~wavec.errors.ArgumentError` naming both conventions.
* Either way the launch goes through the prepared launch (``runtime/fast_launch.py``) of the tensors'
  keys (dtype, shape, device, strides): validated in full on the first call with those keys, then only
  pointers (alignment), scalars and the overlap of outputs are looked at (``prepare`` gives callers
  that key their own dispatch the launch itself).

A launch whose sizes break the artifact's ``divisibility`` (rows accessed in 16-byte runs) runs the narrow
variant for them, and one with a non-contiguous or misaligned tensor the strided variant its strides need
(:class:`~wavec.errors.StrideMiss`): ``narrow(run_caps=..., strided=...)`` (set by ``wc.compile``) compiles
each once per set of options, shared by the kernel and its variants (a strided launch with odd sizes goes
dense -> strided -> strided and narrow); the aligned dense launch pays nothing for this.  Every launch of
a variant is counted per kernel and reason (``wavec.runtime.variant_report()``; ``WAVEC_WARN_VARIANTS=1``
warns once per kernel and reason).

Positional arguments follow the kernel's ``def`` (scalars may stand anywhere in it; the launchers take
tensors first, ``_arrange`` reorders); any argument may be passed by keyword (``kern(a=a, b=b, c=c)``),
the convention then being all arguments if every one is named or an output is, else the inputs only.
An unknown, repeated or missing name raises :class:`~wavec.errors.ArgumentError` naming it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from ..errors import AlignmentMiss, ArgumentError, LaunchError, StrideMiss, WavecError
from .artifact import Artifact, KernelMetadata
from .backends import launcher_factory
from .binding import _TORCH_DTYPE_NAMES
from .fast_launch import tensor_key
from .variants import count as count_variant
from .variants import reason as variant_reason

__all__ = ["CompiledKernel", "OutputPlan"]

_MAX_PREPARED = 64  # distinct argument keys remembered per kernel (a sweep must not grow without bound)


class OutputPlan:
    """How to allocate a kernel's outputs from its inputs; built once per :class:`KernelMetadata`.

    ``dims[j]``: output ``j``'s shape, per dimension ``(src, value)``: input ``src``'s dimension ``value``,
    or the size ``value`` when ``src`` is -1.  ``unbound``: ``(output name, dim, symbol)`` no input binds.
    Sizes are never converted to ``int``, so fake tensors with symbolic shapes work (``torch_op``'s fakes).
    """

    def __init__(self, meta: KernelMetadata) -> None:
        import torch

        self.meta = meta
        self.kernel = meta.label
        args = meta.args
        self.input_positions = tuple(i for i, a in enumerate(args) if not a.is_output)
        self.output_positions = tuple(i for i, a in enumerate(args) if a.is_output)
        self.input_names = tuple(args[i].name for i in self.input_positions)
        self.output_dtypes = tuple(getattr(torch, _TORCH_DTYPE_NAMES[args[i].dtype]) for i in self.output_positions)
        self.outputs_last = self.output_positions == tuple(range(len(self.input_positions), len(args)))
        statics = dict(meta.static_symbols)
        binders: dict[str, tuple[int, int]] = {}
        for pos, i in enumerate(self.input_positions):
            for d, entry in enumerate(args[i].shape):
                if isinstance(entry, str) and entry not in statics and entry not in binders:
                    binders[entry] = (pos, d)
        dims: list[tuple[tuple[int, int], ...]] = []
        unbound: list[tuple[str, int, str]] = []
        for i in self.output_positions:
            shape: list[tuple[int, int]] = []
            for d, entry in enumerate(args[i].shape):
                if isinstance(entry, int):
                    shape.append((-1, entry))
                elif entry in statics:
                    shape.append((-1, statics[entry]))
                elif entry in binders:
                    shape.append(binders[entry])
                else:
                    shape.append((-1, 0))
                    unbound.append((args[i].name, d, entry))
            dims.append(tuple(shape))
        self.dims = tuple(dims)
        self.unbound = tuple(unbound)
        self._empty = torch.empty
        self.launch = None if unbound else self._compile_launch()

    def allocate(self, inputs: Sequence[Any], device: Any) -> list[Any]:
        """Fresh ``torch.empty`` outputs on ``device`` for ``inputs`` (not validated here)."""
        if self.unbound:
            self.raise_unbound()
        try:
            shapes = [[v if s < 0 else inputs[s].shape[v] for s, v in dims] for dims in self.dims]
        except (AttributeError, IndexError, TypeError):
            self.diagnose(inputs)
            raise
        return [self._empty(shape, dtype=dt, device=device) for shape, dt in zip(shapes, self.output_dtypes)]

    def merge(self, inputs: Sequence[Any], outputs: Sequence[Any]) -> tuple[Any, ...]:
        """Inputs and outputs interleaved back into binding order."""
        if self.outputs_last:
            return (*inputs, *outputs)
        full: list[Any] = [None] * (len(inputs) + len(outputs))
        for pos, t in zip(self.input_positions + self.output_positions, (*inputs, *outputs)):
            full[pos] = t
        return tuple(full)

    def _compile_launch(self) -> Any:
        """``launch(impl, default_device, *inputs)``: allocate, run ``impl`` on every argument, return; one
        straight-line frame generated from positions and ints only (no metadata names reach the source)."""
        xs = [f"x{i}" for i in range(len(self.input_positions))]
        xs_all = xs + [f"s{j}" for j in range(len(self.meta.scalars))]
        full = [""] * len(self.meta.args)
        lines = [
            f"def _launch(impl, default_device{''.join(', ' + x for x in xs_all)}):",
            f"    dev = {xs[0] + '.device' if xs else 'default_device'}",
        ]
        for j, dims in enumerate(self.dims):
            sizes = [str(v) if s < 0 else f"{xs[s]}.shape[{v}]" for s, v in dims]
            lines.append(f"    o{j} = empty(({''.join(x + ', ' for x in sizes)}), dtype=dt{j}, device=dev)")
            full[self.output_positions[j]] = f"o{j}"
        for i, pos in enumerate(self.input_positions):
            full[pos] = xs[i]
        outs = [f"o{j}" for j in range(len(self.dims))]
        lines.append(f"    impl({', '.join(full + xs_all[len(xs) :])})")
        lines.append(f"    return {outs[0] if len(outs) == 1 else '(' + ''.join(o + ', ' for o in outs) + ')'}")
        namespace: dict[str, Any] = {"empty": self._empty}
        namespace.update((f"dt{j}", dt) for j, dt in enumerate(self.output_dtypes))
        exec(compile("\n".join(lines) + "\n", f"<wavec launch of {self.kernel}>", "exec"), namespace)
        return namespace["_launch"]

    def raise_unbound(self) -> NoReturn:
        """Raise the :class:`ArgumentError` for an output whose size no input determines."""
        name, d, sym = self.unbound[0]
        every = ", ".join(a.name for a in self.meta.args)
        raise ArgumentError(
            kernel=self.kernel,
            arg=name,
            message=f"cannot allocate this output: its dimension {d} is symbol {sym}, which no input "
            f"({', '.join(self.input_names) or 'none'}) binds and which is not bound at compile time; "
            f"pass the outputs yourself: kernel({every})",
        )

    def diagnose(self, inputs: Sequence[Any]) -> None:
        """Raise :class:`ArgumentError` if an input is not a tensor of the right rank; else return."""
        import torch

        for pos, t in zip(self.input_positions, inputs):
            spec = self.meta.args[pos]
            if not isinstance(t, torch.Tensor):
                message = f"expected a torch.Tensor of dtype {spec.dtype}, got {type(t).__name__}"
            elif t.dim() != len(spec.shape):
                message = f"expected rank {len(spec.shape)} (shape {tuple(spec.shape)}), got rank {t.dim()} "
                message += f"(shape {tuple(t.shape)})"
            else:
                continue
            raise ArgumentError(kernel=self.kernel, arg=spec.name, message=message)


def variant_key(run_caps: dict[str, int], strided: dict[str, int] | None) -> tuple:
    """How ``CompiledKernel._variants`` knows a variant: its run caps, then its strided caps if strided."""
    caps = tuple(sorted(run_caps.items()))
    return caps if strided is None else (*caps, ("strided", tuple(sorted(strided.items()))))


class CompiledKernel:
    """Call with all arguments (outputs written in place) or the inputs only (module docstring);
    ``backend``'s launcher (:mod:`wavec.runtime.backends`) is loaded on the first call."""

    def __init__(self, artifact: Artifact, backend: str, stats: Any = None) -> None:
        self.artifact = artifact
        self.backend = backend
        self.stats = stats
        self.metadata = artifact.metadata
        self._impl: Any = None
        nscalars = len(self.metadata.scalars)  # by-value arguments follow the tensors in both conventions
        self._nargs = len(self.metadata.args) + nscalars
        self._ninputs = sum(1 for a in self.metadata.args if not a.is_output) + nscalars
        self._plan: OutputPlan | None = None
        self._default_device = "cuda" if backend in ("cuda", "rocm") else "cpu"
        self.narrow: Callable[..., CompiledKernel] | None = None  # compiles a variant for run_caps=, strided=
        # the variant options this kernel was compiled with (wc.compile sets them)
        self.run_caps: dict[str, int] = {}
        self.strided: dict[str, int] | None = None
        # variants by key (``variant_key``): the caps for a dense one, then ("strided", caps) for a strided one
        self._variants: dict[tuple, CompiledKernel] = {}
        self._binding = tuple(a.name for a in self.metadata.args) + tuple(n for n, _ in self.metadata.scalars)
        self._signature = self.metadata.signature or self._binding
        self._outputs = frozenset(a.name for a in self.metadata.args if a.is_output)
        self._ntensors = len(self.metadata.args)
        self._prepared: dict[tuple, Callable[..., None]] = {}  # tensor keys -> prepared launch (``_run``)
        # a variant's (kernel label, reason) for ``variants.count`` and the kernel it is a variant of
        self._variant_of: tuple[str, str] | None = None
        self._root: CompiledKernel = self
        self.debug: tuple = ()  # the ``wc.debug_log``s (``ops_debug.DebugLog``), hidden outputs last (wc.compile)
        self.debug_logs: dict[str, dict[str, Any]] = {}  # the last launch's logs by label

    @property
    def output_plan(self) -> OutputPlan:
        """The per-kernel :class:`OutputPlan` (built on first use)."""
        if self._plan is None:
            self._plan = OutputPlan(self.metadata)
        return self._plan

    def __call__(self, *args: Any, **named: Any) -> Any:
        if self.debug:
            from .debug_logs import call_with_logs

            return call_with_logs(self, args, named)
        if named or self._signature != self._binding:
            args = self._arrange(args, named)
        return self.call_bound(*args)

    def call_bound(self, *tensors: Any) -> Any:
        """The call with its arguments in binding order (tensors, then scalars): what ``__call__`` runs
        after ``_arrange``, and what the torch operators (whose schemas take that order) call."""
        n = len(tensors)
        try:
            if n == self._nargs:
                self._run(*tensors)
                return None
            if n != self._ninputs:
                self._count_error(n)
            plan = self._plan or self.output_plan
            launch = plan.launch
            if launch is None:
                plan.raise_unbound()
            try:
                return launch(self._run, self._default_device, *tensors)
            except (AttributeError, IndexError, TypeError):
                plan.diagnose(tensors)  # a non-tensor or wrong-rank input: say which
                raise
        except AlignmentMiss as miss:
            if self.narrow is None:
                raise
            return self.variant_for(miss).call_bound(*tensors)

    def _run(self, *args: Any) -> None:
        """Launch with every argument: through the prepared launch of these tensors' keys (dtype, shape,
        device, strides), prepared (validated) on the first call with them; one lookup after that."""
        key = tuple([tensor_key(t) for t in args[: self._ntensors]])
        launch = self._prepared.get(key)
        if launch is None:  # (a non-tensor's key too: preparing raises the error naming it)
            launch = self.prepare(*args)
            if len(self._prepared) >= _MAX_PREPARED:
                self._prepared.clear()
            self._prepared[key] = launch
        launch(*args)

    def _full(self, *args: Any) -> None:
        """The launch validated in full (every argument), with the variant its sizes or strides need."""
        try:
            (self._impl or self._launcher())(*args)
        except AlignmentMiss as miss:
            if self.narrow is None:
                raise
            self.variant_for(miss).call_bound(*args)
            return
        if self._variant_of is not None:
            count_variant(self._variant_of)

    def prepare(self, *args: Any, fresh_outputs: bool = False) -> Callable[..., None]:
        """``launch(*args)`` for later calls whose tensors repeat these ``args``' dtypes, shapes, strides and
        device (all arguments in binding order, outputs included): validated now as a call is, then each
        call passes only pointers and scalars (``runtime/fast_launch.py``); the narrow variant where the
        sizes need it.  ``fresh_outputs``: the caller allocates every output anew, so no overlap check.
        Backends without a fast path (the emulator) validate every call."""
        from .fast_launch import CheckedLaunch

        try:
            impl = self._impl or self._launcher()
            prepare = getattr(impl, "prepare", None)
            if prepare is None:
                plan = getattr(impl, "_plan", None)
                if plan is not None:
                    plan.bind(args)  # validation now, as the fast path's preparation does
                launch = CheckedLaunch(impl, [getattr(a, "shape", None) for a in args])
            else:
                launch = prepare(args, fresh_outputs, self._full)
            if self._variant_of is not None and hasattr(launch, "variant"):
                launch.variant = self._variant_of
            return launch
        except AlignmentMiss as miss:
            if self.narrow is None:
                raise
            return self.variant_for(miss).prepare(*args, fresh_outputs=fresh_outputs)

    def variant_for(self, miss: AlignmentMiss) -> CompiledKernel:
        """The variant of this kernel's options and what ``miss`` asks for, compiled on first use: runs along
        each symbol ``miss.values`` misaligns as long as its value allows (the largest power of two dividing
        it, below the width this kernel needs); for a :class:`StrideMiss`, strides as launch values with its
        arguments' caps.  Where none compiles (TMA asked for explicitly needs 16-byte rows), ``miss`` says
        why."""
        caps, strided = dict(self.run_caps), None if self.strided is None else dict(self.strided)
        if isinstance(miss, StrideMiss):
            strided = strided or {}
            for name, cap in miss.strided.items():
                strided[name] = min(cap, strided.get(name, cap))
        else:
            for sym, div in self.metadata.divisibility:
                if miss.values[sym] % div:
                    g = math.gcd(miss.values[sym], div)
                    caps[sym] = min(g & -g, caps.get(sym, div))
        key = variant_key(caps, strided)
        if key == variant_key(self.run_caps, self.strided):
            raise miss  # (a variant meets what its own checks ask for: not reached)
        kernel = self._variants.get(key)
        if kernel is None:
            assert self.narrow is not None  # callers check
            try:
                kernel = self.narrow(run_caps=caps, strided=strided)
            except WavecError as why:
                fields = {**miss.fields, "message": f"{miss.fields['message']}, which does not compile: {why}"}
                raise ArgumentError(None, **fields) from why
            kernel._variants = self._variants  # one table for the kernel and all its variants
            root = kernel._root = self._root
            kernel._variant_of = (root.metadata.label, variant_reason(root.run_caps, root.strided, caps, strided))
            self._variants[key] = kernel
        return kernel

    def _arrange(self, args: tuple, named: dict[str, Any]) -> tuple:
        """Positional (``def`` order) and keyword arguments as the launchers take them: tensors in binding
        order, then scalars (all arguments), or the inputs in that order (inputs only)."""
        sig, label = self._signature, self.metadata.label
        whole = len(args) + len(named) == len(sig) or any(k in self._outputs for k in named)
        order = sig if whole else tuple(n for n in sig if n not in self._outputs)
        if len(args) > len(order):
            self._count_error(len(args) + len(named))
        given = dict(zip(order, args))
        for k, v in named.items():
            if k not in sig:
                why = f"unexpected keyword argument; the kernel's arguments are ({', '.join(sig)})"
                raise ArgumentError(kernel=label, arg=k, message=why)
            if k in given:
                raise ArgumentError(kernel=label, arg=k, message="given twice (by position and by keyword)")
            given[k] = v
        missing = [k for k in order if k not in given]
        if missing:
            what = f"all arguments ({', '.join(sig)})" if whole else f"the inputs ({', '.join(order)})"
            raise ArgumentError(kernel=label, arg=missing[0], message=f"missing: pass {what}; got {list(given)}")
        return tuple(given[k] for k in self._binding if k in given)

    def _launcher(self) -> Any:
        if self._impl is None:
            factory = launcher_factory(self.backend)
            if factory is None:
                raise LaunchError(
                    kernel=self.metadata.kernel,
                    message=f"backend {self.backend!r} cannot run here (no launcher is registered for it); "
                    "compile with backend='emulator' to run it on the CPU",
                )
            self._impl = factory(self.artifact)
        return self._impl

    def _count_error(self, n: int) -> None:
        meta = self.metadata
        scalars = [name for name, _ in meta.scalars]
        inputs = [a.name for a in meta.args if not a.is_output] + scalars
        every = [a.name for a in meta.args] + scalars
        what = "arguments" if scalars else "tensor arguments"
        arg = inputs[n] if n < len(inputs) else every[n] if n < len(every) else f"#{n}"
        raise ArgumentError(
            kernel=meta.label,
            arg=arg,
            message=f"got {n} {what}; pass either the {len(inputs)} inputs ({', '.join(inputs)}) — the "
            f"outputs are then allocated and returned — or all {len(every)} arguments ({', '.join(every)}) "
            "with the outputs written in place",
        )

    @property
    def mlir(self) -> str:
        return self.artifact.mlir

    def __repr__(self) -> str:
        m = self.metadata
        return (
            f"<wavec kernel {m.kernel} [{self.artifact.target}/{self.artifact.format}, {self.backend}] "
            f"block={m.block} dynamic={list(m.constants)}>"
        )
