"""Example 8: decode attention over a paged KV cache, read through the block table (vLLM's layout).

The cache is a pool of fixed-size blocks ``[num_blocks, page_size, kv_heads, head_dim]``; each sequence
owns a list of blocks (its row of ``block_tables``), handed out from a free list as it grows, so its
positions are scattered over the pool.  ``wavec.kernels.paged_attention`` reads them with a two-level
data-dependent mapping, the heart of its loop body::

    pos = wc.minimum(wc.index(N), seq_len - 1)                  # never read past the sequence's end
    blk = wc.read(block_tables, mapping={P: pos // page})       # the page of each key
    k = wc.read(k_cache, mapping={NB: blk, PG: pos % page})     # its row in that page: [N, D]

Each workgroup serves one (sequence, kv head, split of the keys): the query heads of a grouped-query group
are the rows of one tile and share every K/V read; a second kernel combines the splits' partial results
(``wavec.kernels.decode``, flash-decoding).  Two steps run here: a plain decode step (one new token per sequence)
and a speculative step that verifies four tokens at once (causal among them).  On a GPU if there is one,
else on the emulator.
"""

import sys

import torch
from _check import device_and_backend, report

from wavec.kernels.paged_attention import paged_attention

PAGE, KV_HEADS, HEADS, HEAD_DIM = 16, 2, 8, 64


def paged_cache(lengths: list[int], num_blocks: int, device: str):
    """A block pool filled with random K/V, and block tables that hand each sequence blocks from a shuffled
    free list (unused entries -1, as a serving engine leaves them)."""
    k_cache = torch.randn(num_blocks, PAGE, KV_HEADS, HEAD_DIM, device=device, dtype=torch.float16)
    v_cache = torch.randn(num_blocks, PAGE, KV_HEADS, HEAD_DIM, device=device, dtype=torch.float16)
    free = torch.randperm(num_blocks).tolist()
    width = max(-(-n // PAGE) for n in lengths)
    tables = torch.full((len(lengths), width), -1, dtype=torch.int32)
    for b, n in enumerate(lengths):
        for j in range(-(-n // PAGE)):
            tables[b, j] = free.pop()
    return k_cache, v_cache, tables.to(device), torch.tensor(lengths, dtype=torch.int32, device=device)


def reference(q, k_cache, v_cache, tables, lengths):
    """Each sequence's K/V gathered into a contiguous tensor, then f32 SDPA (causal bottom-right)."""
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    q_len = q.shape[1]
    for b, n in enumerate(lengths.tolist()):
        pos = torch.arange(n, device=q.device)
        blocks = tables[b, pos // PAGE].long()
        k, v = (c[blocks, pos % PAGE].float().repeat_interleave(HEADS // KV_HEADS, 1).transpose(0, 1)
                for c in (k_cache, v_cache))  # fmt: skip
        seen = pos[None, :] <= (n - q_len + torch.arange(q_len, device=q.device))[:, None]
        out[b] = torch.nn.functional.scaled_dot_product_attention(
            q[b].float().transpose(0, 1), k, v, attn_mask=seen
        ).transpose(0, 1)
    return out


def main() -> bool:
    device, backend = device_and_backend()
    lengths = [1, 40, 130] if backend == "emulator" else [1, 40, 1300, 4096]
    k_cache, v_cache, tables, lens = paged_cache(lengths, sum(-(-n // PAGE) for n in lengths) + 8, device)
    ok = True
    for q_len in (1, 4):
        q = torch.randn(len(lengths), q_len, HEADS, HEAD_DIM, device=device, dtype=torch.float16)
        out = paged_attention(q, k_cache, v_cache, tables, lens.clamp_min(q_len), backend=backend)
        ref = reference(q, k_cache, v_cache, tables, lens.clamp_min(q_len))
        ok = report(f"paged decode f16 GQA 4, q_len {q_len}", out, ref, 2e-3, backend) and ok
    return ok


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
