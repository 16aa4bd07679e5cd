"""Where a ``moe_align_block_size`` call spends its time (H100): the call as a user makes it, the same
work replayed from a CUDA graph (GPU time plus a graph launch), and the host's share (cProfile of 300
calls, top entries).  ``python benchmarks/moe_align_probe.py``"""

from __future__ import annotations

import cProfile
import pstats
import time

import torch
import triton.testing

from wavec.kernels.moe_align import moe_align_block_size


def _us(fn) -> float:
    return 1000 * triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def _graph(fn) -> torch.cuda.CUDAGraph:
    g, s = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    with torch.cuda.stream(s):
        fn()
        torch.cuda.synchronize()
        with torch.cuda.graph(g):
            fn()
    torch.cuda.synchronize()
    return g


def main() -> None:
    print("T E B | call us | graph replay us | host us per call")
    for t, e, b in [(1, 8, 16), (256, 64, 16), (256, 256, 16), (256, 512, 64)]:
        ids = torch.randint(0, e, (t, 8), dtype=torch.int32, device="cuda")
        fn = lambda: moe_align_block_size(ids, e, b)  # noqa: E731
        g = _graph(fn)
        t0 = time.perf_counter()
        for _ in range(300):
            fn()
        host = (time.perf_counter() - t0) / 300 * 1e6
        torch.cuda.synchronize()
        print(f"{t} {e} {b} | {_us(fn):.1f} | {_us(g.replay):.1f} | {host:.1f}")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        fn()
    prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
