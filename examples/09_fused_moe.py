"""Example 9: a mixture-of-experts layer, ``wavec.kernels.fused_moe``: route, then run the chosen experts.

Each token picks its top-k experts from a softmax over router logits; each expert is a gated MLP,
``w2[e] @ (silu(w1[e, :I] @ x) * (w1[e, I:] @ x))``, and the token's output is the routing-weighted sum of
its experts' outputs.  ``fused_moe`` runs it as a few launches, with no host synchronisation:

1. ``topk_softmax``: the top-k experts and their weights per token;
2. ``moe_align_block_size``: the (token, slot) pairs sorted by expert, each expert's run padded to the
   token block, so one workgroup's rows all use one expert's weights;
3. the up-projection: token rows gathered by id, the gate and up halves of that expert's ``w1`` in two
   accumulators of one workgroup, ``silu(gate) * up`` written in sorted order;
4. the down-projection: times ``w2`` of the block's expert, weighted, one row per (token, slot); then a
   sum over each token's k rows (``deterministic=False`` adds into the output with atomics instead).

A decode-sized batch and a prefill-sized one, against torch in f32 looping over the experts.  On a GPU if
there is one, else on the emulator.
"""

import sys

import torch
from _check import device_and_backend, report

from wavec.kernels.fused_moe import fused_moe, reference


def main() -> bool:
    device, backend = device_and_backend()
    experts, top_k = 8, 2
    hidden, inter = (64, 32) if backend == "emulator" else (1024, 512)
    w1 = (torch.randn(experts, 2 * inter, hidden, device=device) / hidden**0.5).bfloat16()
    w2 = (torch.randn(experts, hidden, inter, device=device) / inter**0.5).bfloat16()
    ok = True
    for tokens in (3, 40) if backend == "emulator" else (3, 1000):
        x = torch.randn(tokens, hidden, device=device, dtype=torch.bfloat16)
        logits = torch.randn(tokens, experts, device=device)
        for deterministic in (True, False):
            out = fused_moe(x, w1, w2, logits, top_k, True, deterministic=deterministic, backend=backend)
            weights, ids = torch.topk(torch.softmax(logits.float(), -1), top_k)
            ref = reference(x, w1, w2, weights / weights.sum(-1, keepdim=True), ids)
            combine = "sum over k" if deterministic else "atomic adds"
            ok = report(f"MoE bf16 T={tokens} E=8 k=2, {combine}", out, ref, 1e-2, backend) and ok
    return ok


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
