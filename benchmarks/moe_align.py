"""Routing preparation (``moe_align_block_size``) against its anchors, one run, medians of
``triton.testing.do_bench`` on fresh inputs per configuration: wavec's kernel and a torch reference
(sort-based: ``argsort`` + ``bincount`` + padding, all on the device) timed beside it; vLLM's
``moe_align_block_size`` too when vLLM is importable.  Target (issue 19): <= 15 us at T <= 256, k = 8.

    python benchmarks/moe_align.py [--quick]
"""

from __future__ import annotations

import sys

import torch
import triton.testing

from wavec.kernels.moe_align import check_alignment, moe_align_block_size, reference


def _us(fn) -> float:
    return 1000 * triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def torch_align(topk_ids: torch.Tensor, num_experts: int, block: int):
    """The contract with torch ops on the device (a sort, a histogram, a padded scatter)."""
    flat = topk_ids.reshape(-1)
    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + block - 1) // block * block
    ends = torch.cumsum(padded, 0)
    starts = ends - padded
    order = torch.argsort(flat, stable=True)
    rank = torch.arange(flat.numel(), device=flat.device) - (torch.cumsum(counts, 0) - counts)[flat[order]]
    slots = flat.numel() + num_experts * (block - 1)
    sorted_ids = torch.full((slots,), flat.numel(), dtype=torch.int32, device=flat.device)
    sorted_ids[starts[flat[order]] + rank] = order.int()
    blocks = torch.arange(slots // block, device=flat.device) * block
    expert_ids = torch.searchsorted(ends, blocks, right=True).int()
    expert_ids[blocks >= ends[-1]] = -1
    return sorted_ids, expert_ids, ends[-1:].int(), counts.int()


def _vllm():
    try:
        from vllm.model_executor.layers.fused_moe.moe_align_block_size import moe_align_block_size as vllm_align
    except Exception:  # noqa: BLE001 - vLLM is optional
        return None
    return vllm_align


def main(quick: bool) -> None:
    vllm = _vllm()
    print("T | k | E | B | wavec us | torch us | torch/wavec" + (" | vLLM us" if vllm else ""))
    tokens = [1, 16, 64, 256] if quick else [1, 16, 64, 128, 256, 1024, 4096, 32768]
    for t in tokens:
        for e in [8, 64, 128, 256, 512]:
            for b in [16, 64] if not quick else [16]:
                ids = torch.randint(0, e, (t, 8), dtype=torch.int32, device="cuda")
                check_alignment(moe_align_block_size(ids, e, b), reference(ids, e, b), b)
                t_wc = _us(lambda: moe_align_block_size(ids, e, b))
                t_torch = _us(lambda: torch_align(ids, e, b))
                row = f"{t} | 8 | {e} | {b} | {t_wc:.1f} | {t_torch:.1f} | {t_torch / t_wc:.2f}"
                if vllm is not None:
                    row += f" | {_us(lambda: vllm(ids, b, e)):.1f}"
                print(row)


if __name__ == "__main__":
    main("--quick" in sys.argv)
