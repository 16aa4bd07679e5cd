"""IR tier + emulator: ``prefetch_fragments`` (the next iteration's first mma.sync fragments read during the
last K step, the stage wait and barrier moved before that step), against its docstring's guarantees."""

import pytest
import sympy
from test_ir_shared_passes import BK, GROUP, NV, STAGES, SUBS, Compiled, K, M, N, _check_gemm, _gemm

import wavec as wc
from wavec.frontend.ops import MMA, AsyncCommit, AsyncWait, Barrier, Iterate, Read
from wavec.indexing.symbols import induction_symbol, stage_symbol

BM, BN = wc.sym.BLOCK_M, wc.sym.BLOCK_N


def _constraints(prefetch: bool) -> list:
    return [
        wc.WorkgroupConstraint(M, BM, 0),
        wc.WorkgroupConstraint(N, BN, 1),
        wc.WaveConstraint(M, BM / 2),
        wc.WaveConstraint(N, BN / 2),
        wc.TilingConstraint(K, BK),
        NV,
        wc.SchedulingConstraint(num_stages=STAGES, group_size=GROUP, prefetch_fragments=prefetch),
    ]


gemm_pf = _gemm(_constraints(True))
gemm_plain = _gemm(_constraints(False))


def _compiled(kernel, stages: int, bk: int, emit: bool = False) -> Compiled:
    return Compiled(kernel, {**SUBS, STAGES: stages, BK: bk}, "sm_90", emit)


def _loop(c: Compiled):
    it = next(n for n in c.trace.graph.nodes if n.meta.get("op") is Iterate)
    return it, c.trace.subgraphs[it.kwargs["subgraph"]]


def _step(n) -> int:
    return n.meta["key"][-1][1]


@pytest.mark.parametrize("stages,bk", [(2, 16), (3, 32), (4, 64)])
def test_body_carries_step0_fragments_and_waits_before_the_last_step(stages: int, bk: int) -> None:
    c = _compiled(gemm_pf, stages, bk)
    it, body = _loop(c)
    nodes = [n for n in body.nodes if n.op != "placeholder"]
    pos = {n: i for i, n in enumerate(nodes)}
    mmas = [n for n in nodes if n.meta.get("op") is MMA]
    last = max(_step(m) for m in mmas)
    assert last == bk // 16 - 1
    iter_args = [p for p in body.nodes if p.op == "placeholder" and p.meta.get("role") == "iter_arg"]
    frags = [p for p in iter_args if p.name.startswith("frag_")]
    accs = [p for p in iter_args if not p.name.startswith("frag_")]
    assert iter_args == accs + frags and len(frags) == 6  # 2 A + 4 B fragments of a 32x32 wave tile
    # step 0 multiplies the carried fragments
    assert all(a in frags for m in mmas if _step(m) == 0 for a in m.args[:2])
    # commit, then the wait, its barrier, the next iteration's reads, then the last step's first mma
    wait = next(n for n in nodes if n.meta.get("op") is AsyncWait)
    commit = next(n for n in nodes if n.meta.get("op") is AsyncCommit)
    first_last = min(pos[m] for m in mmas if _step(m) == last)
    assert pos[commit] < pos[wait] and nodes[pos[wait] + 1].meta.get("op") is Barrier
    nxt = nodes[pos[wait] + 2 : first_last]
    assert len(nxt) == len(frags) and all(n.meta.get("op") is Read for n in nxt)
    iv, stage = induction_symbol(K), stage_symbol(K)
    for r in nxt:
        assert sympy.simplify(r.meta["stage"] - sympy.Mod(stage + 1, stages)) == 0
        assert r.meta["iv_subs"] == {iv: iv + 1}
    # every other shared read (steps 1..last) comes before the wait: the stage is free once all pass it;
    # none precedes the first mma unless step 0 is also the last
    if last:
        assert not any(n.meta.get("op") is Read for n in nodes[: min(pos[m] for m in mmas)])
    others = [n for n in nodes if n.meta.get("op") is Read and n not in nxt]
    assert all(pos[r] < pos[wait] for r in others)
    out = next(n for n in body.nodes if n.op == "output").args[0]
    assert list(out[len(accs) :]) == nxt
    # the root graph: wait, barrier, then the first iteration's fragments from stage 0, fed as inits
    root = list(c.trace.graph.nodes)
    inits = it.args[0][len(accs) :]
    assert len(inits) == len(frags)
    first = root.index(inits[0])
    assert root[first - 2].meta.get("op") is AsyncWait and root[first - 1].meta.get("op") is Barrier
    assert root[first - 2].kwargs["pending"] == wait.kwargs["pending"] == stages - 2
    assert all(int(r.meta["stage"]) == 0 and r.meta["iv_subs"] == {iv: 0} for r in inits)


def test_off_by_default_and_without_a_pipeline() -> None:
    plain = _compiled(gemm_plain, 3, 32)
    _it, body = _loop(plain)
    assert not any(p.name.startswith("frag_") for p in body.nodes if p.op == "placeholder")
    assert "prefetch_fragments" in plain.after
    assert plain.after["prefetch_fragments"] == plain.after["schedule_loops"]
    one = _compiled(gemm_pf, 1, 32)  # no cp.async pipeline: nothing to move
    assert one.after["prefetch_fragments"] == one.after["schedule_loops"]


def test_mlir_carries_the_fragments() -> None:
    c = _compiled(gemm_pf, 3, 32, emit=True)
    loop = next(line for line in c.mlir.splitlines() if "scf.for" in line)
    # 8 accumulators + 6 fragments + the stage index
    assert loop.count("%arg") >= 15 and "vector<8xf16>" in loop


@pytest.mark.parametrize("stages,bk", [(2, 16), (3, 32), (4, 64)])
def test_emulator_numerics(stages: int, bk: int) -> None:
    """Ragged M, N, K (a partial last K tile, fewer K tiles than stages, one K tile) against float64."""
    pytest.importorskip("iree.compiler")
    k = wc.compile(gemm_pf, {**SUBS, STAGES: stages, BK: bk}, target="sm_90", backend="emulator", cache=False)
    _check_gemm(k, 70, 90, 40)
    _check_gemm(k, 200, 66, 72, seed=1)
    _check_gemm(k, 64, 64, 8, seed=2)


def test_emulator_would_catch_reads_before_the_wait(monkeypatch) -> None:
    """The emulator lands cp.async data at the wait and tracks shared reads per barrier interval: the
    prefetched reads placed before the wait are a race it reports (so the numerics test above can fail)."""
    pytest.importorskip("iree.compiler")
    import wavec.passes.prefetch_fragments as pf

    real = pf._prefetch

    def broken(trace, ctx, iterate):
        real(trace, ctx, iterate)
        body = trace.subgraphs[iterate.kwargs["subgraph"]]
        wait = next(n for n in body.nodes if n.meta.get("op") is AsyncWait)
        last_first = wait
        while last_first.meta.get("op") is not MMA:
            last_first = last_first.next
        last_first.append(wait)  # after the prefetched reads (and the last step's first mma)

    monkeypatch.setattr(pf, "_prefetch", broken)
    k = wc.compile(gemm_pf, {**SUBS, STAGES: 3, BK: 32}, target="sm_90", backend="emulator", cache=False)
    with pytest.raises(wc.WavecError, match="shared-memory race"):
        _check_gemm(k, 130, 90, 128)


def test_stage_offsets_lower_to_a_select_not_a_remainder() -> None:
    """``(stage + c) % S`` of the carried stage is a compare and a select (a 64-bit remainder by 3 cost
    ptxas ~9 instructions per use inside the K loop)."""
    c = _compiled(gemm_pf, 3, 32, emit=True)
    loop = c.mlir[c.mlir.index("scf.for") :]
    body = loop[: loop.index("scf.yield")]
    assert "arith.remui" not in body or all("%c3" not in line for line in body.splitlines() if "arith.remui" in line)
    assert "arith.cmpi uge" in body
