"""``python -m wavec``: ``--version``; ``tune gemm --shapes M,N,K ... [--space SYMBOL=v1,v2 ...] [--prune-top
N [--prune-model mlp|rank]]`` tunes the GEMM on this GPU (``--prune-top``: only the performance model's N
best are timed; ``rank``: ordered by the configuration ranking model), ``tune moe
--model NAME`` fits the routing-aware MoE dispatch (``cli.tune_moe``); ``compile``, ``cache`` and ``doctor``
live in :mod:`wavec.cli`."""

from __future__ import annotations

import argparse
import sys


def _space_arg(items) -> dict:
    from .tuning.plan import DEFAULT_SPACE

    space = dict(DEFAULT_SPACE)
    for item in items or ():
        name, _, values = item.partition("=")
        if name == "waves":  # waves=2x2,2x4
            space[name] = [tuple(int(x) for x in v.split("x")) for v in values.split(",")]
        else:
            space[name] = [int(v) for v in values.split(",")]
    return space


def _tune(args) -> int:
    import wavec as wc

    from .compiler import gpu_visible
    from .errors import WavecError
    from .tuning.cache import gpu_name
    from .tuning.gemm import ceiling_report, tune_gemm

    if args.kernel not in ("gemm", "moe"):
        print(f"wavec tune: unknown kernel {args.kernel!r} (known: gemm, moe)", file=sys.stderr)
        return 2
    if args.kernel == "gemm" and not args.shapes:
        print("wavec tune gemm: --shapes M,N,K ... is required", file=sys.stderr)
        return 2
    if args.kernel == "moe":
        from .cli import tune_moe

        return tune_moe(args)
    if args.prune_top is not None and args.prune_top < 1:
        print(f"wavec tune gemm: --prune-top must be >= 1, got {args.prune_top}", file=sys.stderr)
        return 2
    if not gpu_visible():
        print(
            "wavec tune: error: tuning times kernels on a CUDA GPU, and none is visible "
            "(torch.cuda.is_available() is False)",
            file=sys.stderr,
        )
        return 2
    shapes = [tuple(int(x) for x in s.split(",")) for s in args.shapes]
    try:
        prune = {}
        if args.prune_top:
            from .tuning.perf_prune import PerfRanker

            # the performance model ranks every compiled candidate per shape; only the top N are timed
            prune = {"rank": PerfRanker(gpu_name(), model=args.prune_model), "prune_to": args.prune_top}
        res = tune_gemm(
            shapes,
            dtype=getattr(wc, args.dtype or "f16"),
            space=_space_arg(args.space),
            rounds=args.rounds,
            warmup=args.warmup,
            workers=args.workers or None,
            use_cache=not args.force,
            **prune,
        )
    except WavecError as e:
        print(f"wavec tune: {e}", file=sys.stderr)
        return 1
    for row in ceiling_report(res, gpu=gpu_name()):
        t = row["seconds"]
        flops = 2.0 * row["shape"][0] * row["shape"][1] * row["shape"][2]
        extra = (
            f"{t * 1e6:9.1f} us {flops / t / 1e12:7.1f} TFLOP/s {row['percent']:5.1f}% of ceiling ({row['limiter']})"
            if t
            else "(cached)"
        )
        print(f"{'x'.join(map(str, row['shape'])):>18}  {row['config']:<60} {extra}")
    return 0


def main(argv=None) -> int:
    from . import __version__, cli

    p = argparse.ArgumentParser(prog="python -m wavec")
    p.add_argument("--version", action="version", version=f"wavec {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    cli.add_parsers(sub)
    t = sub.add_parser("tune", help="autotune a library kernel on the visible GPU")
    t.add_argument("kernel", help="gemm or moe")
    t.add_argument("--shapes", nargs="+", help="gemm: M,N,K ...")
    t.add_argument("--model", help="moe: a model of moe_shapes.csv (OLMoE-1B-7B, Qwen3-30B-A3B, ...)")
    t.add_argument("--budget-min", type=float, default=25.0, help="moe: minutes for pool and profiling")
    t.add_argument("--max-configs", type=int, default=None, help="moe: at most this many configurations")
    t.add_argument("--points", type=int, default=None, help="moe: profile this many of the 25 (T, beta) points")
    t.add_argument("--dry-run", action="store_true", help="moe: print the region rules and candidates; no GPU work")
    t.add_argument(
        "--swap", action="store_true", help="moe: add the swap-AB wgmma configurations (sm_90a; not measured yet)"
    )
    t.add_argument("--wgmma", action="store_true", help="moe: add the wgmma token blocks of 64 and 128 tokens (sm_90a)")
    t.add_argument(
        "--split-k", action="store_true", help="moe: add split-K down-projections where the region rule applies"
    )
    t.add_argument(
        "--atomic",
        action="store_true",
        help="moe: time the pool on the atomic combine (what deterministic=False runs); default: the deterministic one",
    )
    t.add_argument("--space", nargs="*", help="SYMBOL=v1,v2 or waves=2x2,2x4 (replaces that axis of the default)")
    t.add_argument("--dtype", default=None, choices=["f16", "bf16"], help="gemm: f16 (default); moe: bf16 (default)")
    t.add_argument("--rounds", type=int, default=7)
    t.add_argument("--warmup", type=int, default=3)
    t.add_argument("--workers", type=int, default=0)
    t.add_argument("--force", action="store_true", help="re-tune shapes already in the tuning cache")
    t.add_argument(
        "--prune-top",
        type=int,
        default=None,
        metavar="N",
        help="gemm: rank the candidates by the performance model's predicted time and time only the top N",
    )
    t.add_argument(
        "--prune-model",
        default="mlp",
        choices=["mlp", "rank"],
        help="gemm --prune-top: rank by the MLP's predicted time (default) or the configuration ranking model",
    )
    args = p.parse_args(argv)
    return _tune(args) if args.cmd == "tune" else cli.run(args)


if __name__ == "__main__":
    sys.exit(main())
