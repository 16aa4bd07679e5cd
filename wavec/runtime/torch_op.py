"""Register a :class:`~wavec.runtime.kernel.CompiledKernel` as a PyTorch operator.

Requires: torch >= 2.4 (``torch.library.custom_op``), imported when this module is imported.

Guarantees of :func:`register_torch_op` ``(compiled, "ns::op")``:

* ``torch.ops.ns.op(*inputs)`` (returned) is functional: takes the kernel's inputs (non-output arguments,
  in binding order) and returns fresh outputs (one tensor, or a tuple in binding order).
* ``torch.ops.ns.op_out(*all_args)`` writes the outputs in place (``Tensor(a!)`` in the schema).
* Both have fake implementations: the functional op's outputs take their sizes straight from the inputs'
  shapes (SymInts stay symbolic, so ``torch.compile`` with dynamic shapes and ``fullgraph=True`` traces
  through); they validate nothing (the real call does).
* By the first tensor's device: CUDA runs the compiled kernel when its backend is "cuda"/"rocm" (else a
  CUDA kernel built lazily from the same artifact), other devices an emulator kernel (CPU tensors only).
  Launches go to torch's current stream, so the op can be captured in a CUDA graph.
* Registering a name again with an equal artifact (ignoring ``metadata.source``) returns the existing op;
  with another kernel, or a name torch already knows, it raises :class:`TorchOpError`.  There is no
  autograd formula: backward through the op raises.
"""

from __future__ import annotations

import dataclasses
import keyword
import re
import threading
from collections.abc import Callable
from typing import Any

import torch

from ..errors import TorchOpError
from .artifact import Artifact
from .kernel import CompiledKernel

__all__ = ["register_torch_op", "TorchOpError", "registered_torch_ops"]

_NAME = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)::([A-Za-z_][A-Za-z0-9_]*)$")
# Names the schema parser treats specially or that are not usable as schema argument names.
_RESERVED_ARG_NAMES = frozenset({"Tensor", "None", "True", "False"})


@dataclasses.dataclass
class _Registration:
    key: Artifact
    kernel: str
    op: Any
    defs: tuple[Any, ...]  # the CustomOpDefs (torch keeps them only weakly)


_REGISTRY: dict[str, _Registration] = {}
_LOCK = threading.Lock()


def registered_torch_ops() -> dict[str, str]:
    """``{"ns::op": kernel name}`` for every operator registered through :func:`register_torch_op`."""
    return {name: reg.kernel for name, reg in _REGISTRY.items()}


def register_torch_op(compiled: CompiledKernel, name: str) -> Callable[..., Any]:
    """Register ``compiled`` as ``torch.ops.<ns>.<op>`` (functional, returned) and ``<ns>::<op>_out`` (in
    place).  Raises :class:`TorchOpError` for a malformed name, a kernel with no inputs or no outputs, an
    output whose size no input determines, or a name already registered with a different kernel."""
    if not isinstance(compiled, CompiledKernel):
        raise TypeError(f"register_torch_op expects a CompiledKernel, got {type(compiled).__name__}")
    if compiled.debug:
        raise TorchOpError(
            name=name, message="the kernel has wc.debug_log outputs, which a torch operator cannot return; drop them"
        )
    match = _NAME.match(name) if isinstance(name, str) else None
    if match is None:
        raise TorchOpError(name=name, message="the name must look like 'namespace::op' (identifiers)")
    ns, op_name = match.groups()
    key = dataclasses.replace(compiled.artifact, metadata=dataclasses.replace(compiled.metadata, source=""))
    with _LOCK:
        existing = _REGISTRY.get(name)
        if existing is not None:
            if existing.key == key:
                return existing.op
            raise TorchOpError(
                name=name,
                message=f"already registered for kernel {existing.kernel!r} with a different artifact; pick "
                f"another name for kernel {compiled.metadata.kernel!r}",
            )
        reg = _register(compiled, ns, op_name, name, key)
        _REGISTRY[name] = reg
        return reg.op


# --------------------------------------------------------------------------------------------- internals


def _register(compiled: CompiledKernel, ns: str, op_name: str, name: str, key: Artifact) -> _Registration:
    meta = compiled.metadata
    plan = compiled.output_plan
    if not plan.input_positions:
        raise TorchOpError(name=name, message=f"kernel {meta.kernel!r} has no inputs to dispatch on")
    if not plan.output_positions:
        raise TorchOpError(name=name, message=f"kernel {meta.kernel!r} has no outputs to return")
    if plan.unbound:
        out, d, sym = plan.unbound[0]
        raise TorchOpError(
            name=name,
            message=f"output {out!r} dimension {d} is symbol {sym}, which no input binds and which is not bound at "
            "compile time, so the functional op cannot allocate it; bind it in subs",
        )
    for qual in (name, f"{name}_out"):
        if _torch_knows(ns, qual.split("::")[1]):
            raise TorchOpError(
                name=qual,
                message="torch already has an operator of this name (registered outside wavec.register_torch_op)",
            )
    schema, out_schema, mutated = _schemas(meta)
    dispatch = _Dispatch(compiled)

    def functional(*inputs: Any) -> Any:
        return dispatch.kernel_for(inputs[0]).call_bound(*inputs)

    def functional_fake(*inputs: Any) -> Any:
        outs = plan.allocate(inputs, inputs[0].device)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def in_place(*tensors: Any) -> None:
        dispatch.kernel_for(tensors[0]).call_bound(*tensors)

    def in_place_fake(*tensors: Any) -> None:
        return None

    try:
        fdef = torch.library.custom_op(name, functional, mutates_args=(), schema=schema)
        fdef.register_fake(functional_fake)
        odef = torch.library.custom_op(f"{name}_out", in_place, mutates_args=mutated, schema=out_schema)
        odef.register_fake(in_place_fake)
    except (RuntimeError, ValueError) as exc:
        raise TorchOpError(name=name, message=f"torch.library refused it: {exc}") from exc
    op = getattr(getattr(torch.ops, ns), op_name)
    return _Registration(key=key, kernel=meta.kernel, op=op, defs=(fdef, odef))


def _torch_knows(ns: str, op_name: str) -> bool:
    """Whether the dispatcher already has a schema ``ns::op_name`` (default overload)."""
    try:
        torch._C._get_schema(f"{ns}::{op_name}", "")
    except RuntimeError:
        return False
    return True


def _usable(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name) and name not in _RESERVED_ARG_NAMES


def _arg_names(meta: Any) -> list[str]:
    names: list[str] = []
    for i, a in enumerate(meta.args):
        ok = _usable(a.name)
        names.append(a.name if ok and a.name not in names else f"arg{i}_{a.name}" if ok else f"arg{i}")
    return names


def _schemas(meta: Any) -> tuple[str, str, tuple[str, ...]]:
    """The functional schema, the in-place schema and the in-place op's mutated argument names."""
    names = _arg_names(meta)
    ins = [f"Tensor {n}" for n, a in zip(names, meta.args) if not a.is_output]
    nout = sum(1 for a in meta.args if a.is_output)
    ret = "Tensor" if nout == 1 else "(" + ", ".join(["Tensor"] * nout) + ")"
    parts: list[str] = []
    mutated: list[str] = []
    for n, a in zip(names, meta.args):
        if a.is_output:
            parts.append(f"Tensor({_alias(len(mutated))}!) {n}")
            mutated.append(n)
        else:
            parts.append(f"Tensor {n}")
    # scalar arguments follow the tensors, as in the kernel's own calling conventions
    scalars = [f"{'int' if d in ('i32', 'i64') else 'float'} {_scalar_name(n, names)}" for n, d in meta.scalars]
    return (f"({', '.join(ins + scalars)}) -> {ret}", f"({', '.join(parts + scalars)}) -> ()", tuple(mutated))


def _scalar_name(name: str, taken: list[str]) -> str:
    return name if _usable(name) and name not in taken else f"scalar_{name}" if _usable(name) else "scalar"


def _alias(i: int) -> str:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return letters[i] if i < 26 else f"{letters[i // 26 - 1]}{letters[i % 26]}"


class _Dispatch:
    """The kernel to run for a tensor's device type; the other backend's kernel is built lazily."""

    def __init__(self, compiled: CompiledKernel) -> None:
        self.compiled = compiled
        gpu = compiled.backend in ("cuda", "rocm")
        self._cuda: CompiledKernel | None = compiled if gpu else None
        self._cpu: CompiledKernel | None = compiled if compiled.backend == "emulator" else None
        self._lock = threading.Lock()

    def kernel_for(self, t: Any) -> CompiledKernel:
        attr, backend = ("_cuda", "cuda") if t.is_cuda else ("_cpu", "emulator")
        k = getattr(self, attr)
        if k is None:
            with self._lock:
                k = getattr(self, attr) or CompiledKernel(self.compiled.artifact, backend)
                setattr(self, attr, k)
        return k
