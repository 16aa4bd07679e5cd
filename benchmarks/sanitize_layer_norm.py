"""Run the LayerNorm of long rows once each, small, for compute-sanitizer: the f16/bf16 one-row-a-workgroup
layout that reads x a second time after the statistics (``rows.make_layer_norm_long(reread=True)``), at a full
tile (8192, 16384) and a masked one (12000), and f32's one tile (with its RMSNorm and softmax; slices, as
contiguous f32 rows past 8192 take ``rows_odd``). ``--odd``: RMSNorm and LayerNorm of odd lengths (``rows_odd``,
1025-16383, and the aligned 12288 / 16384 that contiguous rows past 8192 take there: its layouts, LayerNorm
re-reading its chunks; softmax too), through the gathered and the shifted-table vectors. References: torch's f32 ops on
the device; every output element compared (memcheck reports an unwritten one: the outputs are allocated
uninitialised).

    compute-sanitizer --tool racecheck python -m benchmarks.sanitize_layer_norm [--odd]
    compute-sanitizer --tool memcheck --report-api-errors no python -m benchmarks.sanitize_layer_norm [--odd]

``--f32``: the f32 cases alone; ``--lengths 12288,16384``: the odd path's at those lengths alone.  Prints one
line per case; exits 1 if any output is wrong or unwritten."""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 2)[0])

from wavec.kernels import rows, rows_odd  # noqa: E402
from wavec.kernels.rows import layer_norm, rms_norm, softmax  # noqa: E402

# f32 statistics, one rounding to the dtype: a few of its ulps at |out| ~ 4
TOLERANCE = {torch.bfloat16: 0.1, torch.float16: 0.02}


def _check(label: str, got: torch.Tensor, want: torch.Tensor, tol: float) -> bool:
    err = (got.float() - want).abs().max().item()
    ok = err <= tol
    print(f"{label} max err {err:.3e} {'ok' if ok else 'WRONG'}", flush=True)
    return ok


def _dtypes() -> dict:
    """The dtypes and their tolerances, f32 alone under ``--f32``."""
    every = {**TOLERANCE, torch.float32: 1e-3}
    return {torch.float32: every[torch.float32]} if "--f32" in sys.argv else every


def _lengths() -> list[int]:
    """The odd path's row lengths (aligned ones contiguous: ``OddRules.aligned_elements``), or ``--lengths``'."""
    if "--lengths" in sys.argv:
        return [int(v) for v in sys.argv[sys.argv.index("--lengths") + 1].split(",")]
    return [1025, 2049, 4097, 8191, 12288, 16383, 16384]


def odd() -> int:
    """The odd-length norms: contiguous rows and a slice (pitch n + 8), gathered and table vectors."""
    bad = 0
    for tables in (False, True):
        rows_odd.TABLE_MIN_BYTES = 0 if tables else 1 << 62
        rows._DECIDED.clear()  # (a runner decides its tables when made)
        for dtype, tol in _dtypes().items():
            for n in _lengths():
                for pitch in (n, n + 8):
                    x = (torch.randn(48, pitch, device="cuda", dtype=dtype) + 3)[:, :n]
                    w, b = torch.randn(n, device="cuda", dtype=dtype), torch.randn(n, device="cuda", dtype=dtype)
                    label = f"{str(dtype):<16} {n:>6} pitch {pitch:>6} tables {tables!s:<5}"
                    want = F.layer_norm(x.float(), (n,), w.float(), b.float(), 1e-5)
                    bad += not _check("layer_norm " + label, layer_norm(x, w, b, 1e-5), want, tol)
                    want = F.rms_norm(x.float(), (n,), w.float(), 1e-6)
                    bad += not _check("rms_norm   " + label, rms_norm(x, w, 1e-6), want, tol)
                    if not tables:  # (softmax reads no vectors)
                        want = torch.softmax(x.float(), -1)
                        bad += not _check("softmax    " + label, softmax(x), want, tol / 10)
    return 1 if bad else 0


def main() -> int:
    if "--odd" in sys.argv:
        return odd()
    bad = 0
    for dtype, tol in _dtypes().items():
        for n in (8192, 12000, 16384):
            # f32 past 8192: a slice is one tile (``rows.MAX_TILE_ELEMENTS``), contiguous rows ``rows_odd``'s
            for pitch in (n, n + 8) if dtype == torch.float32 else (n,):
                x = (torch.randn(64, pitch, device="cuda", dtype=dtype) + 3)[:, :n]
                w, b = torch.randn(n, device="cuda", dtype=dtype), torch.randn(n, device="cuda", dtype=dtype)
                label = f"{str(dtype):<16} {n:>6} pitch {pitch:>6}"
                want = F.layer_norm(x.float(), (n,), w.float(), b.float(), 1e-5)
                bad += not _check(f"layer_norm {label}", layer_norm(x, w, b, 1e-5), want, tol)
                if dtype == torch.float32:
                    want = F.rms_norm(x, (n,), w, 1e-6)
                    bad += not _check(f"rms_norm   {label}", rms_norm(x, w, 1e-6), want, tol)
                    want = torch.softmax(x, -1)
                    bad += not _check(f"softmax    {label}", softmax(x), want, tol / 10)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
