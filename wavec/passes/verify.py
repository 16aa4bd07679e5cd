"""The trace verifier, run between passes when ``WAVEC_VERIFY_IR`` is on (the default).

Checks that every ``meta``/``kwargs`` key is declared in ``schema``, has its declared type and that a
producer of it already ran; that op nodes carry their op and register values a type (and, after
``infer_indices``, a layout over exactly their dims); that ``iterate`` nodes agree with their bodies.  A
pass that breaks an invariant fails at the pass, not as a wrong kernel.
"""

from __future__ import annotations

from typing import NoReturn

import torch.fx as fx

from ..errors import WavecError
from ..frontend.ops import Iterate
from ..frontend.tracing import Trace, arg_nodes, placeholders
from .schema import KWARGS, META, TRACE, Key


class TraceVerificationError(WavecError):
    template = "trace verification failed after pass {stage}: {message}"


def _fail(stage: str, node: fx.Node, message: str) -> NoReturn:
    raise TraceVerificationError(node.meta.get("loc"), stage=stage, message=f"%{node.name}: {message}")


def _check_keys(stage: str, node: fx.Node, ran: set[str]) -> None:
    for where, values, declared in (("meta", node.meta, META), ("kwargs", node.kwargs, KWARGS)):
        for name, value in values.items():
            key: Key | None = declared.get(name)
            if key is None:
                _fail(stage, node, f"{where}[{name!r}] is not declared in passes/schema.py")
            elif not ran.intersection(key.producers):
                _fail(stage, node, f"{where}[{name!r}] present before its producer {' or '.join(key.producers)} ran")
            elif not key.check(value):
                _fail(stage, node, f"{where}[{name!r}] = {value!r} is not a {key.type} ({key.record})")


def _check_node(stage: str, node: fx.Node, layouts: bool) -> None:
    if node.op == "call_function" and node.meta.get("op") is None:
        _fail(stage, node, "op node without meta['op']")
    t = node.meta.get("type")
    if t is None or t.address_space is not None or node.op == "output":
        return
    if layouts and node.meta.get("op") is not Iterate:
        lay = node.meta.get("layout")
        if lay is None:
            _fail(stage, node, f"register value of type {t} has no layout")
        if set(lay.dims) != set(t.dims):
            _fail(stage, node, f"layout dims {lay.dims} differ from the value's dims {t.dims}")


def _check_iterate(stage: str, trace: Trace, node: fx.Node, graph: fx.Graph) -> None:
    sub = trace.subgraphs.get(str(node.kwargs["subgraph"]))
    if sub is None:
        _fail(stage, node, f"body {node.kwargs['subgraph']} is missing")
    inits, captures = arg_nodes(node, 0), arg_nodes(node, 1)
    iter_args, caps = placeholders(sub, "iter_arg"), placeholders(sub, "capture")
    out = arg_nodes(next(n for n in sub.nodes if n.op == "output"), 0)
    if not (len(inits) == len(iter_args) == len(out)):
        _fail(stage, node, f"{len(inits)} inits, {len(iter_args)} iter_args, {len(out)} yielded values")
    if [p.meta["capture_of"] for p in caps] != list(captures):
        _fail(stage, node, "capture placeholders do not match the captured values")
    for c in captures:
        if c.graph is not graph:
            _fail(stage, node, f"captured %{c.name} is not in the enclosing graph")


def verify_trace(trace: Trace, stage: str, ran: set[str]) -> None:
    """Check ``trace`` after pass ``stage``; ``ran``: the passes run so far (``stage`` included)."""
    ran = ran | {TRACE}
    layouts = "infer_indices" in ran
    for g in trace.graphs():
        for node in g.nodes:
            _check_keys(stage, node, ran)
            _check_node(stage, node, layouts)
            if node.meta.get("op") is Iterate:
                _check_iterate(stage, trace, node, g)
