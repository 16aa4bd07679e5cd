"""Readable text of a trace (for ``print_ir_after`` and the IR tests)."""

from __future__ import annotations

import torch.fx as fx

from ..frontend.tracing import Trace


def _arg(a) -> str:
    if isinstance(a, fx.Node):
        return f"%{a.name}"
    if isinstance(a, (tuple, list)):
        return "(" + ", ".join(_arg(x) for x in a) + ")"
    return repr(a)


def format_graph(g: fx.Graph, indent: str = "  ") -> list[str]:
    lines = []
    for n in g.nodes:
        op = n.meta.get("op")
        if n.op == "placeholder":
            head = f"%{n.name} = {n.meta.get('role', 'arg')}"
        elif n.op == "output":
            head = f"return {_arg(n.args[0])}"
        else:
            kw = {k: v for k, v in n.kwargs.items() if v is not None}
            kws = "".join(f", {k}={v}" for k, v in kw.items())
            head = f"%{n.name} = {op.name if op else n.target}({', '.join(_arg(a) for a in n.args)}{kws})"
        t = n.meta.get("type")
        layout = n.meta.get("layout")
        tail = f" : {t}" if t is not None else ""
        tail += f"  #layout {layout}" if layout is not None else ""
        lines.append(indent + head + tail)
    return lines


def format_trace(trace: Trace) -> str:
    params = [f"{a.name}: {a.type}" for a in trace.args] + [f"{a.name}: scalar {a.type.dtype}" for a in trace.scalars]
    out = [f"kernel {trace.name}({', '.join(params)}) {{"]
    out += format_graph(trace.graph)
    out.append("}")
    for name, g in trace.subgraphs.items():
        out.append(f"region {name} {{")
        out += format_graph(g)
        out.append("}")
    return "\n".join(out)
