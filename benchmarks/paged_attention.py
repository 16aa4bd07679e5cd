"""Paged decode attention (``wavec.kernels.paged_attention``) against its anchors, one run, medians of
``triton.testing.do_bench``, fresh inputs per shape (all sequences of a row the same length, so the anchors
need no padding):

- gather + SDPA: each sequence's K/V gathered from the block pool into contiguous tensors (what a caller
  without a paged kernel does), then ``scaled_dot_product_attention`` with torch's default backend choice;
- SDPA flash (dense): the flash backend over K/V already contiguous — a dense-cache decode, no gather
  (grouped-query heads through ``enable_gqa``; q_len > 1 rows are timed without the causal mask, whose
  top-left alignment in SDPA is not a decode mask: same work, anchor only).

Run from the repository root: ``python -m benchmarks.paged_attention [--quick]``.  Columns: wavec
time and the K/V bandwidth it reaches (bytes of K and V of every sequence / time), then each anchor's time
and wavec's speed relative to it (> 1: wavec faster)."""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
import triton.testing
from torch.nn.attention import SDPBackend, sdpa_kernel

from wavec.kernels.paged_attention import paged_attention

SHAPES = [  # batch, context, q heads, kv heads, head dim, page, q_len
    (1, 2048, 32, 32, 128, 16, 1),
    (1, 8192, 32, 8, 128, 16, 1),
    (8, 2048, 32, 8, 128, 16, 1),
    (32, 1024, 32, 8, 128, 16, 1),
    (16, 4096, 32, 8, 128, 32, 1),
    (64, 512, 16, 16, 64, 16, 1),
    (8, 2048, 32, 8, 128, 16, 4),
]


def _us(fn) -> float:
    return 1e3 * triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def _inputs(batch: int, ctx: int, heads: int, kv_heads: int, d: int, page: int, q_len: int, device: str = "cuda"):
    """bf16 q and a block pool with 2 spare blocks; each sequence's blocks a random permutation of the
    pool's, table entries past the end -1."""
    n_blocks = -(-ctx // page)
    pool = batch * n_blocks + 2
    q = torch.randn(batch, q_len, heads, d, device=device, dtype=torch.bfloat16)
    kc, vc = (torch.randn(pool, page, kv_heads, d, device=device, dtype=torch.bfloat16) for _ in range(2))
    tables = torch.full((batch, n_blocks + 1), -1, dtype=torch.int32, device=device)
    tables[:, :n_blocks] = torch.randperm(pool, device=device)[: batch * n_blocks].view(batch, n_blocks).int()
    lens = torch.full((batch,), ctx, dtype=torch.int32, device=device)
    return q, kc, vc, tables, lens


def _gathered(cache, tables, n_blocks: int):
    """[B, Hkv, S, D] of each sequence's first ``n_blocks`` blocks, contiguous."""
    b, (page, kv_heads, d) = tables.shape[0], cache.shape[1:]
    rows = cache[tables[:, :n_blocks].long()].reshape(b, n_blocks * page, kv_heads, d)
    return rows.transpose(1, 2).contiguous()


def row(batch: int, ctx: int, heads: int, kv_heads: int, d: int, page: int, q_len: int) -> str:
    q, kc, vc, bt, lens = _inputs(batch, ctx, heads, kv_heads, d, page, q_len)
    n_blocks = -(-ctx // page)
    t_wc = _us(lambda: paged_attention(q, kc, vc, bt, lens))
    qt = q.transpose(1, 2)

    def gather_sdpa():
        k, v = _gathered(kc, bt, n_blocks)[:, :, :ctx], _gathered(vc, bt, n_blocks)[:, :, :ctx]
        return F.scaled_dot_product_attention(qt, k, v, enable_gqa=True)

    t_gather = _us(gather_sdpa)
    k, v = _gathered(kc, bt, n_blocks)[:, :, :ctx].contiguous(), _gathered(vc, bt, n_blocks)[:, :, :ctx].contiguous()
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            t_flash = _us(lambda: F.scaled_dot_product_attention(qt, k, v, enable_gqa=True))
        flash = f"{t_flash:.1f} | {t_flash / t_wc:.2f}x"
    except RuntimeError as exc:  # flash refuses some shapes / GPUs: say so instead of timing another kernel
        flash = f"n/a ({str(exc).splitlines()[0][:40]}) | -"
    kv_bytes = 2 * batch * ctx * kv_heads * d * kc.element_size()
    return (
        f"| B={batch} ctx={ctx} H={heads}/{kv_heads} d{d} page{page} q{q_len} | {t_wc:.1f} | "
        f"{kv_bytes / t_wc / 1e3:.0f} | {t_gather:.1f} | {t_gather / t_wc:.2f}x | {flash} |"
    )


def main(quick: bool = False) -> None:
    print("| shape (bf16) | wavec µs | K/V GB/s | gather+SDPA µs | vs it | SDPA flash dense µs | vs it |")
    print("|---|---|---|---|---|---|---|")
    for shape in SHAPES[:2] if quick else SHAPES:
        print(row(*shape), flush=True)


if __name__ == "__main__":
    main("--quick" in sys.argv)
