"""Split-KV decode attention (``wavec.kernels.decode_attention``, dense BSHD cache) and paged decode attention
(``wavec.kernels.paged_attention.paged_attention``) against SDPA's flash backend on the equivalent dense
padded batch (BHSD contiguous, ``torch.nn.attention.sdpa_kernel(FLASH_ATTENTION)``, grouped-query heads
through ``enable_gqa``), bf16, q_len 1, every sequence the full length.

Each time is the median of ``triton.testing.do_bench`` over input sets rotated past the L2 (so K/V come
from DRAM, as in a model), and of ``do_bench_cudagraph`` (graph replay: no host time) for wavec.  K/V
bandwidth = bytes of K and V of every sequence / time, against a device copy measured in the same run.
Columns: shape, kernel (``1L``: the step in one launch, the last split of each group combining;
``2L``: the split kernel then ``decode_combine``), splits, µs per call, µs replayed, K/V GB/s (replayed),
x copy, SDPA flash µs, speed relative to it (> 1: wavec faster; from the call times), max error vs SDPA.
The table is printed last and written to ``$OUT/decode_attention.md`` where ``OUT`` is set.

    python -m benchmarks.decode_attention [--quick] [--splits N] [--config BLOCK_N,WAVES[,STAGES]] [--csv PATH]
                                          [--launches 1,2] [--splits-per-step N] [--pages 16,64]
"""

from __future__ import annotations

import argparse
import csv
import itertools
import math
import os

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench, do_bench_cudagraph

from wavec.kernels import decode, split_combine
from wavec.kernels.paged_attention import paged_attention

SHAPES = [  # batch, context, q heads, kv heads (d128)
    (1, 2048, 32, 8),
    (1, 8192, 32, 8),
    (32, 8192, 32, 8),
    (64, 4096, 32, 8),
    (1, 2048, 32, 32),
    (1, 8192, 32, 32),
    (32, 8192, 32, 32),
    (64, 4096, 32, 32),
]
QUICK = [(1, 8192, 32, 8), (64, 4096, 32, 8)]
PAGES = (16, 64)
HEAD_DIM = 128
L2_BYTES = 50 * 2**20
DT = torch.bfloat16


def copy_bandwidth() -> float:
    x = torch.empty(2**28, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    ms = do_bench(lambda: y.copy_(x), warmup=25, rep=100, return_mode="median")
    return 2 * x.numel() * 4 / (ms * 1e-3)


def _rotating_us(fn, sets) -> float:
    it = itertools.cycle(sets)
    return 1e3 * do_bench(lambda: fn(*next(it)), warmup=25, rep=100, return_mode="median")


def _graph_us(fn, sets, rep: int = 100) -> float:
    """Per call, replaying one CUDA graph of a call on every input set (rotated past the L2 as above)."""
    try:
        ms = do_bench_cudagraph(lambda: [fn(*a) for a in sets], rep=rep, return_mode="median")
    except TypeError:  # a Triton without return_mode: its mean
        ms = do_bench_cudagraph(lambda: [fn(*a) for a in sets], rep=rep)
    return 1e3 * ms / len(sets)


def _flash_us(sets) -> float | None:
    """SDPA's flash backend over the BHSD sets, or None where it refuses the shape or GPU."""
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return _rotating_us(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), sets)
    except RuntimeError as exc:
        print(f"  (SDPA flash refused: {str(exc).splitlines()[0][:80]})", flush=True)
        return None


def _paged(k, v, page: int):
    """The dense [B, S, Hkv, D] caches as a shuffled block pool and block tables (entries past the end -1)."""
    batch, ctx, kv_heads, d = k.shape
    n_blocks = -(-ctx // page)
    pad = n_blocks * page - ctx
    pool = batch * n_blocks
    perm = torch.randperm(pool, device="cuda")
    tables = torch.full((batch, n_blocks + 1), -1, dtype=torch.int32, device="cuda")
    tables[:, :n_blocks] = perm.view(batch, n_blocks).int()
    caches = []
    for t in (k, v):
        blocks = F.pad(t, (0, 0, 0, 0, 0, pad)).reshape(pool, page, kv_heads, d)
        cache = torch.empty_like(blocks)
        cache[perm] = blocks
        caches.append(cache)
    return caches[0], caches[1], tables


def rows(shape, splits: int | None, bw: float, config: tuple | None = None, launches=(1, 2), pages=PAGES) -> list[dict]:
    batch, ctx, heads, kv_heads = shape
    kv_bytes = 2 * batch * ctx * kv_heads * HEAD_DIM * DT.itemsize
    n_sets = max(1, min(8, math.ceil(2 * L2_BYTES / kv_bytes)))
    sets = []
    for _ in range(n_sets):
        q = torch.randn(batch, 1, heads, HEAD_DIM, device="cuda", dtype=DT)
        k, v = (torch.randn(batch, ctx, kv_heads, HEAD_DIM, device="cuda", dtype=DT) for _ in range(2))
        sets.append((q, k, v))
    lens = torch.full((batch,), ctx, dtype=torch.int32, device="cuda")
    bhsd = [tuple(t.transpose(1, 2).contiguous() for t in s) for s in sets]
    ref = F.scaled_dot_product_attention(*bhsd[0], enable_gqa=True).transpose(1, 2)
    t_flash = _flash_us(bhsd)
    del bhsd
    q, k, v = sets[0]
    variants = []
    for n in launches:
        one = n == 1

        def dense(q, k, v, one=one):
            return decode.decode_attention(q, k, v, seq_lens=lens, num_splits=splits, config=config, one_launch=one)

        variants.append((f"dense {n}L", dense, sets))
    for page in pages:
        paged_sets = [(s[0], *_paged(s[1], s[2], page)) for s in sets]
        for n in launches:

            def paged(q, kc, vc, bt, one=n == 1):
                return paged_attention(q, kc, vc, bt, lens, num_splits=splits, config=config, one_launch=one)

            variants.append((f"paged {page} {n}L", paged, paged_sets))
    out = []
    for name, fn, args in variants:
        err = (fn(*args[0]).float() - ref.float()).abs().max().item()
        t_call = _rotating_us(fn, args)
        t_graph = _graph_us(fn, args)
        chosen = splits or _chosen_splits(name, batch, kv_heads, ctx)
        rate = kv_bytes / (t_graph * 1e-6)
        out.append(
            {"shape": f"B={batch} S={ctx} H={heads}/{kv_heads} d{HEAD_DIM}", "kernel": name, "splits": chosen,
             "us": t_call, "us_graph": t_graph, "kv_gb_s": rate / 1e9, "x_copy": rate / bw, "flash_us": t_flash,
             "vs_flash": t_flash / t_call if t_flash else None, "max_err": err}
        )  # fmt: skip
    return out


def _chosen_splits(name: str, batch: int, kv_heads: int, ctx: int) -> int:
    """The rule's split count for a row (what the call without ``num_splits`` used)."""
    keys = ctx if name.startswith("dense") else (-(-ctx // int(name.split()[1])) + 1) * int(name.split()[1])
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return decode.num_splits_for(batch, kv_heads, 1, keys, sms)


def _num(x: float | None, fmt: str) -> str:
    return "n/a" if x is None else format(x, fmt)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="two shapes only")
    ap.add_argument("--splits", type=int, default=None, help="force num_splits (default: the rule)")
    ap.add_argument("--config", default=None, help="BLOCK_N,WAVES[,STAGES] for both kernels (default: CONFIGS)")
    ap.add_argument("--csv", default=None)
    ap.add_argument("--launches", default="1,2", help="1: one launch, 2: split + combine (default both)")
    ap.add_argument("--splits-per-step", type=int, default=split_combine.SPLITS_PER_STEP,
                    help="splits the one-launch combine reads per step (BLOCK_SP)")  # fmt: skip
    ap.add_argument("--pages", default=",".join(map(str, PAGES)), help="page sizes of the paged rows ('' none)")
    args = ap.parse_args()
    split_combine.SPLITS_PER_STEP = args.splits_per_step
    launches = tuple(int(x) for x in args.launches.split(","))
    pages = tuple(int(x) for x in args.pages.split(",") if x)
    config = tuple(map(int, args.config.split(","))) if args.config else None
    bw = copy_bandwidth()
    head = f"device {torch.cuda.get_device_name()}; copy bandwidth {bw / 1e9:.0f} GB/s; bf16, q_len 1, d{HEAD_DIM}"
    head += f"; one-launch combine: {args.splits_per_step} split(s) a step"
    lines = [
        "| shape | kernel | splits | µs | µs (graph) | K/V GB/s | x copy | SDPA flash µs | vs flash | max err |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    print(head, flush=True)
    table = []
    for shape in QUICK if args.quick else SHAPES:
        try:
            found = rows(shape, args.splits, bw, config, launches, pages)
        except (RuntimeError, torch.OutOfMemoryError) as exc:  # report the row, keep measuring the others
            lines.append(f"| {shape} | failed: {str(exc).splitlines()[0][:80]} |||||||||")
            print(lines[-1], flush=True)
            torch.cuda.empty_cache()
            continue
        for r in found:
            lines.append(
                f"| {r['shape']} | {r['kernel']} | {r['splits']} | {r['us']:.1f} | {r['us_graph']:.1f} | "
                f"{r['kv_gb_s']:.0f} | {r['x_copy']:.2f} | {_num(r['flash_us'], '.1f')} | "
                f"{_num(r['vs_flash'], '.2f')}x | {r['max_err']:.1e} |"
            )
            print(lines[-1], flush=True)
        table += found
        torch.cuda.empty_cache()
    print("\n" + head + "\n" + "\n".join(lines))  # the compact table, last
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "decode_attention.md"), "w") as f:
            f.write(head + "\n" + "\n".join(lines) + "\n")
    if args.csv and table:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(table[0]))
            w.writeheader()
            w.writerows(table)


if __name__ == "__main__":
    main()
