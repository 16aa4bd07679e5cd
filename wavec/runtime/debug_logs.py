"""The host side of ``wc.debug_log`` (``frontend/ops_debug.py``): a launch of a kernel with logs.

Requires: a ``CompiledKernel`` whose ``debug`` lists its logs (``wc.compile`` sets it), each naming a
hidden output among the artifact's bindings, after the kernel's own tensors.  Guarantees: ``call_with_logs``
takes the call as the kernel's ``def`` has it (either convention, keywords too), allocates every log on
the first tensor's device filled with NaN (0 for integers), so what no workgroup wrote stands out,
launches with every binding, then publishes the logs to ``kernel.debug_logs`` (and the caller's
``debug_logs`` dict), calls each log's printer and each distinct handler, and returns what the call
without logs returns.  A log dimension no tensor argument binds (and no ``subs`` entry) is an
``ArgumentError`` naming the log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ArgumentError
from .binding import _TORCH_DTYPE_NAMES

if TYPE_CHECKING:
    from .kernel import CompiledKernel


def _sizes(kernel: CompiledKernel, tensors: dict[str, Any]) -> dict[str, int]:
    """Every symbol the given tensors bind (their ``ArgSpec`` shapes), with the compile-time ones."""
    sizes = dict(kernel.metadata.static_symbols)
    for spec in kernel.metadata.args:
        t = tensors.get(spec.name)
        if t is None or getattr(t, "dim", lambda: -1)() != len(spec.shape):
            continue  # (a missing or wrong-rank tensor: the launch's validation names it)
        for entry, size in zip(spec.shape, t.shape):
            if isinstance(entry, str):
                sizes.setdefault(entry, int(size))
    return sizes


def _device(kernel: CompiledKernel, tensors: dict[str, Any]) -> Any:
    import torch

    return next((t.device for t in tensors.values() if isinstance(t, torch.Tensor)), kernel._default_device)


def _shape(kernel: CompiledKernel, spec: Any, sizes: dict[str, int], arg: str, what: str) -> list[int]:
    """``spec``'s shape from ``sizes``, or the ``ArgumentError`` (naming ``arg``) that ``what`` cannot be
    allocated."""
    missing = [e for e in spec.shape if isinstance(e, str) and e not in sizes]
    if missing:
        raise ArgumentError(
            kernel=kernel.metadata.label,
            arg=arg,
            message=f"cannot allocate {what}: its dimension {missing[0]} is bound by no tensor argument and no "
            "subs entry",
        )
    return [e if isinstance(e, int) else sizes[e] for e in spec.shape]


def _torch_dtype(spec: Any) -> Any:
    import torch

    return getattr(torch, _TORCH_DTYPE_NAMES[spec.dtype])


def _allocate(kernel: CompiledKernel, tensors: dict[str, Any]) -> dict[str, Any]:
    """Each log, NaN-filled (0 for integers), its sizes bound by ``tensors``."""
    import torch

    sizes, device, logs = _sizes(kernel, tensors), _device(kernel, tensors), {}
    specs = {a.name: a for a in kernel.metadata.args}
    for log in kernel.debug:
        spec = specs[log.arg]
        dtype = _torch_dtype(spec)
        fill = float("nan") if dtype.is_floating_point else 0
        shape = _shape(kernel, spec, sizes, log.label, "this debug log")
        logs[log.arg] = torch.full(shape, fill, dtype=dtype, device=device)
    return logs


def call_with_logs(kernel: CompiledKernel, args: tuple, named: dict[str, Any]) -> Any:
    """``kernel(*args, **named)`` for a kernel with logs (module docstring)."""
    sink = named.pop("debug_logs", None) if "debug_logs" not in kernel._signature else None
    if sink is not None and not isinstance(sink, dict):
        raise ArgumentError(kernel=kernel.metadata.label, arg="debug_logs", message="expected a dict to fill")
    bound = kernel._arrange(args, named)
    hidden = {log.arg for log in kernel.debug}
    names = [a.name for a in kernel.metadata.args if a.name not in hidden]
    outputs = [a for a in kernel.metadata.args if a.is_output and a.name not in hidden]
    whole = len(bound) == len(names) + len(kernel.metadata.scalars)
    given = names if whole else [n for n in names if n not in {o.name for o in outputs}]
    tensors = dict(zip(given, bound))
    scalars = bound[len(given) :]
    made: list[Any] = []
    if not whole:
        made = _user_outputs(kernel, tensors)
        tensors.update(zip((o.name for o in outputs), made))
    logs = _allocate(kernel, tensors)
    tensors.update(logs)
    kernel.call_bound(*(tensors[a.name] for a in kernel.metadata.args), *scalars)
    entries = {
        log.label: {"value": logs[log.arg], "iteration_dimensions": list(log.iteration_dims)} for log in kernel.debug
    }
    kernel.debug_logs = entries
    if sink is not None:
        sink.update(entries)
    for log in kernel.debug:
        if log.printer is not None:
            log.printer(log.label, logs[log.arg])
    for handler in dict.fromkeys(log.handler for log in kernel.debug if log.handler is not None):
        handler(entries)
    if whole:
        return None
    return made[0] if len(made) == 1 else tuple(made)


def _user_outputs(kernel: CompiledKernel, inputs: dict[str, Any]) -> list[Any]:
    """The kernel's own outputs for an inputs-only call, as its ``OutputPlan`` would allocate them."""
    import torch

    sizes, device = _sizes(kernel, inputs), _device(kernel, inputs)
    hidden = {log.arg for log in kernel.debug}
    specs = [a for a in kernel.metadata.args if a.is_output and a.name not in hidden]
    what = f"this output (pass every argument: kernel({', '.join(kernel._signature)}))"
    return [torch.empty(_shape(kernel, s, sizes, s.name, what), dtype=_torch_dtype(s), device=device) for s in specs]
