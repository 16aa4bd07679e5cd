"""Odd GEMM sizes (issue #20 item 1) beside the next aligned size and cuBLAS, in one run.

K = 4095 / 4094 and N = 50257 are not multiples of the 16-byte vector width.  An odd K with M, N >=
``PAD_K_MIN_MN`` is zero-padded by ``kernels/pad.py`` (one launch writing both operands into a reused
workspace) and runs the wide kernel; the goal is >= 0.85x the next aligned size's throughput (K = 4096,
N = 50264).  Padded rows also time the pad kernel alone against the device's copy bandwidth
(``torch.empty_like(x).copy_(x)`` of the same elements, timed in the same run), in both lane layouts
(``chunked``: 16-byte stores; words: one word a lane), and the two
``torch.nn.functional.pad`` calls it replaces; ``--narrow`` adds the narrow variant (padding off), the
evidence for ``PAD_K_MIN_MN``.  Under 2 minutes on an H200 with a cold compile cache.

python benchmarks/odd_sizes.py [--out DIR] [--narrow]      (also writes under $OUT when set)
"""

import argparse
import json
import os

import torch
import triton.testing

from wavec.kernels import gemm as gm
from wavec.kernels import pad as pad_mod
from wavec.kernels.gemm import matmul

# (name, dtype, (M, N, K) odd, (M, N, K) next aligned)
SHAPES = [
    ("K=4095 f16", torch.float16, (4096, 4096, 4095), (4096, 4096, 4096)),
    ("K=4094 f16", torch.float16, (4096, 4096, 4094), (4096, 4096, 4096)),
    ("K=4095 bf16", torch.bfloat16, (4096, 4096, 4095), (4096, 4096, 4096)),
    ("K=4094 bf16", torch.bfloat16, (4096, 4096, 4094), (4096, 4096, 4096)),
    ("N=50257 f16", torch.float16, (4096, 50257, 4096), (4096, 50264, 4096)),
    ("decode N=50257", torch.float16, (16, 50257, 4096), (16, 50264, 4096)),
]


def bench(fn) -> float:
    """Median milliseconds (``triton.testing.do_bench``: warm-up, then the median of repeated runs)."""
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def operands(m: int, n: int, k: int, dtype) -> tuple:
    return torch.randn(m, k, device="cuda", dtype=dtype), torch.randn(n, k, device="cuda", dtype=dtype)


def run_gemm(m: int, n: int, k: int, dtype) -> dict:
    a, b = operands(m, n, k, dtype)
    ref = a.double() @ b.double().T
    c = matmul(a, b)
    err = ((c.double() - ref).norm() / ref.norm()).item()
    ms = bench(lambda: matmul(a, b))
    ms_cublas = bench(lambda: torch.matmul(a, b.T))
    return {"shape": [m, n, k], "ms": ms, "tflops": 2 * m * n * k / ms / 1e9, "cublas_ms": ms_cublas, "rel_err": err}


def run_pad(m: int, n: int, k: int, dtype) -> dict:
    """The pad kernel alone (both operands, one launch), the two ``F.pad`` calls, and a device copy of as
    many elements as A and B hold; bandwidths count one read of A and B and one write of the workspace."""
    a, b = operands(m, n, k, dtype)
    kp = k + -k % 8
    run = pad_mod.pad_runner(a, b, 8, "cuda")
    pa, pb = run(a, b)
    torch.cuda.synchronize()
    assert torch.equal(pa[:, :k], a) and torch.equal(pb[:, :k], b) and not pa[:, k:].any() and not pb[:, k:].any()
    es = a.element_size()
    moved = (m + n) * (k + kp) * es
    flat = torch.randn((m + n) * k, device="cuda", dtype=dtype)
    ms_copy = bench(lambda: torch.empty_like(flat).copy_(flat))
    ms_pad = bench(lambda: run(a, b))
    words = pad_mod.pad_runner(a, b, 8, "cuda", chunked=False)  # the other lane layout
    wa, wb = words(a, b)
    torch.cuda.synchronize()
    assert torch.equal(wa, pa) and torch.equal(wb, pb)
    ms_words = bench(lambda: words(a, b))
    f = torch.nn.functional.pad
    ms_torch = bench(lambda: (f(a, (0, kp - k)), f(b, (0, kp - k))))
    copy_gbs = 2 * (m + n) * k * es / ms_copy / 1e6
    pad_gbs = moved / ms_pad / 1e6
    return {"pad_ms": ms_pad, "pad_gbs": pad_gbs, "copy_ms": ms_copy, "copy_gbs": copy_gbs,
            "of_copy": pad_gbs / copy_gbs, "words_ms": ms_words, "words_of_copy": moved / ms_words / 1e6 / copy_gbs,
            "torch_pad_ms": ms_torch}  # fmt: skip


def run_narrow(m: int, n: int, k: int, dtype) -> float:
    """TFLOP/s of ``matmul`` with padding off (the narrow variant for an odd K)."""
    saved, gm.PAD_K_MIN_MN = gm.PAD_K_MIN_MN, 1 << 62
    gm._DISPATCH.clear()
    try:
        a, b = operands(m, n, k, dtype)
        return 2 * m * n * k / bench(lambda: matmul(a, b)) / 1e9
    finally:
        gm.PAD_K_MIN_MN = saved
        gm._DISPATCH.clear()


def table(rows: list) -> str:
    head = (f"{'shape':15s} {'odd us':>8s} {'TFLOP/s':>8s} {'aligned us':>10s} {'ratio':>6s} {'cuBLAS odd us':>13s} "
            f"{'cuBLAS al us':>12s} {'pad us':>7s} {'pad GB/s':>9s} {'copy GB/s':>9s} {'of copy':>7s} "
            f"{'words us':>8s} {'of copy':>7s} {'F.pad us':>8s} {'narrow':>7s}")  # fmt: skip
    lines = [head]
    for r in rows:
        o, al, p = r["odd"], r["aligned"], r.get("pad") or {}

        def cell(key: str, width: int, scale: float = 1.0, fmt: str = ".1f", src: dict = p) -> str:
            return f"{src[key] * scale:{width}{fmt}}" if key in src else " " * (width - 1) + "-"

        narrow = f"{r['narrow_tflops']:7.1f}" if r.get("narrow_tflops") else "      -"
        lines.append(
            f"{r['name']:15s} {o['ms'] * 1e3:8.1f} {o['tflops']:8.1f} {al['ms'] * 1e3:10.1f} {r['ratio']:6.2f} "
            f"{o['cublas_ms'] * 1e3:13.1f} {al['cublas_ms'] * 1e3:12.1f} {cell('pad_ms', 7, 1e3)} "
            f"{cell('pad_gbs', 9, fmt='.0f')} {cell('copy_gbs', 9, fmt='.0f')} {cell('of_copy', 7, fmt='.2f')} "
            f"{cell('words_ms', 8, 1e3)} {cell('words_of_copy', 7, fmt='.2f')} {cell('torch_pad_ms', 8, 1e3)} {narrow}"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT"))
    ap.add_argument("--narrow", action="store_true", help="also time the narrow variant of padded shapes")
    args = ap.parse_args()
    os.environ.setdefault("WAVEC_CACHE_DIR", "/tmp/wavec-bench-cache")
    print(torch.cuda.get_device_name(), flush=True)
    rows = []
    for name, dtype, odd, aligned in SHAPES:
        o, al = run_gemm(*odd, dtype), run_gemm(*aligned, dtype)
        padded = gm.pads_k(*odd)
        row = {"name": name, "dtype": str(dtype), "odd": o, "aligned": al, "ratio": o["tflops"] / al["tflops"]}
        if padded:
            row["pad"] = run_pad(*odd, dtype)
        if padded and args.narrow:
            row["narrow_tflops"] = run_narrow(*odd, dtype)
        rows.append(row)
        print(f"{name}: ratio {row['ratio']:.2f} err {o['rel_err']:.1e}", flush=True)
    note = (
        "(ratio: odd TFLOP/s / aligned TFLOP/s, goal >= 0.85; pad GB/s: A, B read + workspace written, of copy:"
        " of the copy's GB/s; words: the pad kernel's other lane layout, chunked=False)"
    )
    text = table(rows) + "\n" + note
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "odd_sizes.json"), "w") as f:
            json.dump(rows, f, indent=1)
        with open(os.path.join(args.out, "odd_sizes.txt"), "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
