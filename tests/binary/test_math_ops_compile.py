"""Binary tier: every ``wc.unary`` kind compiles through IREE to a cubin or PTX (sm_80, sm_90) and to
HSACO (gfx942), f32 and f16, and the emitted MLIR holds the kind's MLIR op."""

from __future__ import annotations

import pytest

import wavec as wc
from wavec import Memory
from wavec.frontend.unary_kinds import UNARY_KINDS
from wavec.kernels.elementwise import BLOCK_M, BLOCK_N, M, N, rowwise_constraints

pytest.importorskip("iree.compiler")


@pytest.mark.parametrize("target", ["sm_80", "sm_90", "gfx942"])
@pytest.mark.parametrize("dtype", [wc.f32, wc.f16], ids=str)
@pytest.mark.parametrize("kind", list(UNARY_KINDS))
def test_unary_kind_compiles(kind: str, dtype, target: str) -> None:
    threads = 64 if target.startswith("gfx") else 32

    @wc.wave(rowwise_constraints(threads, 16 // dtype.bytes))
    def unary(a: Memory[M, N, dtype], out: Memory[M, N, dtype]):
        wc.write(wc.unary(kind, wc.read(a)), out)

    backend = "rocm" if target.startswith("gfx") else "cuda"
    subs = {BLOCK_M: 2, BLOCK_N: 2 * threads * 16 // dtype.bytes}
    k = wc.compile(unary, subs, target=target, backend=backend, cache=False)
    assert k.artifact.format in (("hsaco",) if backend == "rocm" else ("cubin", "ptx"))
    assert k.artifact.binary
    nv_exp2 = kind == "exp2" and backend == "cuda"  # ex2.approx instead (half types through f32)
    assert ("llvm.nvvm.ex2.approx.ftz.f" if nv_exp2 else UNARY_KINDS[kind].float_op) in k.mlir
