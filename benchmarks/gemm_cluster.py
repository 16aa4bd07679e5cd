"""2-workgroup cluster GEMM (TMA multicast of the shared operand) beside the same GEMM without clusters and
cuBLAS, in one run.

For each shape and dtype: wavec ``matmul(mma="wgmma")`` with ``cluster=(1, 1)`` (its default plan, the
persistent grid where ``wgmma_plan`` picks it), "flat": the same with ``persistent=False`` (as the
cluster variants run), ``cluster=(2, 1)`` (along M: B's tile multicast) and
``cluster=(1, 2)`` (along N: A's tile multicast), and cuBLAS (``torch.nn.functional.linear``, the same
``a @ b.T`` into the input dtype).  Each is timed with ``triton.testing.do_bench`` (median of CUDA-event
timings after warm-up) in ``--rounds`` interleaved rounds, keeping the median of its rounds; inputs are
fresh random and, for problems that fit in L2, rotated over several sets.  Each wavec variant's C is
checked against cuBLAS's first (a wrong kernel is not timed).  Prints a table of TFLOP/s and the ratio
to cuBLAS; ``--csv PATH`` also writes it.

    python benchmarks/gemm_cluster.py [--dtypes bf16,f16] [--shapes 4096x6144x4096,...] [--rounds 3]
"""

import argparse
import csv
import itertools
import statistics

import torch
import torch.nn.functional as F
from triton.testing import do_bench

from wavec.kernels.gemm import matmul

SHAPES = [(4096, 6144, 4096), (8192, 8192, 8192), (2048, 5120, 2880), (512, 28672, 4096)]
L2_BYTES = 50 * 2**20
# name -> (cluster, persistent); clusters turn the persistent grid off, so "flat" is their like-for-like
VARIANTS = {
    "no cluster": ((1, 1), None),
    "flat": ((1, 1), False),
    "cluster M": ((2, 1), None),
    "cluster N": ((1, 2), None),
}
TORCH_DT = {"f16": torch.float16, "bf16": torch.bfloat16}


def _inputs(m: int, n: int, k: int, dt: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor]]:
    sets = max(1, min(8, -(-4 * L2_BYTES // ((m + n) * k * 2))))  # rotate past the L2
    return [(torch.randn(m, k, device="cuda").to(dt), torch.randn(n, k, device="cuda").to(dt)) for _ in range(sets)]


def _timer(fn, sets):
    it = itertools.cycle(sets)
    return lambda: do_bench(lambda: fn(*next(it)), warmup=25, rep=100, return_mode="median")


def _correct(fn, a, b) -> bool:
    ref = F.linear(a, b).float()
    got = fn(a, b).float()
    return bool(torch.isfinite(got).all()) and (got - ref).norm().item() <= 2e-2 * ref.norm().item()


def time_shape(m: int, n: int, k: int, dt: torch.dtype, rounds: int) -> dict[str, float | None]:
    """Median milliseconds per implementation (None: its result was wrong or it failed to build)."""
    sets = _inputs(m, n, k, dt)
    impls = {"cuBLAS": F.linear}
    for name, (cluster, persistent) in VARIANTS.items():
        impls[name] = lambda a, b, c=cluster, p=persistent: matmul(a, b, mma="wgmma", cluster=c, persistent=p)
    timers, out = {}, {}
    for name, fn in impls.items():
        try:
            ok = _correct(fn, *sets[0])
        except Exception as exc:  # noqa: BLE001 (a variant that does not build is reported, not fatal)
            print(f"  {name}: {type(exc).__name__}: {str(exc)[:200]}")
            ok = False
        if ok:
            timers[name] = _timer(fn, sets)
        else:
            out[name] = None
    ms: dict[str, list[float]] = {name: [] for name in timers}
    for _ in range(rounds):
        for name, timer in timers.items():
            ms[name].append(timer())
    return {**out, **{name: statistics.median(v) for name, v in ms.items()}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dtypes", default="bf16,f16")
    p.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--csv", default=None)
    args = p.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    do_bench(lambda: torch.randn(4096, 4096, device="cuda") @ torch.randn(4096, 4096, device="cuda"), rep=1000)
    names = ["cuBLAS", *VARIANTS]
    rows = []
    header = f"{'shape':>20} {'dt':>4} " + " ".join(f"{n:>14}" for n in names) + "  best/cuBLAS"
    print(header + "\n" + "-" * len(header))
    for dt, (m, n, k) in itertools.product(args.dtypes.split(","), shapes):
        ms = time_shape(m, n, k, TORCH_DT[dt], args.rounds)
        tflops = {name: (2 * m * n * k / (t * 1e-3) / 1e12 if t else None) for name, t in ms.items()}
        cells = " ".join(f"{tflops[x]:>8.0f} TF/s" if tflops.get(x) else f"{'wrong':>14}" for x in names)
        wavec_best = min((t for name, t in ms.items() if name != "cuBLAS" and t), default=None)
        ratio = ms["cuBLAS"] / wavec_best if wavec_best and ms["cuBLAS"] else float("nan")
        print(f"{f'{m}x{n}x{k}':>20} {dt:>4} {cells}  {ratio:>10.3f}x")
        rows.append({"M": m, "N": n, "K": k, "dtype": dt, **{f"{x}_ms": ms.get(x) for x in names}})
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
