"""Dense split-KV decode at mid batches (issue #24's "no op slower than stock": decode B=16 over a 2048-token
cache took 227 us a forward against cuDNN's 215) over its tiles and split counts, beside SDPA's cuDNN and
flash backends in the same run (K/V at their own heads, ``enable_gqa=True``, as transformers calls SDPA;
``--expand``: expanded to the query heads first, as session 12's run did; ``--layout bhsd``: the caches
are transposed views of [B, Hkv, S, D], transformers' layout, which SDPA reads contiguous).

Per shape (bf16, d128, q_len 1, GQA 32/8 unless given): every ``(BLOCK_N, waves, stages)`` of ``--configs``
crossed with the split counts (``0``: the split rule, ``decode.num_splits_for``), each a CUDA-graph replay of
one call (split + combine) over input sets rotated past the L2; the best five and the library's default
printed with their fraction of a device copy of the K/V bytes, then one summary line per shape.  One
split runs without a combine (``decode.DIRECT_SINGLE_SPLIT``); ``--no-direct``: through the combine.

``--configs`` entries are ``BLOCK_NxWAVESxSTAGES`` with ``:``-separated split-kernel variants
(``decode_variants.parse_variant``): ``wgmma`` (sm_90a warpgroup tile, K/V by TMA), ``cp.async`` (its K/V
by ``cp.async`` instead), ``ov`` (wgmma's next scores during this softmax, 3+ stages), ``lb<N>`` (a
launch bound of N workgroups an SM), ``l2p<N>`` (``cp.async`` L2 prefetch bytes); ``wgmma`` alone is
its default tile.  ``--per-config``: each entry's best split count printed beside the default.

    python benchmarks/decode_tiles.py [--shapes 16x2048,8x4096] [--splits 0,1,2,3,4,6,8]
                                      [--configs 32x2x2,64x2x2,wgmma,64x1x3:wgmma,16x2x2:lb5,...]
                                      [--no-direct] [--per-config]
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import os
import sys
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from wavec.kernels import decode
from wavec.kernels.decode_variants import parse_variant

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode_attention import _graph_us as graph_us  # noqa: E402  (the dense decode benchmark's timers)
from decode_attention import copy_bandwidth  # noqa: E402

DT, D, L2 = torch.bfloat16, 128, 50 << 20
CONFIGS = "32x1x2,32x2x2,32x2x3,32x4x2,64x1x2,64x2x2,64x2x3,64x4x2,128x2x2,128x4x2"


def _graph_us(fn, sets) -> float:
    return graph_us(fn, sets, rep=60)


def _sdpa_us(backend, sets, gqa: bool) -> float | None:
    """SDPA per call in a graph (``gqa``: K/V at their own heads, ``enable_gqa=True`` as transformers calls
    it; else expanded to the query heads, ``repeat_kv``), or None where the backend refuses."""
    try:
        with sdpa_kernel(backend):
            return _graph_us(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa), sets)
    except RuntimeError as exc:
        print(f"  ({backend} refused: {str(exc).splitlines()[0][:80]})", flush=True)
        return None


def cache(batch: int, ctx: int, kv_heads: int, layout: str) -> torch.Tensor:
    """A [B, S, Hkv, D] cache: contiguous (``bshd``) or a transposed view of a contiguous [B, Hkv, S, D]
    (``bhsd``: transformers' cache, which SDPA then reads contiguous and wavec in place)."""
    if layout == "bshd":
        return torch.randn(batch, ctx, kv_heads, D, device="cuda", dtype=DT)
    return torch.randn(batch, kv_heads, ctx, D, device="cuda", dtype=DT).transpose(1, 2)


def shape_rows(
    batch: int, ctx: int, heads: int, kv_heads: int, configs, splits, copy_bw: float, expand: bool, layout: str,
    per_config: bool = False,
) -> str:  # fmt: skip
    kv_bytes = 2 * batch * ctx * kv_heads * D * DT.itemsize
    n_sets = max(1, min(8, math.ceil(2 * L2 / kv_bytes)))
    sets = [
        (torch.randn(batch, 1, heads, D, device="cuda", dtype=DT),
         *(cache(batch, ctx, kv_heads, layout) for _ in range(2)))
        for _ in range(n_sets)
    ]  # fmt: skip
    rep = heads // kv_heads if expand else 1
    bhsd = [
        (q.transpose(1, 2).contiguous(), *(t.transpose(1, 2).repeat_interleave(rep, 1).contiguous() for t in (k, v)))
        for q, k, v in sets
    ]
    ref = F.scaled_dot_product_attention(*bhsd[0], enable_gqa=not expand).transpose(1, 2).float()
    cudnn = _sdpa_us(SDPBackend.CUDNN_ATTENTION, bhsd, not expand)
    flash = _sdpa_us(SDPBackend.FLASH_ATTENTION, bhsd, not expand)
    del bhsd
    lens = torch.full((batch,), ctx, dtype=torch.int32, device="cuda")
    rule = decode.num_splits_for(batch, kv_heads, 1, ctx, torch.cuda.get_device_properties(0).multi_processor_count)
    rows = []
    for (label, cfg, variant), sp in itertools.product(configs, splits):
        options = dataclasses.asdict(variant)

        def run(q, k, v, cfg=cfg, sp=sp, options=options):
            return decode.decode_attention(q, k, v, seq_lens=lens, num_splits=sp or None, config=cfg, **options)

        try:
            err = (run(*sets[0]).float() - ref).abs().max().item()
            assert err < 2e-2, err
            rows.append(
                (
                    _graph_us(run, sets),
                    label,
                    sp or (rule if variant.mma == "mma_sync" else "rule"),
                    err,
                    sp == 0 and label == "default",
                )
            )
        except Exception as e:  # an illegal tile: say so, go on
            print(f"  {label} splits {sp}: {type(e).__name__} {str(e)[:100]}", flush=True)
    rows.sort()
    name = f"B={batch} S={ctx} H={heads}/{kv_heads}"
    shown = rows[:5] + [r for r in rows[5:] if r[4]]
    if per_config:  # each entry's best split count too
        shown += [next(r for r in rows if r[1] == label) for label in dict.fromkeys(r[1] for r in rows)]
    for t, label, sp, err, default in dict.fromkeys(shown):
        tag = " (default)" if default else ""
        print(
            f"  {name} {label} splits {sp}{tag}: {t:.1f} us, {kv_bytes / t / 1e3 / copy_bw:.2f} of copy, err {err:.1e}"
        )
    best, dflt = rows[0][0], next((r[0] for r in rows if r[4]), float("nan"))
    fmt = lambda x: f"{x:.1f}" if x else "-"  # noqa: E731
    return f"| {name} | {fmt(cudnn)} | {fmt(flash)} | {dflt:.1f} | {best:.1f} {rows[0][1]} x{rows[0][2]} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="16x2048,16x4096,8x2048,32x2048", help="BxS[xHxHkv]")
    ap.add_argument("--splits", default="0,1,2,3,4,6,8")
    ap.add_argument(
        "--configs", default=CONFIGS, help="BLOCK_NxWAVESxSTAGES[:wgmma|:cp.async|:ov|:lbN|:l2pN], comma-separated"
    )
    ap.add_argument("--expand", action="store_true", help="SDPA on K/V expanded to the query heads")
    ap.add_argument("--layout", choices=("bshd", "bhsd"), default="bshd", help="the caches' memory order")
    ap.add_argument("--no-direct", action="store_true", help="one split through the combine too")
    ap.add_argument("--per-config", action="store_true", help="print each config's best split count")
    args = ap.parse_args()
    decode.DIRECT_SINGLE_SPLIT = not args.no_direct
    configs: list[tuple[str, tuple | None, Any]] = [("default", None, parse_variant("default")[1])]
    configs += [(c, *parse_variant(c)) for c in args.configs.split(",") if c != "default"]
    splits = [int(s) for s in args.splits.split(",")]
    copy_bw = copy_bandwidth() / 1e9  # GB/s
    lines = [
        "| shape | SDPA cuDNN us | SDPA flash us | wavec default us | wavec best us (config x splits) |",
        "|---|---|---|---|---|",
    ]
    for s in args.shapes.split(","):
        dims = [int(v) for v in s.split("x")]
        batch, ctx, heads, kv_heads = (*dims, 32, 8) if len(dims) == 2 else dims
        row = shape_rows(
            batch, ctx, heads, kv_heads, configs, splits, copy_bw, args.expand, args.layout, args.per_config
        )
        lines.append(row)
        print(lines[-1], flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
