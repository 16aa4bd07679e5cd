"""MoE routing (``topk_softmax``) against a torch reference (``softmax`` in f32 + ``torch.topk`` on the
device), one run, medians of ``triton.testing.do_bench`` on fresh inputs per configuration; vLLM's
``topk_softmax`` too when vLLM is importable.  Each configuration is checked against the reference first.

    python benchmarks/topk_softmax.py [--quick]
"""

from __future__ import annotations

import sys

import torch
import triton.testing

from wavec.kernels.moe_routing import check_routing, reference, topk_softmax


def _us(fn) -> float:
    return 1000 * triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def _vllm():
    try:
        from vllm import _custom_ops as ops
    except Exception:  # noqa: BLE001 - vLLM is optional
        return None

    def run(x: torch.Tensor, k: int, renormalize: bool):
        w = torch.empty(x.shape[0], k, dtype=torch.float32, device=x.device)
        ids = torch.empty(x.shape[0], k, dtype=torch.int32, device=x.device)
        src = torch.empty(x.shape[0], k, dtype=torch.int32, device=x.device)
        ops.topk_softmax(w, ids, src, x, renormalize)
        return w, ids

    return run


def main(quick: bool) -> None:
    vllm = _vllm()
    print("T | E | k | dtype | renorm | wavec us | torch us | torch/wavec" + (" | vLLM us" if vllm else ""))
    tokens = [1, 64, 4096] if quick else [1, 16, 64, 256, 1024, 4096, 16384]
    for t in tokens:
        for e, k in [(8, 2), (64, 6), (128, 8), (256, 8), (512, 8)]:
            for dtype in [torch.bfloat16] if quick else [torch.float32, torch.bfloat16]:
                renorm = e != 8
                x = torch.randn(t, e, device="cuda", dtype=dtype)
                w, i = topk_softmax(x, k, renorm)
                check_routing(x, k, renorm, w, i)
                t_wc = _us(lambda: topk_softmax(x, k, renorm))
                t_torch = _us(lambda: reference(x, k, renorm))
                name = str(dtype).removeprefix("torch.")
                row = f"{t} | {e} | {k} | {name} | {renorm} | {t_wc:.1f} | {t_torch:.1f} | {t_torch / t_wc:.2f}"
                if vllm is not None and dtype == torch.float32:
                    row += f" | {_us(lambda: vllm(x, k, renorm)):.1f}"
                print(row)


if __name__ == "__main__":
    main("--quick" in sys.argv)
