"""Read the kernel function of an artifact's emitted MLIR into a tree of ops, without the MLIR bindings.

Requires: the module as ``wavec.codegen`` prints it (``Artifact.mlir``): one op per line, regions opened by a
line ending in ``{`` and closed by a line starting with ``}`` (``} else {`` / ``} do {`` start the next
region), SSA results written ``%a``, ``%a:3`` or ``%a, %b``.

Guarantees: :func:`parse_kernel` returns the ops of the ``func.func`` body in order, each with its results,
name, the rest of its line (locations stripped) and its regions; string literals (inline assembly) never
open or close a region; text that does not follow the layout raises :class:`~wavec.errors.OptionError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import OptionError

__all__ = ["Op", "parse_kernel", "elem_type", "vector_elems", "DTYPE_BYTES"]

_LOC = re.compile(r"\s+loc\((?:[^()]|\([^()]*\))*\)\s*$")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_RESULTS = re.compile(r"^\s*((?:%[\w.$-]+(?::\d+)?)(?:\s*,\s*%[\w.$-]+(?::\d+)?)*)\s*=\s*")
_NAME = re.compile(r"^\s*([a-z_][\w]*\.[\w.]+|[a-z_][\w]*)")
DTYPE_BYTES = {
    "f64": 8,
    "f32": 4,
    "tf32": 4,
    "f16": 2,
    "bf16": 2,
    "i64": 8,
    "i32": 4,
    "i16": 2,
    "i8": 1,
    "i1": 1,
    "index": 8,
}


@dataclass
class Op:
    """One op: ``results`` (names, ``%a#0``-style for multi-result ops), ``name`` (``arith.addi``), ``text``
    (the line after the name, locations stripped) and ``regions`` (lists of ops)."""

    results: list[str]
    name: str
    text: str
    regions: list[list[Op]] = field(default_factory=list)
    line: int = 0


def _strip(line: str) -> str:
    return _LOC.sub("", line.rstrip())


def _code(line: str) -> str:
    """The line with string literals blanked, for brace matching."""
    return _STRING.sub('""', line)


def _results(spec: str) -> list[str]:
    out: list[str] = []
    for part in spec.split(","):
        part = part.strip()
        if ":" in part:
            name, count = part.split(":")
            out.extend(f"{name}#{i}" for i in range(int(count)))
        else:
            out.append(part)
    return out


def _parse_op(line: str, number: int) -> Op:
    results: list[str] = []
    rest = line
    m = _RESULTS.match(line)
    if m:
        results = _results(m.group(1))
        rest = line[m.end() :]
    n = _NAME.match(rest)
    if not n:
        raise OptionError(option="mlir", message=f"line {number}: cannot read an op from {line.strip()[:120]!r}")
    return Op(results, n.group(1), rest[n.end() :].strip(), [], number)


def parse_kernel(mlir: str) -> list[Op]:
    """The ops of the first ``func.func`` in ``mlir``."""
    lines = mlir.splitlines()
    start = next((i for i, s in enumerate(lines) if re.match(r"\s*func\.func\s+@", s)), None)
    if start is None:
        raise OptionError(option="mlir", message="no func.func in the kernel's MLIR")
    body: list[Op] = []
    stack: list[list[Op]] = [body]
    for i in range(start + 1, len(lines)):
        raw = _strip(lines[i])
        code = _code(raw).strip()
        if not code or code.startswith("^") or code.startswith("//"):
            continue
        if code.startswith("}"):
            stack.pop()
            if not stack:
                return body
            if code.endswith("{"):  # } else {  /  } do {
                owner = stack[-1][-1]
                owner.regions.append([])
                stack.append(owner.regions[-1])
            continue
        op = _parse_op(raw, i + 1)
        stack[-1].append(op)
        if code.endswith("{"):
            op.text = op.text[: op.text.rfind("{")].rstrip()
            op.regions.append([])
            stack.append(op.regions[-1])
    raise OptionError(option="mlir", message="the kernel function's body is not closed")


_VECTOR = re.compile(r"vector<((?:\d+x)*)(\w+)>")


def vector_elems(type_text: str) -> tuple[int, str] | None:
    """(element count, element type) of the first ``vector<...>`` in ``type_text``."""
    m = _VECTOR.search(type_text)
    if not m:
        return None
    count = 1
    for d in m.group(1).split("x"):
        if d:
            count *= int(d)
    return count, m.group(2)


_MEMREF = re.compile(r"memref<([^<>]*(?:<[^<>]*(?:<[^<>]*>)?[^<>]*>)?[^<>]*)>")


def elem_type(type_text: str) -> str | None:
    """The element type of the first memref type in ``type_text`` (``memref<?x?xf16>`` -> f16)."""
    m = _MEMREF.search(type_text)
    if not m:
        return None
    dims = m.group(1).split(",")[0]
    return dims.split("x")[-1].strip()


def memref_types(type_text: str) -> list[str]:
    """Every memref type in ``type_text``, in order."""
    return [m.group(0) for m in _MEMREF.finditer(type_text)]
