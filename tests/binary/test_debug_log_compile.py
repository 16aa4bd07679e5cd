"""Binary tier of ``wc.debug_log``: the logging GEMM (mma.sync, wgmma, MFMA) and the element-wise kernel
compile for sm_80, sm_90a and gfx942; each log is an output binding after the kernel's own tensors, its
iteration slots a compile-time size, and the per-iteration store sits in an ``scf.if`` on the loop's
induction variable."""

from __future__ import annotations

import pytest

import wavec as wc
from tests import debug_log_kernels as dk
from wavec.kernels import gemm as gm
from wavec.kernels.elementwise import BLOCK_M, BLOCK_N

pytest.importorskip("iree.compiler")
SUBS = {gm.BLOCK_M: 64, gm.BLOCK_N: 64, gm.BLOCK_K: 32, gm.NUM_STAGES: 2, gm.GROUP_M: 1}


def _backend(target: str) -> str:
    return "rocm" if target.startswith("gfx") else "cuda"


@pytest.mark.parametrize("target,threads,mma,waves", dk.TARGETS, ids=[t[0] for t in dk.TARGETS])
def test_logging_gemm_compiles(target: str, threads: int, mma, waves) -> None:
    wgmma = waves == (1, 1)
    kernel = dk.make_gemm(threads, mma, 3, waves, log_a=not wgmma)
    k = wc.compile(kernel, SUBS, target=target, backend=_backend(target), cache=False)
    assert k.artifact.binary
    args = k.metadata.args
    hidden = [a for a in args if a.name.startswith("debug_log_")]
    assert [a.name for a in args[: len(args) - len(hidden)]] == ["a", "b", "c"]
    assert all(a.is_output for a in hidden) and len(hidden) == (1 if wgmma else 2)
    acc = hidden[-1]
    assert acc.dtype == "f32" and acc.shape[0] not in ("M", "N") and acc.shape[1:] == ("M", "N")
    assert (acc.shape[0], 3) in k.metadata.static_symbols or acc.shape[0] == 3
    assert k.metadata.signature == ("a", "b", "c")
    assert "scf.if" in k.mlir
    assert [log.label for log in k.debug] == (["acc"] if wgmma else ["a", "acc"])


@pytest.mark.parametrize("target", ["sm_80", "sm_90a", "gfx942"])
def test_logging_elementwise_compiles(target: str) -> None:
    threads = 64 if target.startswith("gfx") else 32
    subs = {BLOCK_M: 1, BLOCK_N: 4 * threads}
    k = wc.compile(dk.make_core({}, threads), subs, target=target, backend=_backend(target), cache=False)
    assert k.artifact.binary and len(k.debug) == 4
    assert [a.name for a in k.metadata.args][:3] == ["a", "b", "c"]
