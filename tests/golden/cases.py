"""Golden MLIR: the emitted module of every library kernel configuration and example kernel, per target.

The renovation of issue 18 must not change what wavec emits.  ``emit(case)`` runs the pass pipeline and
the emitter (no IREE), and ``canonical`` renames SSA values by first appearance, so the golden files
compare modulo SSA names.  Regenerate after an intended change of the emitted code with
``python -m tests.golden.cases --write`` and review the diff.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import pathlib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass

import wavec as wc
from wavec.kernels import attention as att
from wavec.kernels import elementwise as ew
from wavec.kernels import gemm as gm
from wavec.kernels import norms
from wavec.kernels import row_softmax as softmax
from wavec.tuning.plan import GemmRequest, mma_sync_plan, plan_matmul

GOLDEN_DIR = pathlib.Path(__file__).parent / "mlir"
EXAMPLES = pathlib.Path(__file__).parents[2] / "examples"


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], tuple]  # () -> (WaveKernel, subs)
    target: str


def _example(file: str, attr: str, subs_of: Callable[[object], dict]) -> Callable[[], tuple]:
    def build():
        sys.path.insert(0, str(EXAMPLES))
        try:
            spec = importlib.util.spec_from_file_location(f"golden_{file[:-3]}", EXAMPLES / file)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        finally:
            sys.path.remove(str(EXAMPLES))
        return subs_of(mod)(attr, mod)

    return build


def _gemm(dtype, m: int, n: int, k: int, target: str, prefetch: bool = True, out=wc.f32) -> Callable[[], tuple]:
    def build():
        plan = mma_sync_plan(m, n, k, device="H100").with_flags(prefetch_fragments=prefetch)
        return gm.build_gemm(plan, dtype, out, target), plan.subs

    return build


def _wgmma(dtype, m: int, n: int, k: int, async_copy: str = "auto", out=None) -> Callable[[], tuple]:
    def build():
        plan = plan_matmul(m, n, k, GemmRequest("wgmma", async_copy), device="H100")
        return gm.build_gemm(plan, dtype, out or dtype, "sm_90a"), plan.subs

    return build


def _splitk(dtype, m: int, n: int, k: int) -> Callable[[], tuple]:
    def build():
        plan = plan_matmul(m, n, k, GemmRequest(split="auto"), device="H100")
        return gm.build_gemm(plan, dtype), plan.subs

    return build


def _attention(
    dtype, layout: str, causal: bool, head_dim: int, mma: str, seq_q: int | None = None
) -> Callable[[], tuple]:
    def build():
        subs, waves = att.attention_config(head_dim, seq_q, None, mma, causal)
        return att.make_attention(dtype, layout, causal, waves, mma, split_epilogue=att.SPLIT_EPILOGUE[mma]), subs

    return build


def _cases() -> list[Case]:
    f16, bf16 = wc.f16, wc.bf16
    cases = [
        Case("copy_f16", lambda: (ew.make_copy(f16), ew.DEFAULT_SUBS), "sm_90"),
        Case("copy_f16_gfx942", lambda: (ew.make_copy(f16, 64), ew.DEFAULT_SUBS), "gfx942"),
        Case("scale_shift_f16", lambda: (ew.make_scale_shift(f16), ew.DEFAULT_SUBS), "sm_80"),
        Case("softmax_f16_1024", lambda: (softmax.make_softmax(f16), {softmax.BLOCK_M: 4, softmax.N: 1024}), "sm_90"),
        Case(
            "softmax_bf16_4096_w4",
            lambda: (softmax.make_softmax(bf16, waves_per_row=4), {softmax.BLOCK_M: 1, softmax.N: 4096}),
            "sm_90",
        ),
        Case(
            "softmax_f16_1024_gfx942",
            lambda: (softmax.make_softmax(f16, 64), {softmax.BLOCK_M: 4, softmax.N: 1024}),
            "gfx942",
        ),
        Case(
            "rmsnorm_f16_4096_w4",
            lambda: (norms.make_rmsnorm(4096, f16, waves_per_row=4), {norms.BLOCK_M: 1, norms.N: 4096}),
            "sm_90",
        ),
        Case(
            "layernorm_bf16_1024",
            lambda: (norms.make_layernorm(1024, bf16), {norms.BLOCK_M: 4, norms.N: 1024}),
            "sm_80",
        ),
        Case("gemm_f16_4096", _gemm(f16, 4096, 4096, 4096, "sm_90"), "sm_90"),
        Case("gemm_bf16_2048x5120x5120_f16out", _gemm(bf16, 2048, 5120, 5120, "sm_90", out=bf16), "sm_90"),
        Case("gemm_f16_512_noprefetch", _gemm(f16, 512, 512, 512, "sm_80", prefetch=False), "sm_80"),
        Case("gemm_f16_decode", _gemm(f16, 1, 4096, 4096, "sm_90"), "sm_90"),
        Case("gemm_f16_ragged", _gemm(f16, 1000, 333, 200, "sm_90"), "sm_90"),
        Case("gemm_f16_gfx942", _gemm(f16, 1024, 1024, 1024, "gfx942"), "gfx942"),
        Case("gemm_splitk_f16", _splitk(f16, 1, 4096, 4096), "sm_90"),
        Case("splitk_reduce_f16", lambda: (gm.make_splitk_reduce(f16, vec=4), {gm.S: 8, gm.BLOCK_P: 512}), "sm_90"),
        Case("wgmma_f16_4096", _wgmma(f16, 4096, 4096, 4096), "sm_90a"),
        Case("wgmma_bf16_8192x8192x1024", _wgmma(bf16, 8192, 8192, 1024), "sm_90a"),
        Case("wgmma_f16_2048x1280x8192", _wgmma(f16, 2048, 1280, 8192), "sm_90a"),
        Case("wgmma_f16_1024", _wgmma(f16, 1024, 1024, 1024), "sm_90a"),
        Case("wgmma_f16_64x4096x4096", _wgmma(f16, 64, 4096, 4096), "sm_90a"),
        Case("wgmma_f16_4096_cpasync_f32out", _wgmma(f16, 4096, 4096, 4096, "cp.async", wc.f32), "sm_90a"),
        Case("attn_f16_bhsd_d128", _attention(f16, "bhsd", False, 128, "mma_sync"), "sm_90"),
        Case("attn_bf16_bshd_d64_causal", _attention(bf16, "bshd", True, 64, "mma_sync"), "sm_80"),
        Case("attn_f16_bhsd_d128_short", _attention(f16, "bhsd", False, 128, "mma_sync", seq_q=32), "sm_90"),
        Case("attn_wgmma_f16_d128", _attention(f16, "bhsd", False, 128, "wgmma"), "sm_90a"),
        Case("attn_wgmma_bf16_d128_causal_long", _attention(bf16, "bhsd", True, 128, "wgmma", 8192), "sm_90a"),
        Case("attn_wgmma_f16_d64_causal_bshd", _attention(f16, "bshd", True, 64, "wgmma"), "sm_90a"),
        Case("attn_wgmma_f16_d128_short", _attention(f16, "bhsd", False, 128, "wgmma", seq_q=64), "sm_90a"),
    ]
    ex = [
        ("01_copy", "sm_90", lambda: (ew.make_copy(f16), ew.DEFAULT_SUBS)),
        (
            "02_elementwise",
            "sm_90",
            _example(
                "02_elementwise.py",
                "scale_shift",
                lambda m: lambda a, mod: (getattr(mod, a), {mod.BLOCK_M: 4, mod.BLOCK_N: 256}),
            ),
        ),
        (
            "03_gemm",
            "sm_90",
            _example(
                "03_gemm.py", "gemm", lambda m: lambda a, mod: (getattr(mod, a), {mod.BM: 64, mod.BN: 64, mod.BK: 32})
            ),
        ),
        (
            "04_softmax",
            "sm_90",
            _example(
                "04_softmax.py", "softmax", lambda m: lambda a, mod: (getattr(mod, a), {mod.BLOCK_M: 4, mod.N: 1024})
            ),
        ),
        (
            "06_attention",
            "sm_90",
            _example(
                "06_attention.py",
                "attention",
                lambda m: (
                    lambda a, mod: (
                        wc.wave(mod.constraints)(getattr(mod, a)),
                        {mod.BLOCK_M: 64, mod.BLOCK_N: 64, mod.D: 64},
                    )
                ),
            ),
        ),
        (
            "06_attention_hopper",
            "sm_90a",
            _example(
                "06_attention.py",
                "attention",
                lambda m: (
                    lambda a, mod: (wc.wave(mod.hopper)(getattr(mod, a)), {mod.BLOCK_M: 64, mod.BLOCK_N: 64, mod.D: 64})
                ),
            ),
        ),
        (
            "07_gemm_hopper",
            "sm_90a",
            _example(
                "07_gemm_hopper.py",
                "gemm",
                lambda m: lambda a, mod: (getattr(mod, a), {mod.BM: 128, mod.BN: 64, mod.BK: 64}),
            ),
        ),
    ]
    cases += [Case(f"example_{n}", b, t) for n, t, b in ex]
    return cases


CASES = _cases()


def emit(case: Case) -> str:
    """The emitted MLIR text of ``case`` (pass pipeline and emitter, no IREE)."""
    from wavec.codegen.emitter import emit_kernel
    from wavec.frontend.constraints import ConstraintSet
    from wavec.passes.context import PassContext
    from wavec.passes.pipeline import run_pipeline
    from wavec.target import get_target

    kernel, subs = case.build()
    trace = kernel.trace()
    cs = ConstraintSet(kernel.constraints, dict(subs))
    ctx = PassContext.build(trace, cs, case.target)
    run_pipeline(trace, ctx)
    text, _ = emit_kernel(trace, ctx, get_target(case.target))
    return text


_SSA = re.compile(r"%[A-Za-z_0-9]+(?:#\d+)?|\^bb\d+")


def canonical(text: str) -> str:
    """``text`` with SSA values and block labels renamed in order of first appearance."""
    names: dict[str, str] = {}

    def sub(m: re.Match) -> str:
        tok = m.group(0)
        if tok not in names:
            names[tok] = f"%v{len(names)}" if tok.startswith("%") else f"^b{len(names)}"
        return names[tok]

    return _SSA.sub(sub, text)


def golden_path(case: Case) -> pathlib.Path:
    return GOLDEN_DIR / f"{case.name}.mlir.gz"


def read_golden(case: Case) -> str | None:
    path = golden_path(case)
    return gzip.decompress(path.read_bytes()).decode() if path.exists() else None


def write_golden(case: Case, text: str) -> None:
    # mtime=0: the same text gives the same bytes, so an unchanged kernel leaves no diff
    golden_path(case).write_bytes(gzip.compress(text.encode(), compresslevel=9, mtime=0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--write", action="store_true", help="rewrite the golden files")
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    GOLDEN_DIR.mkdir(exist_ok=True)
    for case in CASES:
        if args.names and case.name not in args.names:
            continue
        text = canonical(emit(case))
        if args.write:
            write_golden(case, text)
        same = read_golden(case) == text
        print(f"{case.name:40s} {len(text):8d} {'same' if same else 'DIFFERENT'}")


if __name__ == "__main__":
    main()
