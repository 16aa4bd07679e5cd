"""Aligned GEMM and attention shapes under two wavec trees, for issue #20's "within 2% of before".

Each tree is timed in its own process (``--time``: whichever ``wavec`` is first on ``PYTHONPATH``), with
cuBLAS (``F.linear``: a @ b.T in the inputs' dtype) and SDPA (flash backend) timed in the same process as
the anchor; ``--compare`` prints old/new per shape, the geomean of new/old, and each tree's ratio to its
own anchor (so a drift of the GPU between the two processes shows up in the anchors, not as a wavec
change).  GEMM: ``matmul(a, b, mma="wgmma", out_dtype=a.dtype)`` (both trees take these keywords);
attention: ``attention(q, k, v, causal=, layout="bhsd")`` (the device's default mma).  Medians of
``do_bench`` after warm-up, fresh random inputs per shape.

    PYTHONPATH=OLD python benchmarks/regress_aligned.py --time old.json
    PYTHONPATH=NEW python benchmarks/regress_aligned.py --time new.json
    python benchmarks/regress_aligned.py --compare old.json new.json
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import pathlib

DATA = pathlib.Path(__file__).parent / "data"


def gemm_shapes(limit: int) -> list[tuple[int, int, int]]:
    """Every ``limit``-th distinct M >= 64 shape of the shape file (all dims multiples of 8) plus squares."""
    with open(DATA / "gemm_shapes.csv") as f:
        rows = sorted({(int(r["M"]), int(r["N"]), int(r["K"])) for r in csv.DictReader(f)})
    rows = [s for s in rows if s[0] >= 64 and all(d % 8 == 0 for d in s)]
    step = max(1, len(rows) // limit)
    return rows[::step][:limit] + [(4096, 4096, 4096), (8192, 8192, 8192)]


ATTENTION = [  # batch, heads, kv heads, seq, head dim, causal
    (4, 32, 32, 4096, 64, False),
    (4, 32, 32, 4096, 64, True),
    (2, 16, 16, 8192, 128, False),
    (2, 16, 16, 8192, 128, True),
    (8, 32, 8, 2048, 128, True),
    (16, 16, 16, 1024, 128, False),
]


def _time(fn) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100, return_mode="median")) * 1e3  # us


def time_tree(gemm_limit: int) -> dict[str, dict[str, float]]:
    import torch
    import torch.nn.functional as F

    from wavec.kernels.attention import attention
    from wavec.kernels.gemm import matmul

    out: dict[str, dict[str, float]] = {}
    for dt in (torch.float16, torch.bfloat16):
        for m, n, k in gemm_shapes(gemm_limit):
            a = torch.randn(m, k, device="cuda", dtype=dt)
            b = torch.randn(n, k, device="cuda", dtype=dt)
            c = matmul(a, b, mma="wgmma", out_dtype=dt)
            assert torch.allclose(c.float(), F.linear(a, b).float(), atol=0.5, rtol=2e-2), (m, n, k)
            w = _time(lambda a=a, b=b, dt=dt: matmul(a, b, mma="wgmma", out_dtype=dt))
            out[f"gemm {str(dt)[6:]} {m}x{n}x{k}"] = {"wavec": w, "anchor": _time(lambda a=a, b=b: F.linear(a, b))}
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for bsz, h, kvh, s, d, causal in ATTENTION:
        q = torch.randn(bsz, h, s, d, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(bsz, kvh, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        w = _time(lambda q=q, k=k, v=v, c=causal: attention(q, k, v, causal=c, layout="bhsd"))
        kr, vr = (x.repeat_interleave(h // kvh, dim=1) for x in (k, v))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            ref = _time(lambda q=q, k=kr, v=vr, c=causal: F.scaled_dot_product_attention(q, k, v, is_causal=c))
        out[f"attn {bsz}x{h}/{kvh}x{s} d{d}{' causal' if causal else ''}"] = {"wavec": w, "anchor": ref}
    return out


def compare(old: dict, new: dict) -> str:
    lines = [f"{'shape':36} {'old us':>9} {'new us':>9} {'new/old':>8} {'old x anchor':>12} {'new x anchor':>12}"]
    logs: dict[str, list[float]] = {"gemm": [], "attn": []}
    for key in old:
        if key not in new:
            continue
        o, n = old[key], new[key]
        speed = o["wavec"] / n["wavec"]  # > 1: the new tree is faster
        logs[key.split()[0]].append(math.log(speed))
        lines.append(
            f"{key:36} {o['wavec']:9.1f} {n['wavec']:9.1f} {speed:8.3f} "
            f"{o['anchor'] / o['wavec']:12.3f} {n['anchor'] / n['wavec']:12.3f}"
        )
    for fam, xs in logs.items():
        if xs:
            lines.append(
                f"{fam}: geomean speed new vs old {math.exp(sum(xs) / len(xs)):.3f} over {len(xs)} shapes "
                f"(min {math.exp(min(xs)):.3f}); > 1: new faster"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--time", metavar="JSON", help="time the wavec on the path, write JSON")
    ap.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"))
    ap.add_argument("--gemm-shapes", type=int, default=24)
    args = ap.parse_args()
    if args.time:
        result = time_tree(args.gemm_shapes)
        pathlib.Path(args.time).write_text(json.dumps(result, indent=1))
    if args.compare:
        old, new = (json.loads(pathlib.Path(p).read_text()) for p in args.compare)
        print(compare(old, new))


if __name__ == "__main__":
    main()
