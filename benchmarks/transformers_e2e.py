"""End to end: a Llama-3-8B-shaped transformers model (hidden 4096, 32 heads, 8 KV heads, head dim 128,
MLP 14336, vocab 128256; 4 layers by default, random bf16 weights built from ``LlamaConfig``, no download)
with stock attention (SDPA) against ``wavec.integrations.transformers.enable`` (wavec RMSNorm and
attention; linears stay cuBLAS).

Prefill: ``model(ids)`` without a cache for each (batch, length).  Decode: one ``model(token,
past_key_values=cache)`` step on a cache prefilled to the context length, cropped back after each step
(both sides pay transformers' cache concatenation).  Times: median of ``triton.testing.do_bench`` (ms);
speed-up > 1: wavec faster.  Then the per-op breakdown (``torch.profiler``: CUDA time per kernel name,
top ``--top``) of every configuration, stock and wavec, and the wavec report (every fallback counted).

    python -m benchmarks.transformers_e2e [--layers 4] [--decode-kernel decode_attention|attention] [--top 8]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from triton.testing import do_bench

from wavec.integrations import transformers as wt

PREFILL = [(1, 2048), (8, 512)]  # batch, tokens
DECODE = [(1, 2048), (16, 2048)]  # batch, cached tokens
DT = torch.bfloat16
DEVICE = "cuda"


def build(layers: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=layers,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=128256,
        max_position_embeddings=8192,
        rope_theta=500000.0,
    )
    torch.manual_seed(0)
    with torch.device(DEVICE):
        default = torch.get_default_dtype()
        torch.set_default_dtype(DT)
        try:
            model = LlamaForCausalLM(config).eval()
        finally:
            torch.set_default_dtype(default)
    return model


def cases(model) -> dict[str, tuple[Callable[[], torch.Tensor], Callable[[], None]]]:
    """name -> (a forward returning logits, a reset run after it); the decode caches are prefilled here (by
    the stock model), and each step's token is cropped off again (transformers 5: ``crop(-1)``)."""
    from transformers import DynamicCache

    out: dict[str, tuple[Callable[[], torch.Tensor], Callable[[], None]]] = {}
    g = torch.Generator(device=DEVICE).manual_seed(1)
    for b, s in PREFILL:
        ids = torch.randint(0, model.config.vocab_size, (b, s), device=DEVICE, generator=g)
        out[f"prefill {b}x{s}"] = (lambda ids=ids: model(ids, use_cache=False).logits, lambda: None)
    for b, s in DECODE:
        ids = torch.randint(0, model.config.vocab_size, (b, s + 1), device=DEVICE, generator=g)
        cache = DynamicCache(config=model.config)
        with torch.no_grad():
            model(ids[:, :s], past_key_values=cache, use_cache=True)

        def step(ids=ids, cache=cache, s=s) -> torch.Tensor:
            return model(ids[:, s:], past_key_values=cache, use_cache=True).logits

        out[f"decode B={b} ctx={s}"] = (step, lambda cache=cache: cache.crop(-1))
    return out


def timed(fn: Callable[[], torch.Tensor], reset: Callable[[], None]) -> float:
    def once() -> None:
        fn()
        reset()

    with torch.no_grad():
        return do_bench(once, warmup=5, rep=50, return_mode="median")


def breakdown(fn: Callable[[], torch.Tensor], reset: Callable[[], None], top: int) -> list[tuple[str, float]]:
    """(kernel name, µs per forward) of the ``top`` kernels by CUDA time over 5 forwards."""
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fn()
            reset()
        torch.cuda.synchronize()
    rows = [(e.key, e.device_time_total / 5) for e in prof.key_averages() if e.device_time_total > 0]
    return sorted(rows, key=lambda r: -r[1])[:top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--decode-kernel", choices=wt.DECODE_KERNELS, default="decode_attention")
    ap.add_argument("--top", type=int, default=8)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    model = build(args.layers)
    runs = cases(model)
    stock: dict[str, tuple[float, torch.Tensor, list]] = {}
    for name, (fn, reset) in runs.items():
        with torch.no_grad():
            logits = fn().float()
        reset()
        stock[name] = (timed(fn, reset), logits, breakdown(fn, reset, args.top))
    wt.enable(model, decode=args.decode_kernel)
    wt.report().reset()
    print(f"{'case':24} {'stock ms':>9} {'wavec ms':>9} {'speed-up':>8} {'max |dlogit|':>12}")
    wavec: dict[str, list] = {}
    for name, (fn, reset) in runs.items():
        with torch.no_grad():
            logits = fn().float()
        reset()
        ms = timed(fn, reset)
        wavec[name] = breakdown(fn, reset, args.top)
        s_ms, s_logits, _ = stock[name]
        err = (logits - s_logits).abs().max().item()
        print(f"{name:24} {s_ms:9.3f} {ms:9.3f} {s_ms / ms:8.2f} {err:12.4f}")
    for name in runs:
        for side, rows in (("stock", stock[name][2]), ("wavec", wavec[name])):
            print(f"\n{name}, {side}: top kernels, µs per forward")
            for key, us in rows:
                print(f"  {us:10.1f}  {key[:100]}")
    print()
    print(wt.report())


if __name__ == "__main__":
    main()
