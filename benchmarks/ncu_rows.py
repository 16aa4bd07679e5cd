"""Library row ops (``rms_norm``, ``layer_norm``, ``softmax``) inside one profiler range, for Nsight Compute
to say where an odd row length loses against an aligned one (issue #20: odd LayerNorm below 0.80 of copy):

    ncu --profile-from-start off --section SpeedOfLight --section MemoryWorkloadAnalysis \\
        --section WarpStateStats --section Occupancy --section LaunchStats \\
        python benchmarks/ncu_rows.py layer_norm:1025:float16 layer_norm:1024:float16 rms_norm:16383:bfloat16

Each spec ``kind:N:dtype[:P]`` (``P``: x a slice ``[:, :N]`` of rows ``P`` long) runs on rows of
``rows_sweep.BYTES`` (the sweeps' inputs), is compiled, checked against torch and warmed up before the range
opens, then launched once inside it (the shifted tables of large odd norms are two small copy kernels before
it; the torch references run before the range).  Prints each spec's rows, the copy's time and the error.
"""

from __future__ import annotations

import os
import sys

import torch

from wavec.kernels import rows

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rows_sweep import row_inputs  # noqa: E402  (the sweeps' inputs)

F = torch.nn.functional


def call(kind: str, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """wavec's ``kind`` on x."""
    if kind == "softmax":
        return rows.softmax(x)
    if kind == "rms_norm":
        return rows.rms_norm(x, w, 1e-6)
    if kind == "layer_norm":
        return rows.layer_norm(x, w, b, 1e-5)
    raise SystemExit(f"kind {kind!r}: expected softmax, rms_norm or layer_norm")


def reference(kind: str, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch's ``kind`` on x in f32."""
    n = x.shape[-1]
    if kind == "softmax":
        return torch.softmax(x.float(), -1)
    if kind == "rms_norm":
        return F.rms_norm(x.float(), (n,), w.float(), 1e-6)
    return F.layer_norm(x.float(), (n,), w.float(), b.float(), 1e-5)


def main() -> None:
    specs = sys.argv[1:] or ["layer_norm:1025:float16", "layer_norm:1024:float16"]
    cases = []
    for spec in specs:
        kind, n, dt, *pitch = spec.split(":")
        x, w, b, _, t_copy = row_inputs(int(n), getattr(torch, dt))
        if pitch:  # the same rows as a slice (a drifting one when P - N is not a multiple of 16 bytes)
            x = torch.randn(x.shape[0], int(pitch[0]), device="cuda", dtype=x.dtype)[:, : int(n)]
        got, want = call(kind, x, w, b), reference(kind, x, w, b)
        err = ((got.float() - want).abs().max() / want.abs().max()).item()
        print(f"{spec}: rows {x.shape[0]}, copy {t_copy:.1f} us, max rel err {err:.2e}", flush=True)
        cases.append((kind, x, w, b))
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for kind, x, w, b in cases:  # (only wavec's launches: the references ran before the range)
        call(kind, x, w, b)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
