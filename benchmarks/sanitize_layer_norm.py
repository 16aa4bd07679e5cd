"""Run the f16/bf16 LayerNorm of long rows once each, small, for compute-sanitizer: the one-row-a-workgroup
layout that reads x a second time after the statistics (``rows.make_layer_norm_long(reread=True)``), at a
full tile (8192, 16384) and a masked one (12000).  References: torch's f32 LayerNorm on the device; every
output element compared (memcheck reports an unwritten one: ``layer_norm`` allocates it uninitialised).

    compute-sanitizer --tool racecheck python -m benchmarks.sanitize_layer_norm
    compute-sanitizer --tool memcheck --report-api-errors no python -m benchmarks.sanitize_layer_norm

Prints one line per case; exits 1 if any output is wrong or unwritten."""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 2)[0])

from wavec.kernels.rows import layer_norm  # noqa: E402

# f32 statistics, one rounding to the dtype: a few of its ulps at |out| ~ 4
TOLERANCE = {torch.bfloat16: 0.1, torch.float16: 0.02}


def main() -> int:
    bad = 0
    for dtype, tol in TOLERANCE.items():
        for n in (8192, 12000, 16384):
            x = torch.randn(64, n, device="cuda", dtype=dtype) + 3
            w, b = torch.randn(n, device="cuda", dtype=dtype), torch.randn(n, device="cuda", dtype=dtype)
            got = layer_norm(x, w, b, 1e-5)
            want = F.layer_norm(x.float(), (n,), w.float(), b.float(), 1e-5)
            err = (got.float() - want).abs().max().item()
            ok = err <= tol
            bad += not ok
            print(f"{str(dtype):<16} {n:>6} max err {err:.3e} {'ok' if ok else 'WRONG'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
