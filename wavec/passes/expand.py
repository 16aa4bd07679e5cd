"""expand: clone each op once per instruction tile of its wave tile (DESIGN §4).

Requires: ``infer_indices``.  Guarantees: a new trace whose register nodes each cover one instruction tile
(``meta["layout"]`` offset to it, ``meta["key"]`` its position per dim); users are rewired to the clone
of the same sub-tile (A is read once per (M, K) tile, not per mma); ``mma`` clones are chained along K,
K steps outermost; ``iterate`` bodies expand inside their loop, carried values consistently.
"""

from __future__ import annotations

import itertools

import torch.fx as fx

from ..errors import ExpansionError
from ..frontend.ops import MMA, PRIO_HARDWARE, GetResult
from ..frontend.tracing import Trace
from .context import PassContext

Key = tuple  # ((dim, index), ...) in the node's dim order


def _counts(ctx: PassContext, node: fx.Node) -> dict:
    layout = node.meta["layout"]
    counts = {}
    # a staging copy, and the index values that address it, spread over the whole workgroup
    per_workgroup = "workgroup" in (node.meta.get("distribute"), node.meta.get("index_scope"))
    cs = ctx.constraints
    for d, tile in zip(layout.dims, layout.tile):
        if d in cs.loop_tile and d not in cs.wg_tile and not ctx.in_loop(node.graph, d):
            raise ExpansionError(
                node.meta.get("loc"),
                message=f"%{node.name} spans dimension {d}, which a "
                f"TilingConstraint tiles by {cs.loop_tile[d]}: use it inside wc.iterate({d}, ...)",
            )
        extent = ctx.constraints.workgroup_extent(d) if per_workgroup else ctx.constraints.wave_extent(d)
        if extent is None:
            raise ExpansionError(
                node.meta.get("loc"),
                message=f"dimension {d} is not distributed: add a WorkgroupConstraint or TilingConstraint for it",
            )
        if extent < tile and not per_workgroup and node.meta.get("layout_prio") == PRIO_HARDWARE and not tile % extent:
            counts[d] = 1  # an MMA tile padded past the wave's (infer_indices.check_tiles admitted it)
            continue
        if extent % tile:  # infer_indices checked the layouts it chose; this guards layouts made later
            raise ExpansionError(
                node.meta.get("loc"),
                message=f"{cs.explain(d, not per_workgroup)}, not a multiple of the instruction tile {tile} of "
                f"%{node.name}",
            )
        counts[d] = extent // tile
    return counts


def _keys(counts: dict) -> list[Key]:
    dims = list(counts)
    return [tuple(zip(dims, idx)) for idx in itertools.product(*(range(counts[d]) for d in dims))]


def _restrict(key: Key, dims) -> Key:
    dims = list(dims)
    return tuple(sorted(((d, i) for d, i in key if d in dims), key=lambda x: dims.index(x[0])))


def _suffix(key: Key) -> str:
    return "".join(f"_{str(d).lower()}{i}" for d, i in key)


class _Expander:
    def __init__(self, trace: Trace, ctx: PassContext) -> None:
        self.trace, self.ctx = trace, ctx
        self.subgraphs: dict[str, fx.Graph] = {}

    def clone(self, ng: fx.Graph, node: fx.Node, key: Key, args: tuple) -> fx.Node:
        new = ng.create_node("call_function", node.target, args, dict(node.kwargs), name=node.name + _suffix(key))
        new.meta.update(node.meta)
        if "layout" in node.meta:
            lay = node.meta["layout"]
            deltas = {d: i * lay.tile_of(d) for d, i in key if d in lay.dims}
            new.meta["layout"] = lay.offset(deltas)
        new.meta["key"] = key
        return new

    def lookup(self, env, node, key: Key):
        if not isinstance(node, fx.Node):
            return node
        table = env[node]
        if () in table and len(table) == 1:
            return table[()]
        layout = node.meta.get("layout")
        want = _restrict(key, layout.dims) if layout is not None else ()
        try:
            return table[want]
        except KeyError:
            raise ExpansionError(node.meta.get("loc"), message=f"no clone of %{node.name} for tile {want}") from None

    def expand_graph(self, g: fx.Graph, ng: fx.Graph, env: dict) -> None:
        """Each node by its op's ``expansion`` rule (``RULES``); nodes without an op per tile."""
        for node in g.nodes:
            if node in env:
                continue
            if node.op == "output":
                ng.output(self._outputs(node, env))
            else:
                RULES[getattr(node.meta.get("op"), "expansion", "per_tile")](self, ng, node, env)

    def _per_tile(self, ng, node, env) -> None:
        """Once per instruction tile of the result; ops without a register result (write, ...) once per
        tile of their value operand."""
        if "layout" in node.meta:
            keys = _keys(_counts(self.ctx, node))
            src = None
        else:
            src = next((a for a in node.args if isinstance(a, fx.Node) and "layout" in a.meta), None)
            keys = list(env[src]) if src is not None else [()]
        env[node] = {k: self.clone(ng, node, k, tuple(self.lookup(env, a, k) for a in node.args)) for k in keys}
        if src is not None:
            for k, new in env[node].items():
                new.meta["layout"] = env[src][k].meta["layout"]

    def _loop_result(self, ng, node, env) -> None:
        """A loop's results are cloned by the loop's rule (``_iterate``)."""

    def _outputs(self, node, env):
        if node.args[0] is None:
            return None
        return tuple(v for o in node.args[0] for _, v in sorted(env[o].items()))

    def _mma(self, ng, node, env) -> None:
        a, b, acc = node.args
        m, n, k = MMA.dims(node)
        counts = _counts(self.ctx, a)
        keys = _keys(_counts(self.ctx, node))
        out = {key: self.lookup(env, acc, key) for key in keys}
        # K steps outermost: consecutive mmas update different accumulators, so none waits on the last.
        for kk in range(counts[k]):
            for key in keys:
                ka = _restrict(key, (m,)) + ((k, kk),)
                kb = _restrict(key, (n,)) + ((k, kk),)
                out[key] = self.clone(ng, node, key + ((k, kk),), (env[a][ka], env[b][kb], out[key]))
        env[node] = out

    def _reduce(self, ng, node, env) -> None:
        """Per output tile: combine the input tiles along the reduced dim in a chain (each clone takes the
        previous partial result); the last clone of a chain also reduces across lanes (``finalize``)."""
        x = node.args[0]
        dim = node.kwargs["dim"]
        in_counts = _counts(self.ctx, x)
        out = {}
        for key in _keys(_counts(self.ctx, node)):
            acc = None
            for j in range(in_counts[dim]):
                in_key = _restrict(key + ((dim, j),), x.meta["layout"].dims)
                args = (self.lookup(env, x, in_key),) + ((acc,) if acc is not None else ())
                acc = self.clone(ng, node, key + ((dim, j),), args)
                acc.meta["finalize"] = j == in_counts[dim] - 1
            out[key] = acc
        env[node] = out

    def _gather(self, ng, node, env) -> None:
        """Per output tile: one clone whose operands are every input tile along the dim it consumes
        (``wc.topk``: the k winners of a row need all of the thread's elements of it)."""
        x = node.args[0]
        dim, k_dim = node.kwargs["dim"], node.kwargs["k_dim"]
        n_tiles = _counts(self.ctx, x)[dim]
        out = {}
        for key in _keys(_counts(self.ctx, node)):
            rows = tuple((d, i) for d, i in key if d != k_dim)
            tiles = [self.lookup(env, x, _restrict(rows + ((dim, j),), x.meta["layout"].dims)) for j in range(n_tiles)]
            out[key] = self.clone(ng, node, key, tuple(tiles))
        env[node] = out

    def _convert(self, ng, node, env) -> None:
        """Each output tile takes every input tile it overlaps (the tiles of the two layouts differ)."""
        x = node.args[0]
        src, dst = x.meta["layout"], node.meta["layout"]
        out = {}
        for key in _keys(_counts(self.ctx, node)):
            ranges = []
            for d, i in key:
                s, t = src.tile_of(d), dst.tile_of(d)
                ranges.append([(d, j) for j in range(i * t // s, max(i * t // s + 1, (i + 1) * t // s))])
            srcs = tuple(self.lookup(env, x, _restrict(k, src.dims)) for k in itertools.product(*ranges))
            out[key] = self.clone(ng, node, key, (srcs,))
        env[node] = out

    def _iterate(self, ng, node, env) -> None:
        name = node.kwargs["subgraph"]
        sub = self.trace.subgraphs[name]
        nsub = fx.Graph()
        self.subgraphs[name] = nsub
        senv: dict = {}
        inits = node.args[0]
        flat_inits: list[fx.Node] = []
        flat_caps: list[fx.Node] = []
        for p in sub.nodes:
            if p.op != "placeholder":
                continue
            carried = p.meta.get("role") == "iter_arg"  # else a capture: one placeholder per clone as well
            outer = inits[p.meta["index"]] if carried else p.meta["capture_of"]
            senv[p] = {}
            for key, val in sorted(env[outer].items()):
                ph = nsub.placeholder(p.name + _suffix(key))
                ph.meta.update(p.meta, key=key, **({} if carried else {"capture_of": val}))
                if "layout" in val.meta:
                    ph.meta["layout"] = val.meta["layout"]
                senv[p][key] = ph
                (flat_inits if carried else flat_caps).append(val)
        self.expand_graph(sub, nsub, senv)
        new = ng.create_node(
            "call_function", node.target, (tuple(flat_inits), tuple(flat_caps)), dict(node.kwargs), name=node.name
        )
        new.meta.update(node.meta)
        env[node] = {(): new}
        pos = 0
        users = sorted((u for u in node.users if u.meta.get("op") is GetResult), key=lambda u: u.kwargs["index"])
        for u in users:
            table = {}
            for key, val in sorted(env[inits[u.kwargs["index"]]].items()):
                r = ng.create_node("call_function", u.target, (new,), {"index": pos}, name=u.name + _suffix(key))
                r.meta.update(u.meta, key=key, layout=val.meta["layout"])
                table[key] = r
                pos += 1
            env[u] = table

    def _region(self, ng, node, env) -> None:
        """A conditional: its body expands inside one branch, each captured value once per clone (like a
        loop's captures); the condition must be one element per thread (its first tile's element)."""
        cond = node.args[0][0] if node.args[0] else None
        if cond is not None and (len(env[cond]) != 1 or cond.meta["layout"].size != 1):
            n = len(env[cond]) * cond.meta["layout"].size
            raise ExpansionError(
                node.meta.get("loc"),
                message=f"wc.conditional: the condition holds {n} elements per thread; it needs one (give its dims "
                "vector_shapes covering the wave's tile, one element per lane), or use wc.where per element",
            )
        name = node.kwargs["subgraph"]
        sub, nsub = self.trace.subgraphs[name], fx.Graph()
        self.subgraphs[name] = nsub
        senv: dict = {}
        flat_caps: list[fx.Node] = []
        for p in (p for p in sub.nodes if p.op == "placeholder"):
            senv[p] = {}
            for key, val in sorted(env[p.meta["capture_of"]].items()):
                ph = nsub.placeholder(p.name + _suffix(key))
                ph.meta.update(p.meta, key=key, capture_of=val)
                if "layout" in val.meta:
                    ph.meta["layout"] = val.meta["layout"]
                senv[p][key] = ph
                flat_caps.append(val)
        self.expand_graph(sub, nsub, senv)
        args = ((next(iter(env[cond].values())),) if cond is not None else (), tuple(flat_caps))
        new = ng.create_node("call_function", node.target, args, dict(node.kwargs), name=node.name)
        new.meta.update(node.meta)
        env[node] = {(): new}


RULES = {
    "per_tile": _Expander._per_tile,
    "mma_chain": _Expander._mma,
    "reduce_chain": _Expander._reduce,
    "regroup": _Expander._convert,
    "gather_dim": _Expander._gather,
    "loop": _Expander._iterate,
    "loop_result": _Expander._loop_result,
    "region": _Expander._region,
}


def expand(trace: Trace, ctx: PassContext) -> None:
    ex = _Expander(trace, ctx)
    ng = fx.Graph()
    env: dict = {}
    for p in trace.graph.nodes:
        if p.op == "placeholder":
            new = ng.placeholder(p.name)
            new.meta.update(p.meta)
            env[p] = {(): new}
    ex.expand_graph(trace.graph, ng, env)
    trace.graph = ng
    trace.subgraphs = ex.subgraphs
    ctx.index_loops(trace)
