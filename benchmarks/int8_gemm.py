"""int8 and tf32 GEMMs (issue #20 item 6) beside torch in one run (H100).

int8: ``matmul(a, b)`` of int8 a [M, K], b [N, K] (exact int32 C) against ``torch._int_mm(a, b.T)``
(cuBLASLt's int8 GEMM); tf32: ``matmul(a, b, allow_tf32=True)`` of float32 inputs against
``torch.matmul(a, b.T)`` with ``torch.backends.cuda.matmul.allow_tf32 = True`` (and, for scale, without:
true f32).  Both wavec instruction kinds are timed (mma.sync, and wgmma on sm_90); every result is
checked (int8 exactly, tf32 against float64) before it is timed.

python benchmarks/int8_gemm.py [--out DIR] [--shapes small|llm]
"""

import argparse
import json
import os

import torch
import triton.testing

from wavec.kernels.gemm import matmul

SHAPES = {
    "small": [(512, 512, 512), (1024, 1024, 1024)],
    "llm": [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 11008, 4096), (4096, 4096, 11008), (128, 4096, 4096),
            (4095, 4097, 4093)],
}  # fmt: skip


def bench(fn) -> float:
    """Median milliseconds (``triton.testing.do_bench``, as the other benchmarks time)."""
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def tops(m: int, n: int, k: int, ms: float) -> float:
    return 2 * m * n * k / ms / 1e9


def int8_row(m: int, n: int, k: int, kinds: list[str]) -> dict:
    a = torch.randint(-128, 128, (m, k), device="cuda", dtype=torch.int8)
    b = torch.randint(-128, 128, (n, k), device="cuda", dtype=torch.int8)
    ref = a.long() @ b.long().T
    row: dict = {"shape": [m, n, k]}
    for kind in kinds:
        c = matmul(a, b, mma=kind)
        assert torch.equal(c.long(), ref), f"int8 {kind} {m}x{n}x{k}: wrong result"
        row[kind] = tops(m, n, k, bench(lambda kind=kind: matmul(a, b, mma=kind)))
    if m > 16 and k % 8 == 0 and n % 8 == 0:  # torch._int_mm's shape rules
        bt = b.T.contiguous()
        row["torch._int_mm"] = tops(m, n, k, bench(lambda: torch._int_mm(a, bt)))
    return row


def tf32_row(m: int, n: int, k: int, kinds: list[str]) -> dict:
    a, b = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda")
    ref = a.double() @ b.double().T
    row: dict = {"shape": [m, n, k]}
    for kind in kinds:
        c = matmul(a, b, mma=kind, allow_tf32=True)
        row[f"{kind}_err"] = ((c.double() - ref).norm() / ref.norm()).item()
        row[kind] = tops(m, n, k, bench(lambda kind=kind: matmul(a, b, mma=kind, allow_tf32=True)))
    saved = torch.backends.cuda.matmul.allow_tf32
    try:
        for allow in (True, False):
            torch.backends.cuda.matmul.allow_tf32 = allow
            name = "torch tf32" if allow else "torch f32"
            row[f"{name}_err"] = ((torch.matmul(a, b.T).double() - ref).norm() / ref.norm()).item()
            row[name] = tops(m, n, k, bench(lambda: torch.matmul(a, b.T)))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    return row


def _fmt(row: dict, keys: list[str]) -> str:
    return "  ".join(f"{k} {row[k]:7.1f}" for k in keys if k in row)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--shapes", default="llm", choices=sorted(SHAPES))
    args = ap.parse_args()
    os.environ.setdefault("WAVEC_CACHE_DIR", "/tmp/wavec-bench-cache")
    kinds = ["mma_sync"] + (["wgmma"] if torch.cuda.get_device_capability() == (9, 0) else [])
    rows = {"int8": [], "tf32": []}
    for m, n, k in SHAPES[args.shapes]:
        r = int8_row(m, n, k, kinds)
        rows["int8"].append(r)
        print(f"int8 {m}x{n}x{k}: TOP/s " + _fmt(r, [*kinds, "torch._int_mm"]))
        r = tf32_row(m, n, k, kinds)
        rows["tf32"].append(r)
        errs = "  ".join(f"{k[:-4]} {r[k]:.1e}" for k in r if k.endswith("_err"))
        print(f"tf32 {m}x{n}x{k}: TFLOP/s " + _fmt(r, [*kinds, "torch tf32", "torch f32"]) + f"  rel err {errs}")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "int8_gemm.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
