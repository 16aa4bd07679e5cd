"""Time variants of wavec's attention kernel (matrix instruction, tile, stages, launch order) side by side
with the Triton kernel of benchmarks/triton_attention.py and SDPA's FLASH_ATTENTION backend, f16 BHSD, on
a few shapes, causal and not.  The variants compile in parallel first (one process each, into the disk
cache); every timing is the median of do_bench after warm-up, on inputs larger than L2 rotated.

    python benchmarks/attention_variants.py [--shapes 16x16x1024x128,4x32x4096x128]
        [--variants wgmma:128x128x2,wgmma:128x128x2:tma,wgmma:128x64x2,wgmma:128x128x2x3,wgmma:128x128x2:heavy]

A variant is ``mma[:BLOCK_MxBLOCK_Nxwaves[xstages]][:heavy][:tma|:cp][:e]`` (no tile: the heuristic's; heavy:
causal query tiles launched last first; tma: K and V staged by TMA, ``async_copy="tma"``, wgmma only; cp:
per-thread ``cp.async`` copies; neither: "auto", which is TMA for wgmma on sm_90a; e: O stored after one
bounds test per thread, ``split_epilogue``).
Prints one TFLOP/s table and the geomean of each variant over Triton.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import math
import sys


def parse_variant(text: str) -> tuple:
    """(mma, config or None, heavy, async_copy, split_epilogue) of ``mma[:tile][:heavy][:tma|:cp][:e]``."""
    parts = text.split(":")
    mma, cfg, heavy = parts[0], None, "heavy" in parts[1:]
    copy = "tma" if "tma" in parts[1:] else "cp.async" if "cp" in parts[1:] else "auto"
    tiles = [p for p in parts[1:] if p not in ("heavy", "tma", "cp", "e")]
    if tiles:
        cfg = tuple(int(x) for x in tiles[0].split("x"))
    return mma, cfg, heavy, copy, "e" in parts[1:]


def _kernel(variant: str, causal: bool, d: int, seq_q: int):
    import wavec as wc
    from wavec.kernels.attention import TARGET, attention_config, make_attention

    mma, cfg, heavy, copy, split = parse_variant(variant)
    subs, waves = attention_config(d, seq_q, cfg, mma, causal)
    return wc.compile(
        make_attention(
            wc.f16, "bhsd", causal, waves, mma, heavy_first=heavy and causal, async_copy=copy, split_epilogue=split
        ),
        subs,
        target=TARGET[mma],
        backend="cuda",
    )


def _compile(job: tuple) -> str:
    k = _kernel(*job)
    return f"{job}: {k.metadata.registers} registers, {k.metadata.spills} spills"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="16x16x1024x128,8x16x2048x128,4x32x4096x128,1x16x16384x128")
    ap.add_argument("--variants", default="wgmma:128x128x2,wgmma:128x64x2,wgmma:128x128x2x3,wgmma:128x128x2:heavy")
    ap.add_argument("--jobs", type=int, default=12)
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from triton_attention import _attention_fwd, triton_attention

    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    variants = args.variants.split(",")
    jobs = sorted({(v, c, d, s) for v in variants for c in (False, True) for _b, _h, s, d in shapes})
    with cf.ProcessPoolExecutor(args.jobs) as ex:
        for line in ex.map(_compile, jobs):
            print(line, flush=True)
    print(f"device {torch.cuda.get_device_name()}")
    ratios: dict = {v: [] for v in variants + ["flash"]}
    print("shape causal | " + " | ".join(variants) + " | flash | triton  (TFLOP/s)")
    for b, h, s, d in shapes:
        n_sets = max(1, min(8, 2 * 50 * 2**20 // (b * h * s * d * 2 * 4)))
        sets = [
            tuple(torch.randn(b, h, s, d, device="cuda", dtype=torch.float16) for _ in range(3)) for _ in range(n_sets)
        ]
        for causal in (False, True):
            flop = 4.0 * b * h * s * s * d / (2 if causal else 1)

            def timed(fn):
                it = iter(range(10**9))
                fn(*sets[0])
                ms = do_bench(lambda: fn(*sets[next(it) % n_sets]), warmup=25, rep=100, return_mode="median")
                return flop / (ms * 1e-3) / 1e12

            row = {}
            for v in variants:
                kern = _kernel(v, causal, d, s)
                scale = 1.0 / math.sqrt(d)

                def run(q, k, v_, kern=kern):
                    o = torch.empty_like(q)
                    kern(q, k, v_, o, scale)
                    return o

                row[v] = timed(run)

            def flash(q, k, v):
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

            row["flash"] = timed(flash)
            row["triton"] = timed(lambda q, k, v: triton_attention(q, k, v, causal))
            for v in variants + ["flash"]:
                ratios[v].append(row[v] / row["triton"])
            cfg = _attention_fwd.best_config  # what Triton's autotuner picked for this shape
            print(
                f"{b}x{h}x{s}x{d} {'causal' if causal else 'full  '} | "
                + " | ".join(f"{row[v]:6.1f}" for v in variants + ["flash", "triton"])
                + f"  triton {cfg.kwargs['BLOCK_M']}x{cfg.kwargs['BLOCK_N']} w{cfg.num_warps} s{cfg.num_stages}",
                flush=True,
            )
    print(
        "geomean over Triton: "
        + ", ".join(f"{v} {math.exp(sum(map(math.log, r)) / len(r)):.3f}" for v, r in ratios.items())
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
