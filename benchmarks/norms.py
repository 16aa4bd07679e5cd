"""RMSNorm / LayerNorm bandwidth: wavec beside torch eager in the same run (inputs rotated past L2).

    python benchmarks/norms.py

The configuration (BLOCK_M rows per workgroup x waves per row) is picked per shape from CONFIGS, the
fastest in this run.
"""

import itertools

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import wavec as wc
from wavec.kernels.norms import BLOCK_M, N, make_layernorm, make_rmsnorm


def _torch_rms(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)


CONFIGS = [(4, 1), (8, 1), (16, 1), (2, 2), (4, 2), (1, 4), (2, 4), (4, 4)]


def main() -> None:
    x0 = torch.empty(2**28, device="cuda")
    y0 = torch.empty_like(x0)
    bw = 2 * x0.numel() * 4 / (do_bench(lambda: y0.copy_(x0), return_mode="median") * 1e-3)
    print(f"device copy {bw / 1e12:.2f} TB/s")
    print(
        f"{'op':9} {'rows':>6} {'N':>5} {'rows x w':>7} {'wavec GB/s':>11} {'torch GB/s':>11} {'x torch':>8} "
        f"{'of copy':>8}"
    )
    for rows, n in ((32768, 2048), (65536, 1024), (16384, 4096), (32768, 4096)):
        sets = [
            torch.randn(rows, n, device="cuda", dtype=torch.float16)
            for _ in range(max(1, 100 * 2**20 // (rows * n * 2)))
        ]
        w, b = torch.randn(n, device="cuda", dtype=torch.float16), torch.randn(n, device="cuda", dtype=torch.float16)
        out = torch.empty_like(sets[0])
        it = itertools.cycle(sets)
        for name, make, ref in (
            ("rmsnorm", make_rmsnorm, lambda x: _torch_rms(x, w)),
            ("layernorm", make_layernorm, lambda x: F.layer_norm(x, (n,), w, b)),
        ):
            args = (w,) if name == "rmsnorm" else (w, b)
            t_w, bm, wpr = min(
                (do_bench(lambda k=k: k(next(it), *args, out), return_mode="median"), bm, wpr)
                for bm, wpr in CONFIGS
                for k in [wc.compile(make(n, waves_per_row=wpr), {BLOCK_M: bm, N: n}, backend="cuda")]
            )
            t_t = do_bench(lambda: ref(next(it)), return_mode="median")
            nbytes = 2 * rows * n * 2
            print(
                f"{name:9} {rows:6d} {n:5d} {f'{bm}x{wpr}':>7} {nbytes / t_w / 1e6:11.0f} {nbytes / t_t / 1e6:11.0f} "
                f"{t_t / t_w:8.2f} {nbytes / (t_w * 1e-3) / bw:8.2f}"
            )


if __name__ == "__main__":
    main()
