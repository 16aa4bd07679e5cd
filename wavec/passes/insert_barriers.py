"""insert_barriers: workgroup barriers from shared-memory hazards, no more than needed.

Requires: ``promote_to_shared`` and ``pipeline_loops``.  Guarantees, per ``iterate`` body that both writes
and reads shared memory: pipelined (an ``async_wait``, or an ``mbarrier_wait`` with TMA): one barrier right
after the wait (RAW on the stage read, WAR with the previous iteration), none when TMA stages are released
through "empty" mbarriers; otherwise a barrier at the top of the body (WAR) and one before each shared
read of a tile written since the last barrier (RAW).

``wc.allocate`` buffers (``kwargs["user"]``), in every graph: a barrier right before an access that
conflicts with an access of the same buffer since the last barrier (a read after a write or an atomic, a
write after anything, an atomic after a read or a write; atomics among themselves commute, and so do the
writes of a buffer allocated with ``disjoint_writes``).  Loops carry
their body's pending accesses into the next iteration (a barrier at the top of the body where its first
accesses conflict with its last); a conflict of a loop's or a conditional's first accesses with what
precedes it puts the barrier before the loop or the branch, never inside a branch (it would diverge):
two conflicting accesses within one conditional region are a ``ConstraintError``.  Explicit
``wc.barrier()`` nodes count and stay where they are.
"""

from __future__ import annotations

import torch.fx as fx

from ..errors import ConstraintError
from ..frontend.mapping import memory_operand
from ..frontend.ops import AsyncCopy, AsyncWait, Barrier, Iterate, Read, Write
from ..frontend.ops_atomic import Atomic
from ..frontend.ops_control import Conditional
from ..frontend.ops_hopper import MBarrierWait, TmaFill
from ..frontend.tracing import Trace, capture_root
from ..frontend.types import AddressSpace
from .context import PassContext
from .schema import loop_body, op_node


def _is_shared(node: fx.Node) -> bool:
    """A staged tile (``wc.allocate`` buffers have hazards of their own: ``_Hazards``)."""
    t = node.meta.get("type")
    return t is not None and t.address_space == AddressSpace.SHARED and not capture_root(node).kwargs.get("user")


def _barrier(g: fx.Graph, before: fx.Node) -> fx.Node:
    return op_node(g, Barrier, (), {}, "barrier", before.meta.get("loc"), before=before)


def _body_barriers(g: fx.Graph) -> None:
    nodes = [n for n in g.nodes if n.op != "placeholder"]
    writes = [
        n
        for n in nodes
        if (n.meta.get("op") is Write and _is_shared(n.args[1])) or n.meta.get("op") in (AsyncCopy, TmaFill)
    ]
    reads = [n for n in nodes if n.meta.get("op") is Read and _is_shared(n.args[0])]
    if not writes or not reads:
        return
    wait = next((n for n in nodes if n.meta.get("op") in (AsyncWait, MBarrierWait)), None)
    if wait is not None and wait.kwargs.get("war") == "mbarrier":
        return  # TMA with empty mbarriers: the full and empty mbarriers order both hazards
    if wait is not None:
        _barrier(g, wait.next)
        return
    _barrier(g, nodes[0])
    dirty: set = set()
    for n in nodes:
        if n in writes:
            dirty.add(n.args[1])
        elif n in reads and n.args[0] in dirty:
            _barrier(g, n)
            dirty.clear()


# user buffer -> kinds of access since the last barrier ("r", "w", "a"; "d": a write of a ``disjoint_writes``
# buffer, which never stores a value other than an earlier write's to one element)
State = dict[fx.Node, frozenset[str]]
_ACCESS = {Read: "r", Write: "w", Atomic: "a"}


def _conflicts(before: frozenset[str], kind: str) -> bool:
    if kind == "r":
        return bool(before & {"w", "a", "d"})
    if kind in ("a", "d"):
        return bool(before - {kind})
    return bool(before)


def _user_access(node: fx.Node) -> tuple[fx.Node, str] | None:
    kind = _ACCESS.get(node.meta["op"]) if node.op == "call_function" else None
    if kind is None:
        return None
    buf = capture_root(memory_operand(node))
    if kind == "w" and buf.kwargs.get("disjoint_writes"):
        kind = "d"
    return (buf, kind) if buf.kwargs.get("user") else None


def _union(a: State, b: State) -> State:
    return {k: a.get(k, frozenset()) | b.get(k, frozenset()) for k in a.keys() | b.keys()}


class _Hazards:
    """Barriers for ``wc.allocate`` buffers.  ``walk`` returns the pending state at a graph's end; with
    ``mutate=False`` it simulates (the barriers it would insert only reset the state)."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace

    def body(self, n: fx.Node) -> fx.Graph:
        return loop_body(self.trace, n)

    def kinds(self, g: fx.Graph) -> State:
        """Every user-buffer access in ``g`` and its regions."""
        out: State = {}
        for n in g.nodes:
            if n.meta.get("op") in (Iterate, Conditional):
                out = _union(out, self.kinds(self.body(n)))
            elif (acc := _user_access(n)) is not None:
                out = _union(out, {acc[0]: frozenset(acc[1])})
        return out

    def probe(self, g: fx.Graph, state: State) -> fx.Node | None:
        """The first node of ``g`` (a loop or branch for an access in its body) that conflicts with
        ``state`` before any barrier."""
        for n in g.nodes:
            op = n.meta.get("op")
            if op is Barrier:
                return None
            if op in (Iterate, Conditional):
                if self.probe(self.body(n), state) is not None:
                    return n
                state = _union(state, self.kinds(self.body(n)))
            elif (acc := _user_access(n)) is not None:
                if _conflicts(state.get(acc[0], frozenset()), acc[1]):
                    return n
                state = _union(state, {acc[0]: frozenset(acc[1])})
        return None

    def walk(self, g: fx.Graph, state: State, mutate: bool, region: bool = False) -> State:
        for n in list(g.nodes):
            op = n.meta.get("op")
            if op is Barrier:
                state = {}
            elif op in (Iterate, Conditional):
                state = self._region(g, n, state, mutate, region)
            elif (acc := _user_access(n)) is not None:
                buf, kind = acc
                if _conflicts(state.get(buf, frozenset()), kind):
                    state = self._fence(g, n, buf, mutate, region)
                state = _union(state, {buf: frozenset(kind)})
        return state

    def _fence(self, g: fx.Graph, n: fx.Node, buf: fx.Node, mutate: bool, region: bool) -> State:
        if region:
            raise ConstraintError(
                n.meta.get("loc"),
                message=f"%{n.name} conflicts with an earlier access of {buf.name} inside a wc.conditional "
                "region: the barrier between them would diverge; split the region",
            )
        if mutate:
            _barrier(g, n)
        return {}

    def _region(self, g: fx.Graph, n: fx.Node, state: State, mutate: bool, region: bool) -> State:
        """A loop: a body whose accesses conflict with its own previous iteration gets its barrier inside
        (which also orders the first iteration after what precedes the loop), else a conflict with what
        precedes puts one barrier before the loop.  A branch: before it (never inside)."""
        body, is_loop = self.body(n), n.meta.get("op") is Iterate
        inner = region or not is_loop
        tail = self.walk(body, {}, mutate=False, region=inner) if is_loop else {}
        carried = is_loop and self.probe(body, tail) is not None
        hit = None if carried else self.probe(body, state)
        if hit is not None:
            state = self._fence(g, hit if region else n, capture_root(n), mutate, region)
        return _union(state, self.walk(body, _union(state, tail), mutate, region=inner))


def insert_barriers(trace: Trace, ctx: PassContext) -> None:
    for node in trace.graph.nodes:
        if node.meta.get("op") is Iterate:
            _body_barriers(trace.subgraphs[node.kwargs["subgraph"]])
    _Hazards(trace).walk(trace.graph, {}, mutate=True)
