"""IR tier: where ``insert_barriers`` puts the barriers of ``wc.allocate`` buffers (between conflicting
accesses only, before loops and branches rather than inside them, at the top of a loop for the carried
hazard, explicit barriers counted), how ``promote_to_shared`` sizes a user buffer, and that a branch and
the scan reach the MLIR as ``scf.if`` / ``gpu.shuffle up``."""

from __future__ import annotations

import pytest
import torch.fx as fx

import wavec as wc
from tests import control_kernels as ck
from wavec.frontend.constraints import ConstraintSet
from wavec.frontend.ops import Allocate, Barrier, Iterate
from wavec.frontend.ops_control import Conditional
from wavec.passes.context import PassContext
from wavec.passes.pipeline import run_pipeline


def _run(kernel: wc.WaveKernel, subs: dict | None = None):
    trace = kernel.trace()
    ctx = PassContext.build(trace, ConstraintSet(kernel.constraints, subs or {}), "sm_90a")
    run_pipeline(trace, ctx, [], printer=lambda _t: None)
    return trace


def _ops(g: fx.Graph) -> list[str]:
    """Op names of a graph's nodes, accesses as read/write/atomic of their memory (``buf`` for allocations)."""
    out = []
    for n in g.nodes:
        op = n.meta.get("op")
        if op is None:
            continue
        name = op.name
        if name in ("read", "write", "atomic"):
            mem = n.args[0] if name == "read" else n.args[1]
            root = mem.meta.get("capture_of", mem)
            name += "(buf)" if root.meta.get("op") is Allocate else "(global)"
        out.append(name)
    return [x for i, x in enumerate(out) if i == 0 or x != out[i - 1]]  # clones of one access merge


def test_histogram_barriers_between_write_atomic_and_read() -> None:
    ops = _ops(_run(ck.make_histogram(), {ck.E: 64}).graph)
    accesses = [x for x in ops if "(buf)" in x or x == "barrier"]
    assert accesses == ["write(buf)", "barrier", "atomic(buf)", "barrier", "read(buf)"]


def test_exchange_barriers_raw_and_war_only() -> None:
    ops = [x for x in _ops(_run(ck.make_exchange()).graph) if "(buf)" in x or x == "barrier"]
    # write -> read (RAW), read -> write (WAR), write -> read (RAW): three barriers, none elsewhere
    assert ops == ["write(buf)", "barrier", "read(buf)", "barrier", "write(buf)", "barrier", "read(buf)"]


def test_explicit_barrier_counts_and_stays() -> None:
    trace = _run(ck.make_exchange(explicit_barrier=True))
    ops = [x for x in _ops(trace.graph) if "(buf)" in x or x == "barrier"]
    assert ops == ["write(buf)", "barrier", "read(buf)", "barrier", "write(buf)", "barrier", "read(buf)"]
    user = [n for n in trace.graph.nodes if n.meta.get("op") is Barrier and n.name == "barrier"]
    assert user and user[0].meta["loc"].code.strip() == "wc.barrier()"


def test_loop_carried_hazard_puts_a_barrier_at_the_top_of_the_body() -> None:
    trace = _run(ck.make_loop_accumulate())
    root = _ops(trace.graph)
    # the barrier at the top of the body also orders the zero fill before the first iteration's read
    assert "barrier" not in root[: root.index("iterate")]
    loop = next(n for n in trace.graph.nodes if n.meta.get("op") is Iterate)
    body = [x for x in _ops(trace.subgraphs[loop.kwargs["subgraph"]]) if "(buf)" in x or x == "barrier"]
    assert body == ["barrier", "read(buf)", "barrier", "write(buf)"]
    after = root[root.index("iterate") + 1 :]
    assert after.index("barrier") < after.index("read(buf)")  # the last write before the final read


def test_loop_that_only_reads_gets_one_barrier_before_it() -> None:
    K = wc.sym.K

    @wc.wave(ck.make_loop_accumulate().constraints)
    def k(x: wc.Memory[K, ck.X, wc.f32], out: wc.Memory[ck.X, wc.f32]):
        buf = wc.allocate((ck.X,), wc.f32)
        wc.write(wc.Register[ck.X, wc.f32](1.0), buf)

        @wc.iterate(K, init_args=[wc.Register[ck.X, wc.f32](0.0)])
        def body(acc: wc.Register[ck.X, wc.f32]) -> wc.Register[ck.X, wc.f32]:
            return acc + wc.read(buf) * wc.cast(wc.sum(wc.read(x), K), wc.f32)

        wc.write(body, out)

    trace = _run(k)
    root = _ops(trace.graph)
    assert root[root.index("iterate") - 1] == "barrier"
    loop = next(n for n in trace.graph.nodes if n.meta.get("op") is Iterate)
    assert "barrier" not in _ops(trace.subgraphs[loop.kwargs["subgraph"]])


def test_branch_gets_its_barrier_before_it() -> None:
    @wc.wave(ck.histogram_constraints(tile=128))  # one id per lane: a per-thread condition
    def k(ids: wc.Memory[ck.N, wc.i32], out: wc.Memory[ck.N, wc.i32]):
        buf = wc.allocate((ck.E,), wc.i32)
        wc.write(wc.Register[ck.E, wc.i32](0), buf)
        v = wc.read(ids)

        @wc.conditional(v > 3)
        def _() -> None:
            wc.write(wc.read(buf, mapping={ck.E: v}), out)

    trace = _run(k, {ck.E: 64})
    ops = _ops(trace.graph)
    assert ops[ops.index("conditional") - 1] == "barrier"
    cond = next(n for n in trace.graph.nodes if n.meta.get("op") is Conditional)
    assert "barrier" not in _ops(trace.subgraphs[cond.kwargs["subgraph"]])


def test_conflict_inside_one_branch_is_an_error() -> None:
    @wc.wave(ck.histogram_constraints(tile=128))
    def k(ids: wc.Memory[ck.N, wc.i32], out: wc.Memory[ck.E, wc.i32]):
        buf = wc.allocate((ck.E,), wc.i32)
        v = wc.read(ids)

        @wc.conditional(v > 3)
        def _() -> None:
            wc.atomic_add(v * 0 + 1, buf, mapping={ck.E: v})
            wc.write(wc.read(buf, mapping={ck.E: v}), out, mapping={ck.E: v})

    with pytest.raises(wc.WavecError, match="inside a wc.conditional region"):
        _run(k, {ck.E: 64})


def test_barrier_inside_a_branch_is_rejected() -> None:
    @wc.wave(ck.histogram_constraints())
    def k(ids: wc.Memory[ck.N, wc.i32]):
        @wc.conditional(wc.read(ids) > 3)
        def _() -> None:
            wc.barrier()

    with pytest.raises(wc.WavecError, match="barrier inside wc.conditional diverges"):
        k.trace()


def test_user_buffer_is_sized_from_constraints_or_distributed_shape() -> None:
    trace = _run(ck.make_scan(4))
    (buf,) = [n for n in trace.graph.nodes if n.meta.get("op") is Allocate]
    assert buf.kwargs["tile"] == {ck.X: 256} and buf.kwargs["pad"] == 0 and buf.kwargs["stages"] == 1
    assert str(buf.kwargs["base"][ck.X]) == "256*$WG0"


def test_mlir_branch_and_scan() -> None:
    pytest.importorskip("iree.compiler")
    cond = wc.compile(ck.make_masked_store(), {}, target="sm_90a", backend="emulator", cache=False).mlir
    assert "scf.if" in cond and "arith.select" not in cond  # a branch, not a select
    scan = wc.compile(ck.make_scan(4), {}, target="sm_90a", backend="emulator", cache=False).mlir
    assert scan.count("gpu.shuffle up") == 5  # log2(32) steps across the lanes
    assert "memref.atomic_rmw" not in scan
