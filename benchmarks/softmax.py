"""Row softmax bandwidth: wavec beside torch.softmax in the same run (H100/H200).

python benchmarks/softmax.py
"""

import itertools

import torch
from triton.testing import do_bench

import wavec as wc
from wavec.kernels.row_softmax import BLOCK_M, N, make_softmax


def main() -> None:
    x0 = torch.empty(2**28, device="cuda")
    y0 = torch.empty_like(x0)
    bw = 2 * x0.numel() * 4 / (do_bench(lambda: y0.copy_(x0), return_mode="median") * 1e-3)
    print(f"device copy {bw / 1e12:.2f} TB/s")
    print(f"{'rows':>6} {'N':>6} {'rows x w':>8} {'wavec GB/s':>11} {'torch GB/s':>11} {'x torch':>8} {'of copy':>8}")
    for rows, n in ((4096, 1024), (16384, 1024), (8192, 4096), (32768, 2048), (65536, 1024)):
        # several input sets when one fits in L2 (50 MB), so no repetition reads from L2
        sets = [
            torch.randn(rows, n, device="cuda", dtype=torch.float16)
            for _ in range(max(1, 100 * 2**20 // (rows * n * 2)))
        ]
        out = torch.empty_like(sets[0])
        it = itertools.cycle(sets)
        t_t = do_bench(lambda: torch.softmax(next(it), dim=-1), return_mode="median")
        best = None
        for bm, wpr in ((4, 1), (8, 1), (16, 1), (2, 2), (4, 2), (1, 4), (2, 4), (4, 4)):
            if n // wpr < 256:  # a wave covers at least one 16-byte run per lane
                continue
            k = wc.compile(make_softmax(wc.f16, waves_per_row=wpr), {BLOCK_M: bm, N: n}, backend="cuda")
            t_w = do_bench(lambda: k(next(it), out), return_mode="median")
            best = min(best or (t_w, f"{bm}x{wpr}"), (t_w, f"{bm}x{wpr}"))
        t_w, bm = best
        nbytes = 2 * rows * n * 2
        print(
            f"{rows:6d} {n:6d} {bm:>8} {nbytes / t_w / 1e6:11.0f} {nbytes / t_t / 1e6:11.0f} {t_t / t_w:8.2f} "
            f"{nbytes / (t_w * 1e-3) / bw:8.2f}"
        )


if __name__ == "__main__":
    main()
