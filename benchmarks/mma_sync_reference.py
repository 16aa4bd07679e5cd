"""The mma.sync GEMM against cuBLAS and against Triton held to mma.sync on the same Hopper GPU.

    python benchmarks/mma_sync_reference.py [--sizes 4096,8192,MxNxK,...] [--dtypes f16,bf16]
                                            [--configs BMxBNxBKxSxW0xW1,...] [--prefetch off,on]
                                            [--epilogue plain,split]

Issue 5's target is a ratio to cuBLAS, which uses wgmma on Hopper; what a mature compiler reaches with
``mma.sync`` on the same chip is the fairer reference for the instruction's ceiling.  Triton picks wgmma
on sm_90 unless ``DISABLE_MMA_V3=1`` is set when it compiles, so a worker process with that variable
times Triton's autotuned tutorial matmul (``triton_matmul.py``) beside its own cuBLAS, and the PTX of the
kernel it ran is checked for ``mma.sync`` (no ``wgmma``).  The main process times cuBLAS, Triton as it
comes (wgmma) and every wavec mma.sync configuration, without and with ``prefetch_fragments``.  Problems
n^3 (``--sizes n``) or M x N x K (``MxNxK``: short K shows the per-tile fixed cost), fresh random inputs,
``do_bench`` medians; every ratio is to the cuBLAS of its own process.
"""

import argparse
import itertools
import json
import os
import subprocess
import sys
import time

import torch
from triton.testing import do_bench

SYMS_ORDER = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "NUM_STAGES", "GROUP_M")
TORCH_DT = {"f16": torch.float16, "bf16": torch.bfloat16}


def _inputs(shape: tuple, dtype: str) -> tuple:
    m, n, k = shape
    a = torch.randn(m, k, device="cuda", dtype=TORCH_DT[dtype])
    b = torch.randn(n, k, device="cuda", dtype=TORCH_DT[dtype])
    return a, b, (a.float() @ b.float().T)


def _rel_err(c: torch.Tensor, ref: torch.Tensor) -> float:
    assert not c.isnan().any(), "outputs never written"
    return float((c.float() - ref).norm() / ref.norm())


def _ms(fn) -> float:
    return do_bench(fn, warmup=50, rep=300, return_mode="median")


def _triton(shape: tuple, dtype: str) -> dict:
    """cuBLAS and Triton's autotuned matmul at M x N x K in this process; which MMA instruction Triton
    emitted."""
    import triton
    from triton_matmul import _matmul_kernel

    m, n, k = shape
    a, b, ref = _inputs(shape, dtype)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=a.dtype)
    grid = lambda meta: (triton.cdiv(m, meta["BM"]) * triton.cdiv(n, meta["BN"]),)  # noqa: E731

    def run():
        return _matmul_kernel[grid](
            a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)
        )

    handle = run()
    err = _rel_err(c, ref)
    ptx = handle.asm.get("ptx", "") if handle is not None else ""
    inst = "wgmma" if "wgmma.mma_async" in ptx else "mma.sync" if "mma.sync" in ptx else "?"
    return {
        "cublas_ms": _ms(lambda: torch.matmul(a, b.T)),
        "triton_ms": _ms(run),
        "err": err,
        "inst": inst,
        "config": str(_matmul_kernel.best_config),
    }


def _worker(args) -> None:
    out = {_key(s, dt): _triton(s, dt) for s in args.sizes for dt in args.dtypes}
    print("RESULT " + json.dumps(out))


def _triton_mma_sync(args) -> dict:
    env = {**os.environ, "DISABLE_MMA_V3": "1"}
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        "--sizes",
        ",".join("x".join(map(str, s)) for s in args.sizes),
        "--dtypes",
        ",".join(args.dtypes),
    ]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"Triton mma.sync worker failed:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    return json.loads(line.removeprefix("RESULT "))


def _key(shape: tuple, dtype: str) -> str:
    return "x".join(map(str, shape)) + f":{dtype}"


def _wavec_rows(shape: tuple, dtype: str, configs: list, prefetch: list, epilogues: list) -> list:
    import wavec as wc
    from wavec.kernels.gemm import make_gemm
    from wavec.tuning.plan import gemm_config, schedule

    wdt, mma = {"f16": (wc.f16, wc.MMAType.NV_F32_16x8x16_F16), "bf16": (wc.bf16, wc.MMAType.NV_F32_16x8x16_BF16)}[
        dtype
    ]
    a, b, ref = _inputs(shape, dtype)
    c = torch.empty(shape[0], shape[1], device="cuda", dtype=a.dtype)
    if not configs:
        subs, waves = gemm_config(*shape)
        configs = [(tuple(subs[wc.sym(s)] for s in SYMS_ORDER[:4]), waves)]
    rows = []
    for ((bm, bn, bk, st), waves), pf, split in itertools.product(configs, prefetch, epilogues):
        subs = {wc.sym(s): v for s, v in zip(SYMS_ORDER, (bm, bn, bk, st, 8))}
        t0 = time.perf_counter()
        k = wc.compile(
            make_gemm(
                wdt,
                mma_type=mma,
                waves=waves,
                out_dtype=wdt,
                sched=schedule(prefetch_fragments=pf, split_epilogue=split),
            ),
            subs,
            backend="cuda",
            cache=False,
        )
        ct = time.perf_counter() - t0
        c.fill_(float("nan"))
        k(a, b, c)
        err = _rel_err(c, ref)
        m = k.metadata
        name = f"{bm}x{bn}x{bk} s{st} w{waves[0]}x{waves[1]}{' pf' if pf else ''}{' split-epi' if split else ''}"
        rows.append((name, _ms(lambda: k(a, b, c)), err, m.registers, m.spills, ct))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="4096,8192")
    ap.add_argument("--dtypes", default="f16,bf16")
    ap.add_argument("--configs", default="", help="BMxBNxBKxSxW0xW1,... (default: gemm_config's tile)")
    ap.add_argument("--prefetch", default="off,on")
    ap.add_argument("--epilogue", default="plain", help="plain,split: also with SchedulingConstraint.split_epilogue")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.sizes = [tuple(int(x) for x in s.split("x")) if "x" in s else (int(s),) * 3 for s in args.sizes.split(",")]
    args.dtypes = args.dtypes.split(",")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if args.worker:
        _worker(args)
        return
    configs = [
        ((bm, bn, bk, s), (w0, w1))
        for bm, bn, bk, s, w0, w1 in (tuple(int(x) for x in c.split("x")) for c in args.configs.split(",") if c)
    ]
    prefetch = [p == "on" for p in args.prefetch.split(",")]
    epilogues = [e == "split" for e in args.epilogue.split(",")]
    v2 = _triton_mma_sync(args)
    table = []
    for shape in args.sizes:
        for dt in args.dtypes:
            here = _triton(shape, dt)
            other = v2[_key(shape, dt)]
            flops = 2 * shape[0] * shape[1] * shape[2] / 1e9
            name = "x".join(map(str, shape)) if len(set(shape)) > 1 else str(shape[0])
            table.append(
                (name, dt, "cuBLAS", flops / here["cublas_ms"], 1.0, "", "", "", f"{here['cublas_ms'] * 1e3:.1f} us")
            )
            table.append(
                (
                    name,
                    dt,
                    f"Triton {here['inst']} {here['config']}",
                    flops / here["triton_ms"],
                    here["cublas_ms"] / here["triton_ms"],
                    f"{here['err']:.1e}",
                    "",
                    "",
                    f"{here['triton_ms'] * 1e3:.1f} us",
                )
            )
            table.append(
                (
                    name,
                    dt,
                    f"Triton {other['inst']} (DISABLE_MMA_V3) {other['config']}",
                    flops / other["triton_ms"],
                    other["cublas_ms"] / other["triton_ms"],
                    f"{other['err']:.1e}",
                    "",
                    "",
                    f"{other['triton_ms'] * 1e3:.1f} us (its cuBLAS {flops / other['cublas_ms']:.0f})",
                )
            )
            for cfg, ms, err, regs, spills, ct in _wavec_rows(shape, dt, configs, prefetch, epilogues):
                table.append(
                    (
                        name,
                        dt,
                        f"wavec {cfg}",
                        flops / ms,
                        here["cublas_ms"] / ms,
                        f"{err:.1e}",
                        regs,
                        spills,
                        f"{ms * 1e3:.1f} us, compile {ct:.2f} s",
                    )
                )
    print(f"{'shape':>15} {'dt':>4} {'kernel':64} {'TF/s':>7} {'x cuBLAS':>8} {'err':>8} {'regs':>4} {'spill':>5}")
    for name, dt, kernel, tf, ratio, err, regs, spills, note in table:
        print(f"{name:>15} {dt:>4} {kernel[:64]:64} {tf:7.1f} {ratio:8.3f} {err:>8} {regs!s:>4} {spills!s:>5} {note}")


if __name__ == "__main__":
    main()
