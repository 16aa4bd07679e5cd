"""Where a fused MoE call spends its device time: each kernel of ``fused_experts`` (the static rule's
configuration, or ``--config`` labels of ``benchmarks.moe_wgmma.CONFIGS``) and of the vLLM-algorithm
Triton baseline, from ``torch.profiler`` over 20 calls after a warm-up, bf16, balanced routing.

    python -m benchmarks.moe_kernel_times [--models Qwen3-30B-A3B,Mixtral-8x7B-TP2] [--tokens 4096]

Prints, per model and T, one line per kernel: the implementation, the kernel's name, its mean time per
call in us and its share of the implementation's total.
"""

from __future__ import annotations

import argparse
import collections

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks import moe
from wavec.kernels import fused_moe as fm

CALLS = 20


def kernel_times(fn) -> dict[str, float]:
    """Mean device microseconds per call of each kernel ``fn`` launches."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
    times: dict[str, float] = collections.defaultdict(float)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            times[ev.name[:60]] += ev.device_time / CALLS
    return dict(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="Qwen3-30B-A3B,Mixtral-8x7B-TP2")
    ap.add_argument("--tokens", default="4096")
    args = ap.parse_args()
    for m in moe.models(args.models.split(",")):
        e, k, h, i = m["experts"], m["top_k"], m["hidden"], m["intermediate"]
        w1 = (torch.randn(e, 2 * i, h, device="cuda") / h**0.5).bfloat16()
        w2 = (torch.randn(e, h, i, device="cuda") / i**0.5).bfloat16()
        for t in (int(v) for v in args.tokens.split(",")):
            x = torch.randn(t, h, device="cuda").bfloat16()
            wts, ids, _ = moe.routing(t, e, k, 1.0, m["renormalize"], seed=t)
            impls = {"wavec": lambda: fm.fused_experts(x, w1, w2, wts, ids, dispatch="static")}
            if moe.moe_triton is not None:
                impls["vllm_triton"] = lambda: moe.moe_triton.vllm_fused_experts(x, w1, w2, wts, ids)
            for name, fn in impls.items():
                times = kernel_times(fn)
                total = sum(times.values())
                print(f"{m['model']} T={t} {name}: {total:.1f} us a call")
                for kname, us in sorted(times.items(), key=lambda kv: -kv[1]):
                    print(f"  {us:9.1f} us {us / total:6.1%}  {kname}")


if __name__ == "__main__":
    main()
