"""Time variants of wavec's attention kernel (matrix instruction, tile, stages, launch order) side by side
with the Triton kernel of benchmarks/triton_attention.py and SDPA's FLASH_ATTENTION backend, f16 BHSD, on
a few shapes and mask modes.  The variants compile in parallel first (one process each, into the disk
cache); every timing is the median of do_bench after warm-up, on inputs larger than L2 rotated.

    python benchmarks/attention_variants.py [--shapes 16x16x1024x128,4x32x4096x128,1x32x512x8192x128]
        [--variants wgmma:128x128x2,wgmma:128x128x2:tma,wgmma:128x64x2,wgmma:128x128x2x3,wgmma:128x128x2:heavy]
        [--modes full,causal,br,win1024,cap50,br-win512-cap30]

A shape is ``BxHxSxD`` or ``BxHxSqxSkvxD`` (queries at the end of a longer cache).  A mode is ``full``,
``causal`` (top-left, torch's ``is_causal``), ``br`` (causal bottom-right), ``win<L>`` (a sliding window of L
keys left of the bottom-right diagonal, non-causal right side unbounded unless with br), ``cap<C>`` (soft-cap
C), joined by ``-``.  TFLOP/s count the visible scores only (4·D flops each), so a kernel that skips the
masked tiles keeps its rate.  Baselines: SDPA flash and Triton where they express the mode (full, top-left
causal), else SDPA with the boolean mask (``mask``; no soft-cap: "-").

A variant is ``mma[:BLOCK_MxBLOCK_Nxwaves[xstages]][:s<N>][:heavy][:tma|:cp|:mb][:e][:ov][:ws|:pp]`` (no tile: the
heuristic's; s<N>: N stages on the heuristic's tile; heavy: causal query tiles launched last first; tma: K and V
staged by TMA, ``async_copy="tma"``, wgmma only; cp: per-thread ``cp.async`` copies; neither: "auto", which is
TMA for wgmma on sm_90a; mb: TMA with stages released by empty mbarriers, ``async_copy="tma-mbarrier"``; e: O
stored after one bounds test per thread, ``split_epilogue``; ov: intra-warpgroup overlap,
``intra_wg_overlap=True``, 3 stages unless the tile names them; ws: a TMA producer warpgroup,
``warp_specialize=True``, tile ``WS_CONFIG`` (128x128x2) unless named; pp: that and the consumers' ping-pong,
``pingpong=True``).  Baselines where they express the
mode: SDPA's FLASH_ATTENTION and CUDNN_ATTENTION backends and Triton, timed in the same run
(``--baselines cudnn,flash`` skips Triton's autotuning).
Prints one TFLOP/s row per shape and mode as it goes, then a compact table (each variant over cuDNN, and
the geomeans over cuDNN, flash and Triton per head dim and causality), also written to ``$OUT/attention_
variants.txt`` when ``OUT`` is set.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import math
import os
import re
import sys

FLAGS = ("heavy", "tma", "cp", "mb", "e", "ov", "ws", "pp")


def parse_variant(text: str) -> tuple:
    """(mma, config or None, heavy, async_copy, split_epilogue, overlap, stages or None, warp_specialize) of
    ``mma[:tile][:s<N>][:heavy][:tma|:cp|:mb][:e][:ov][:ws|:pp]`` (warp_specialize: False, True or "pingpong")."""
    parts = text.split(":")
    mma, cfg, heavy = parts[0], None, "heavy" in parts[1:]
    copies = {"tma": "tma", "cp": "cp.async", "mb": "tma-mbarrier"}
    copy = next((c for p, c in copies.items() if p in parts[1:]), "auto")
    stages = next((int(p[1:]) for p in parts[1:] if re.fullmatch(r"s\d+", p)), None)
    tiles = [p for p in parts[1:] if p not in FLAGS and not re.fullmatch(r"s\d+", p)]
    if tiles:
        cfg = tuple(int(x) for x in tiles[0].split("x"))
    ws = "pingpong" if "pp" in parts[1:] else "ws" in parts[1:]
    return mma, cfg, heavy, copy, "e" in parts[1:], "ov" in parts[1:], stages, ws


def parse_mode(text: str) -> dict:
    """attention() keywords of a mode token (``full``, ``causal``, ``br``, ``win<L>``, ``cap<C>``, joined by -)."""
    kw: dict = {"causal": False, "window": (-1, -1), "softcap": 0.0}
    for part in text.split("-"):
        if part == "causal":
            kw["causal"] = "top_left"
        elif part == "br":
            kw["causal"] = "bottom_right"
        elif part.startswith("win"):
            kw["window"] = (int(part[3:]), -1)
        elif part.startswith("cap"):
            kw["softcap"] = float(part[3:])
        elif part != "full":
            raise SystemExit(f"unknown mode token {part!r} in {text!r}")
    return kw


def _kernel(variant: str, mode: str, d: int, seq_q: int):
    import wavec as wc
    from wavec.kernels.attention import NUM_STAGES, TARGET, attention_config, make_attention

    mma, cfg, heavy, copy, split, overlap, stages, ws = parse_variant(variant)
    kw = parse_mode(mode)
    causal = kw["causal"]
    subs, waves = attention_config(d, seq_q, cfg, mma, causal, intra_wg_overlap=overlap, warp_specialize=bool(ws))
    if stages is not None:
        subs[NUM_STAGES] = stages
    return wc.compile(
        make_attention(
            wc.f16,
            "bhsd",
            causal,
            waves,
            mma,
            heavy_first=heavy and bool(causal),
            async_copy=copy,
            split_epilogue=split,
            window=kw["window"],
            softcap=kw["softcap"],
            intra_wg_overlap=overlap,
            warp_specialize=bool(ws),
            pingpong=ws == "pingpong",
        ),
        subs,
        target=TARGET[mma],
        backend="cuda",
    )


def _compile(job: tuple) -> tuple[tuple, str, bool]:
    """(job, its line, whether it compiled): a variant the compiler refuses at a shape is reported and left
    out of the timing, not a crash of the whole run."""
    import wavec as wc

    try:
        k = _kernel(*job)
    except wc.WavecError as e:
        return job, f"{job}: failed: {type(e).__name__} {str(e).splitlines()[-1][:160]}", False
    return job, f"{job}: {k.metadata.registers} registers, {k.metadata.spills} spills", True


def _visible_scores(torch, sq: int, skv: int, kw: dict) -> int:
    """Scores a query sees under the mode (tests/attention_ref.visible's rule), counted per query row."""
    i = torch.arange(sq, device="cuda")
    diag = i if kw["causal"] == "top_left" else i + (skv - sq)
    hi = torch.clamp(diag + 1 if kw["causal"] else torch.full_like(i, skv), max=skv)
    lo = torch.clamp(diag - kw["window"][0], min=0) if kw["window"][0] >= 0 else torch.zeros_like(i)
    return int(torch.clamp(hi - lo, min=0).sum())


def _baselines(torch, F, kw: dict, sq: int, skv: int, head_dim: int = 128) -> dict:
    """name -> fn(q, k, v) for the baselines that express the mode (the Triton kernel: power-of-two head
    dims only, its ``tl.arange`` over the head dim)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton_attention import triton_attention

    plain = kw["window"] == (-1, -1) and not kw["softcap"]
    top_left = kw["causal"] == "top_left" or (kw["causal"] and sq == skv)
    out: dict = {}
    # SDPA's flash backend takes is_causal only for square problems
    if plain and (not kw["causal"] or (top_left and sq == skv)):

        def flash(q, k, v):
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=bool(kw["causal"]))

        def cudnn(q, k, v):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=bool(kw["causal"]))

        out["flash"], out["cudnn"] = flash, cudnn
        if head_dim & (head_dim - 1) == 0:
            out["triton"] = lambda q, k, v: triton_attention(q, k, v, bool(kw["causal"]))
    if not kw["softcap"] and "flash" not in out:
        sys.path.insert(0, __file__.rsplit("/", 2)[0])
        from tests.attention_ref import visible

        mask = visible(sq, skv, kw["causal"] or None, *kw["window"], device="cuda")
        out["mask"] = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="16x16x1024x128,8x16x2048x128,4x32x4096x128,1x16x16384x128")
    ap.add_argument("--variants", default="wgmma:128x128x2,wgmma:128x64x2,wgmma:128x128x2x3,wgmma:128x128x2:heavy")
    ap.add_argument("--modes", default="full,causal")
    ap.add_argument("--jobs", type=int, default=12)
    ap.add_argument("--baselines", default="flash,cudnn,triton,mask", help="which baselines to time (Triton autotunes)")
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    from triton.testing import do_bench

    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from triton_attention import _attention_fwd

    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    shapes = [(b, h, s[0], s[-1], d) for b, h, *s, d in shapes]  # (B, H, Sq, Skv, D)
    variants, modes = args.variants.split(","), args.modes.split(",")
    jobs = sorted({(v, m, d, sq) for v in variants for m in modes for _b, _h, sq, _skv, d in shapes})
    failed = set()
    with cf.ProcessPoolExecutor(args.jobs) as ex:
        for job, line, ok in ex.map(_compile, jobs):
            print(line, flush=True)
            failed |= set() if ok else {job}
    print(f"device {torch.cuda.get_device_name()}")
    results: list[tuple] = []  # (d, causal, label, row, base)
    print("shape mode | " + " | ".join(variants) + " | baselines  (TFLOP/s of visible scores)")
    for b, h, sq, skv, d in shapes:
        n_sets = max(1, min(8, 2 * 50 * 2**20 // (b * h * max(sq, skv) * d * 2 * 4)))

        def make(s):
            return torch.randn(b, h, s, d, device="cuda", dtype=torch.float16)

        sets = [(make(sq), make(skv), make(skv)) for _ in range(n_sets)]
        for mode in modes:
            kw = parse_mode(mode)
            flop = 4.0 * b * h * d * _visible_scores(torch, sq, skv, kw)

            def timed(fn):
                it = iter(range(10**9))
                fn(*sets[0])
                ms = do_bench(lambda: fn(*sets[next(it) % n_sets]), warmup=25, rep=100, return_mode="median")
                return flop / (ms * 1e-3) / 1e12

            row = {}
            for v in variants:
                if (v, mode, d, sq) in failed:
                    row[v] = float("nan")
                    continue
                kern = _kernel(v, mode, d, sq)
                scale = 1.0 / math.sqrt(d)

                def run(q, k, v_, kern=kern):
                    o = torch.empty_like(q)
                    kern(q, k, v_, o, scale)
                    return o

                row[v] = timed(run)
            base = {}
            wanted = args.baselines.split(",")
            for name, fn in _baselines(torch, F, kw, sq, skv, d).items():
                if name not in wanted:
                    continue
                try:
                    base[name] = timed(fn)
                except RuntimeError as e:  # a backend that refuses the shape: a column left empty, not a crash
                    print(f"{name} failed on {b}x{h}x{sq}x{skv}x{d} {mode}: {str(e).splitlines()[0]}", flush=True)
            results.append((d, bool(kw["causal"]), f"{b}x{h}x{sq}x{skv}x{d} {mode}", row, base))
            if "triton" in base:
                cfg = _attention_fwd.best_config  # what Triton's autotuner picked for this shape
                picked = f"  triton {cfg.kwargs['BLOCK_M']}x{cfg.kwargs['BLOCK_N']} w{cfg.num_warps} s{cfg.num_stages}"
            else:
                picked = ""
            print(
                f"{b}x{h}x{sq}x{skv}x{d} {mode:12} | "
                + " | ".join(f"{row[v]:6.1f}" for v in variants)
                + " | "
                + " ".join(f"{name} {t:6.1f}" for name, t in base.items())
                + picked,
                flush=True,
            )
    table = summary(results, variants)
    print(table)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "attention_variants.txt"), "w") as f:
            f.write(table + "\n")
    return 0


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def summary(results: list[tuple], variants: list[str]) -> str:
    """The compact table: per row each variant's TFLOP/s and its ratio to cuDNN; then per (head dim, causal)
    the geomean of each variant over cuDNN, SDPA flash and Triton (rows where that baseline runs)."""
    lines = ["row | " + " | ".join(f"{v} (x cudnn)" for v in variants) + " | cudnn flash triton TFLOP/s"]
    for _d, _c, label, row, base in results:
        ratio = {v: row[v] / base["cudnn"] if "cudnn" in base else float("nan") for v in variants}
        lines.append(
            f"{label:28} | "
            + " | ".join(f"{row[v]:6.1f} ({ratio[v]:.2f})" for v in variants)
            + " | "
            + " ".join(f"{base.get(n, float('nan')):6.1f}" for n in ("cudnn", "flash", "triton"))
        )
    lines.append("geomean (d, causal, baseline) | " + " | ".join(variants))
    for d, causal in sorted({(r[0], r[1]) for r in results}):
        group = [r for r in results if (r[0], r[1]) == (d, causal)]
        for name in ("cudnn", "flash", "triton"):
            rows = [r for r in group if name in r[4]]
            if rows:
                means = [_geomean([r[3][v] / r[4][name] for r in rows]) for v in variants]
                lines.append(f"d{d} {'causal' if causal else 'full':6} x {name:6} ({len(rows)} rows) | "
                             + " | ".join(f"{m:.3f}" for m in means))  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
