"""Binary tier: ``SchedulingConstraint(min_workgroups_per_sm=N)`` puts ``.minnctapersm N`` in the PTX after
``.maxntid``, ptxas then fits N workgroups' registers in the register file (65536 a SM on sm_80 / sm_90),
the emulator computes the same values, and an AMD target refuses it by name."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
import wavec.codegen.ptxas as ptxas_mod
from wavec import Memory, f32
from wavec.codegen.ptxas import find_ptxas
from wavec.errors import ConstraintError
from wavec.kernels.rows import BLOCK_N, M, N, _long_constraints

pytest.importorskip("iree.compiler")


def _rms_norm(bound: int | None, waves: int = 8) -> wc.WaveKernel:
    """An RMSNorm row over ``waves`` waves (the library's ``make_rms_norm_long`` body), 4 runs a lane at 8192
    bf16: 64 registers unbounded (73 before bf16 -> f32 became one shift or mask an element)."""
    sched = [wc.SchedulingConstraint(min_workgroups_per_sm=bound)] if bound else []

    @wc.wave([*_long_constraints(wc.bf16, waves, 32, None), *sched])
    def rms_bounded(
        x: Memory[M, N, wc.bf16], w: Memory[N, wc.bf16], out: Memory[M, N, wc.bf16], eps: wc.Scalar[f32],
        inv_n: wc.Scalar[f32],
    ):  # fmt: skip
        v = wc.where(wc.arange(N) < N, wc.cast(wc.read(x), f32), 0.0)
        r = wc.rsqrt(wc.sum(v * v, N) * inv_n + eps)
        wc.write(wc.cast(v * r * wc.cast(wc.read(w), f32), wc.bf16), out)

    return rms_bounded


@pytest.mark.parametrize("target", ["sm_80", "sm_90a"])
def test_ptx_carries_the_bound(target: str, monkeypatch) -> None:
    monkeypatch.setattr(ptxas_mod, "find_ptxas", lambda: None)  # keep the PTX text
    art = wc.compile(_rms_norm(4), {BLOCK_N: 8192}, target=target, backend="cuda", cache=False).artifact
    assert art.format == "ptx"
    lines = art.binary.decode().splitlines()
    at = [i for i, line in enumerate(lines) if line.startswith(".maxntid")]
    assert len(at) == 1 and lines[at[0]] == ".maxntid 256, 1, 1" and lines[at[0] + 1] == ".minnctapersm 4"


@pytest.mark.skipif(find_ptxas() is None, reason="needs ptxas for register counts")
@pytest.mark.parametrize("bound", [5, 6])
def test_ptxas_fits_the_workgroups(bound: int) -> None:
    free = wc.compile(_rms_norm(None), {BLOCK_N: 8192}, target="sm_90a", backend="cuda", cache=False)
    tight = wc.compile(_rms_norm(bound), {BLOCK_N: 8192}, target="sm_90a", backend="cuda", cache=False)
    threads = tight.artifact.metadata.block[0]
    cap = 65536 // (bound * threads) // 8 * 8  # registers are allotted 8 a thread at a time
    assert free.artifact.metadata.registers > cap  # (the bound must bind for this test to say anything)
    assert tight.artifact.metadata.registers <= cap


def test_emulator_values_unchanged() -> None:
    kernels = [wc.compile(_rms_norm(b, waves=2), {BLOCK_N: 512}, backend="emulator", cache=False) for b in (None, 2)]
    x, w = torch.randn(3, 500).bfloat16(), torch.randn(500).bfloat16()
    outs = []
    for k in kernels:
        out = torch.full_like(x, float("nan"))
        k(x, w, out, 1e-6, 1.0 / 500)
        outs.append(out)
    ref = torch.nn.functional.rms_norm(x.double(), (500,), w.double(), 1e-6)
    assert not outs[1].isnan().any()
    torch.testing.assert_close(outs[1].double(), ref, rtol=1e-2, atol=1e-2)
    assert torch.equal(outs[0], outs[1])


def test_amd_target_refuses_it() -> None:
    with pytest.raises(ConstraintError, match=r"min_workgroups_per_sm=2.*NVIDIA.*gfx942"):
        wc.compile(_rms_norm(2), {BLOCK_N: 8192}, target="gfx942", backend="cuda", cache=False)
