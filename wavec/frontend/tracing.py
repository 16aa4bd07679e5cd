"""Tracing a ``@wc.wave`` kernel body into torch.fx graphs with sympy shapes.

``trace_kernel`` runs the Python body once with ``Value`` proxies.  Every DSL op appends one fx node
whose ``meta`` holds ``type`` (``TensorType``), ``op`` (the op class) and ``loc`` (the kernel source
line).  An ``iterate`` body becomes its own fx graph in ``Trace.subgraphs``; values of enclosing graphs
used inside it become ``capture`` placeholders listed on the ``iterate`` node.
"""

from __future__ import annotations

import inspect
import linecache
import os
import sys
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING

import torch.fx as fx

from ..errors import OutsideKernelError, ShapeError, SourceLoc
from .types import AddressSpace, ScalarType, TensorType

if TYPE_CHECKING:
    from .ops import Op

_WAVEC_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_KERNELS_DIR = os.path.join(_WAVEC_DIR, "kernels")  # the kernel library is user code
_ACTIVE: list[Tracer] = []


def current_loc(skip: int = 0) -> SourceLoc | None:
    """The innermost stack frame outside the compiler (user code or ``wavec/kernels``): the kernel line.
    ``skip``: frames of the caller's own to pass over first (a dataclass's generated ``__init__``)."""
    frame: FrameType | None = sys._getframe(1 + skip)
    while frame is not None:
        fname = os.path.abspath(frame.f_code.co_filename)
        if not fname.startswith(_WAVEC_DIR + os.sep) or fname.startswith(_KERNELS_DIR + os.sep):
            return SourceLoc(fname, frame.f_lineno, linecache.getline(fname, frame.f_lineno))
        frame = frame.f_back
    return None


def arg_node(node: fx.Node, i: int) -> fx.Node:
    """``node.args[i]`` as the ``fx.Node`` that it is for wavec's ops (torch types it as any ``Argument``)."""
    arg = node.args[i]
    if not isinstance(arg, fx.Node):
        raise TypeError(f"%{node.name}: argument {i} is {type(arg).__name__}, not a node")
    return arg


def capture_root(node: fx.Node) -> fx.Node:
    """The node a (possibly nested) capture placeholder stands for; any other node itself."""
    while node.meta.get("role") == "capture":
        node = node.meta["capture_of"]
    return node


def placeholders(g: fx.Graph, role: str) -> list[fx.Node]:
    """The placeholders of ``g`` whose ``meta["role"]`` is ``role`` (``"iter_arg"``, ``"capture"``), in order."""
    return [p for p in g.nodes if p.op == "placeholder" and p.meta.get("role") == role]


def active_tracer(op: str) -> Tracer:
    if not _ACTIVE:
        raise OutsideKernelError(current_loc(), op=op)
    return _ACTIVE[-1]


def _binary_op(kind: str, swap: bool = False):
    """A ``Value`` operator: ``wc.binary(kind, ...)``, operands swapped for the reflected form (``1 - x``)."""

    def method(self, other):
        from .ops import binary

        return binary(kind, other, self) if swap else binary(kind, self, other)

    return method


class Value:
    """A symbolic tensor inside a kernel body (wraps one fx node)."""

    __slots__ = ("node",)

    def __init__(self, node: fx.Node) -> None:
        self.node = node

    @property
    def type(self) -> TensorType:
        return self.node.meta["type"]

    @property
    def shape(self) -> tuple:
        return self.type.shape

    @property
    def dtype(self):
        return self.type.dtype

    def __repr__(self) -> str:
        return f"Value({self.node.name}: {self.type})"

    def __bool__(self) -> bool:
        raise ShapeError(
            current_loc(),
            op="bool",
            message="a traced value has no truth value; use wc.where(cond, a, b) instead of if/and/or",
        )

    __add__ = _binary_op("add")
    __radd__ = _binary_op("add", swap=True)
    __sub__ = _binary_op("sub")
    __rsub__ = _binary_op("sub", swap=True)
    __mul__ = _binary_op("mul")
    __rmul__ = _binary_op("mul", swap=True)
    __truediv__ = _binary_op("div")
    __rtruediv__ = _binary_op("div", swap=True)
    __floordiv__ = _binary_op("floordiv")
    __rfloordiv__ = _binary_op("floordiv", swap=True)
    __mod__ = _binary_op("mod")
    __rmod__ = _binary_op("mod", swap=True)
    __lt__ = _binary_op("lt")
    __le__ = _binary_op("le")
    __gt__ = _binary_op("gt")
    __ge__ = _binary_op("ge")
    __eq__ = _binary_op("eq")
    __ne__ = _binary_op("ne")
    __and__ = _binary_op("and")
    __rand__ = _binary_op("and", swap=True)
    __or__ = _binary_op("or")
    __ror__ = _binary_op("or", swap=True)
    __xor__ = _binary_op("xor")
    __rxor__ = _binary_op("xor", swap=True)
    __lshift__ = _binary_op("shl")
    __rlshift__ = _binary_op("shl", swap=True)
    __rshift__ = _binary_op("shr")
    __rrshift__ = _binary_op("shr", swap=True)

    def __hash__(self) -> int:
        return id(self)

    def __neg__(self):
        from .ops import unary

        return unary("neg", self)

    def __pos__(self):
        return self

    def __abs__(self):
        from .ops import unary

        return unary("abs", self)

    def __invert__(self):  # bitwise not: x ^ -1 (on i1 masks: logical not)
        from .ops import binary

        return binary("xor", self, True if self.dtype.name == "i1" else -1)

    def __pow__(self, n):
        from .ops_math import pow

        return pow(self, n)

    def __round__(self, ndigits=None):
        from .ops import unary

        if ndigits is not None:
            raise ShapeError(current_loc(), op="round", message="round(x, ndigits) is not supported; use round(x)")
        return unary("round", self)

    def __floor__(self):
        from .ops import unary

        return unary("floor", self)

    def __ceil__(self):
        from .ops import unary

        return unary("ceil", self)

    def __getitem__(self, key):
        from .ops import expand_dims

        return expand_dims(self, key)


@dataclass
class KernelArg:
    name: str
    type: TensorType


@dataclass
class Trace:
    """A traced kernel: the root fx graph, loop-body subgraphs, arguments and where it was defined."""

    name: str
    graph: fx.Graph
    subgraphs: dict[str, fx.Graph]
    args: list[KernelArg]
    loc: SourceLoc
    meta: dict = field(default_factory=dict)
    scalars: list[KernelArg] = field(default_factory=list)  # by-value arguments (bound after the memories)
    signature: tuple[str, ...] = ()  # every argument's name in the order of the kernel's ``def``

    def graphs(self):
        yield self.graph
        yield from self.subgraphs.values()


class Tracer:
    def __init__(self, batch_dims: tuple = ()) -> None:
        self.batch_dims = tuple(batch_dims)  # dims a workgroup holds one coordinate of (not in registers)
        self.root = fx.Graph()
        self.stack: list[fx.Graph] = [self.root]
        self.subgraphs: dict[str, fx.Graph] = {}
        self.captures: dict[fx.Graph, dict[fx.Node, fx.Node]] = {}
        self.args: list[KernelArg] = []  # the Memory arguments, then the hidden outputs of ``wc.debug_log``
        self.scalars: list[KernelArg] = []
        self.loops: list = []  # the dims of the enclosing ``wc.iterate`` loops, outermost first
        self.debug_logs: list = []  # ``ops_debug.DebugLog``s, in call order
        self.debug_subs: dict = {}  # each log's iteration dims: their static sizes

    def memory_argument(self, name: str, ttype: TensorType) -> Value:
        """A hidden Memory argument after every existing one (a root placeholder; ``wc.debug_log``'s
        output): binding order puts it after the kernel's own tensors, the signature leaves it out."""
        phs = [n for n in self.root.nodes if n.op == "placeholder"]
        with (
            self.root.inserting_after(phs[-1]) if phs else self.root.inserting_before(next(iter(self.root.nodes), None))
        ):
            node = self.root.placeholder(name)
        loc = current_loc()
        node.meta.update(type=ttype, loc=loc, role="memory", arg_index=len(self.args), promote=False)
        self.args.append(KernelArg(name, ttype))
        return Value(node)

    @property
    def graph(self) -> fx.Graph:
        return self.stack[-1]

    def create(self, op: type[Op], args: tuple, ttype: TensorType | None, loc=None, **kwargs) -> Value:
        args = tuple(self.lift(a) for a in args)
        node = self.graph.create_node("call_function", op, args, kwargs, name=op.name)
        node.meta.update(op=op, type=ttype, loc=loc or current_loc())
        return Value(node)

    def lift(self, a):
        """Turn a Value (possibly from an enclosing graph) into a node of the current graph."""
        if isinstance(a, (tuple, list)):
            return type(a)(self.lift(x) for x in a)
        if not isinstance(a, Value):
            return a
        node = a.node
        if node.graph is self.graph:
            return node
        level = self.stack.index(node.graph)
        for g in self.stack[level + 1 :]:
            table = self.captures.setdefault(g, {})
            if node not in table:
                phs = [n for n in g.nodes if n.op == "placeholder"]
                # Placeholders stay at the top of the body, in capture order.
                with g.inserting_after(phs[-1]) if phs else g.inserting_before(next(iter(g.nodes), None)):
                    ph = g.placeholder(f"capture_{node.name}")
                ph.meta.update(node.meta, capture_of=node, role="capture", op=None)
                table[node] = ph
            node = table[node]
        return node

    def push(self, name: str) -> fx.Graph:
        g = fx.Graph()
        self.subgraphs[name] = g
        self.stack.append(g)
        return g

    def pop(self) -> None:
        self.stack.pop()

    def __enter__(self) -> Tracer:
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _ACTIVE.pop()


def _annotations(fn, scope_locals: dict | None = None) -> dict:
    """Argument annotations, evaluating string ones (``from __future__ import annotations``) with the
    function's globals, the locals of the scope that defined it, and its closure."""
    scope = dict(fn.__globals__)
    scope.update(scope_locals or {})
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                scope[name] = cell.cell_contents
            except ValueError:
                pass
    out = {}
    for name, ann in fn.__annotations__.items():
        out[name] = eval(ann, scope) if isinstance(ann, str) else ann  # noqa: S307 - the user's own annotation
    return out


def trace_kernel(fn, scope_locals: dict | None = None, batch_dims: tuple = ()) -> Trace:
    """Trace ``fn`` (annotated with ``Memory[...]`` arguments) into a ``Trace``; ``batch_dims`` are the
    dimensions each workgroup holds one coordinate of (reads and writes index them, registers drop them)."""
    sig = inspect.signature(fn)
    hints = _annotations(fn, scope_locals)
    loc = SourceLoc(inspect.getsourcefile(fn) or "<unknown>", fn.__code__.co_firstlineno, f"def {fn.__name__}")

    def error(message: str) -> ShapeError:
        return ShapeError(loc, op=fn.__name__, message=message)

    tracer = Tracer(batch_dims)
    args, scalars = tracer.args, tracer.scalars
    values: list[Value] = []
    for name in sig.parameters:
        t = hints.get(name)
        if isinstance(t, ScalarType):
            node = tracer.root.placeholder(name)
            rank0 = TensorType((), t.dtype)
            node.meta.update(type=rank0, loc=loc, role="scalar", scalar_index=len(scalars))
            scalars.append(KernelArg(name, rank0))
            values.append(Value(node))
            continue
        if not isinstance(t, TensorType) or t.address_space is None:
            raise error(f"argument {name!r} must be annotated Memory[dims..., dtype] or wc.Scalar[dtype]")
        node = tracer.root.placeholder(name)
        # Memory[..., "shared"] on an argument asks for staging through shared memory; the argument
        # itself is device memory (promote_to_shared reads meta["promote"]).
        promote = t.address_space == AddressSpace.SHARED
        if promote:
            t = TensorType(t.shape, t.dtype, AddressSpace.GLOBAL)
        node.meta.update(type=t, loc=loc, role="memory", arg_index=len(args), promote=promote)
        args.append(KernelArg(name, t))
        values.append(Value(node))
    with tracer:
        result = fn(*values)
    if result is not None:
        raise error("a kernel returns nothing; write results with wc.write")
    tracer.root.output(None)
    return Trace(
        fn.__name__,
        tracer.root,
        tracer.subgraphs,
        args,
        loc,
        meta={"captures": tracer.captures, "debug_logs": tracer.debug_logs, "debug_subs": tracer.debug_subs},
        scalars=scalars,
        signature=tuple(sig.parameters),
    )


def arg_nodes(node: fx.Node, i: int | None = None) -> tuple[fx.Node, ...]:
    """``node.args``, or the tuple ``node.args[i]`` (an iterate's inits or captures, an output's values), as the
    nodes they are for wavec's ops."""
    args = node.args if i is None else node.args[i]
    if not isinstance(args, (tuple, list)) or not all(isinstance(a, fx.Node) for a in args):
        raise TypeError(f"%{node.name}: not all nodes: {args}")
    return tuple(a for a in args if isinstance(a, fx.Node))
