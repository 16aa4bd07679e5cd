"""Compile the attention kernels a GPU run will use, in parallel, into the disk cache (WAVEC_CACHE_DIR),
so the tests and the benchmark that follow only load them.  One process per kernel (each compile is
single-threaded); run it on the GPU machine (the cache key includes the ptxas there).

    python scripts/precompile_attention.py [--mma wgmma] [--jobs 12] [--pairs f16:bhsd,bf16:bshd] [--head-dims 64,128]
        [--all-configs]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import itertools
import sys
import time


def _one(job: tuple) -> str:
    import wavec as wc
    from wavec.kernels.attention import TARGET, attention_config, make_attention

    dtype, layout, causal, d, config, seq_q, mma = job
    subs, waves = attention_config(d, seq_q, config, mma)
    t = time.time()
    k = wc.compile(
        make_attention(getattr(wc, dtype), layout, causal, waves, mma), subs, target=TARGET[mma], backend="cuda"
    )
    m = k.metadata
    return (
        f"{dtype} {layout} {'causal' if causal else 'full'} d{d} {config or 'default'} q<={seq_q}: "
        f"{m.registers} registers, {m.spills} spills, {time.time() - t:.1f} s"
    )


def main() -> int:
    from wavec.kernels.attention import CONFIGS, WGMMA_CONFIGS

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mma", default="wgmma", choices=("mma_sync", "wgmma"))
    ap.add_argument("--pairs", default="f16:bhsd,bf16:bshd", help="dtype:layout pairs (causal and not each)")
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--all-configs", action="store_true", help="also every other candidate tile (f16 bhsd)")
    ap.add_argument("--jobs", type=int, default=12)
    args = ap.parse_args()
    dims = [int(d) for d in args.head_dims.split(",")]
    pairs = [p.split(":") for p in args.pairs.split(",")]
    jobs = [(dt, lay, c, d, None, None, args.mma) for (dt, lay), c, d in itertools.product(pairs, (False, True), dims)]
    jobs += [("f16", "bhsd", False, d, None, 1, args.mma) for d in dims]  # decode: the short-query tile
    if args.all_configs:
        jobs += [
            ("f16", "bhsd", False, d, cfg, None, args.mma)
            for d in dims
            for cfg in (WGMMA_CONFIGS if args.mma == "wgmma" else CONFIGS)[d][1:]
        ]
    t = time.time()
    with cf.ProcessPoolExecutor(args.jobs) as ex:
        for line in ex.map(_one, jobs):
            print(line, flush=True)
    print(f"{len(jobs)} kernels in {time.time() - t:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
