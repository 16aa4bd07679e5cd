"""Binary tier for flash attention: the default configurations assemble for sm_90 with no spills, the
inner loop uses ldmatrix (plain for K, .trans for V), mma.sync and ex2.approx, and converts P to the A
operand in registers (no shared-memory round trip)."""

from __future__ import annotations

import pytest

import wavec as wc
import wavec.codegen.ptxas as ptxas_mod
from wavec.codegen.ptxas import find_ptxas
from wavec.kernels.attention import CONFIGS, attention_config, make_attention

pytest.importorskip("iree.compiler")
HAS_PTXAS = find_ptxas() is not None


@pytest.mark.skipif(not HAS_PTXAS, reason="no ptxas available (WAVEC_PTXAS, CUDA_HOME, PATH or the nvcc wheel)")
@pytest.mark.parametrize("head_dim,seq_q,causal", [(64, None, False), (64, None, True), (128, None, False),
                                                   (128, None, True), (64, 64, False), (128, 32, True)])
def test_heuristic_configs_have_no_spills(head_dim: int, seq_q, causal: bool) -> None:
    subs, waves = attention_config(head_dim, seq_q)
    k = wc.compile(make_attention(wc.f16, "bhsd", causal, waves), subs, target="sm_90", backend="cuda",
                   cache=False)
    m = k.metadata
    assert m.spills == 0 and m.registers <= 255, (m.registers, m.spills)
    assert m.block == (32 * waves, 1, 1)


def test_ptx_inner_loop(monkeypatch) -> None:
    monkeypatch.setattr(ptxas_mod, "find_ptxas", lambda: None)
    subs, waves = attention_config(128)
    k = wc.compile(make_attention(wc.bf16, "bshd", False, waves), subs, target="sm_90", backend="cuda",
                   cache=False)
    ptx = k.artifact.binary.decode()
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in ptx
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in ptx
    assert "ex2.approx.ftz.f32" in ptx
    assert "cp.async.cg.shared.global" in ptx
    assert k.mlir.count("memref.alloc") == 2  # K and V tiles (shared by both loops): P stays in registers


@pytest.mark.skipif(not HAS_PTXAS, reason="no ptxas available (WAVEC_PTXAS, CUDA_HOME, PATH or the nvcc wheel)")
@pytest.mark.parametrize("head_dim,config", [(d, c) for d, cs in CONFIGS.items() for c in cs[1:]])
def test_sweep_candidates_have_no_spills(head_dim: int, config: tuple) -> None:
    """Every tile ``benchmarks/attention.py --wavec-configs sweep`` tries assembles without spills."""
    subs, waves = attention_config(head_dim, config=config)
    k = wc.compile(make_attention(wc.bf16, "bshd", False, waves), subs, target="sm_90", backend="cuda", cache=False)
    assert k.metadata.spills == 0, (config, k.metadata.registers, k.metadata.spills)
