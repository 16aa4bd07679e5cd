"""Host latency per call of the library entry points beside torch's own ops (issue #25: <= 10 us per call,
p99 <= 2x p50, no call over 1 ms in 2000), on problems so small that the GPU is never the bottleneck.

Each call is timed alone with ``time.perf_counter`` (the Python call returns once its launches are
queued); every 64 calls a synchronize keeps the queue short, outside the timed region.  One run prints
p50 / p99 / max in microseconds for wavec and torch side by side (also written to ``$OUT/host_latency.md``
where ``OUT`` is set).

``--null-driver`` measures wavec's Python share on any machine: CPU tensors, the kernels compiled for
sm_90a, and a driver whose ``cuLaunchKernel`` only returns success (no GPU, no allocator of device
memory; torch's column is then its CPU op and means little).  ``--ops`` picks entry points by name.

    python benchmarks/host_latency.py [--calls 2000] [--null-driver] [--ops softmax,matmul]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

import wavec as wc

F = torch.nn.functional


def latencies(fn, calls: int, sync) -> list[float]:
    for _ in range(50):
        fn()
    sync()
    out = []
    for i in range(calls):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e6)
        if i % 64 == 63:
            sync()
    sync()
    return out


def _stats(xs: list[float]) -> str:
    q = statistics.quantiles(xs, n=100)
    return f"{statistics.median(xs):.1f} | {q[98]:.1f} | {max(xs):.0f}"


def install_null_driver() -> None:
    """Route the "cuda" backend through a launcher that validates and packs as on a GPU but whose driver
    does nothing, for CPU tensors (``--null-driver``; ``wavec.runtime.null_driver``)."""
    from wavec.runtime import null_driver

    null_driver.install()


def cases(dev: str, backend: str | None) -> list:
    from wavec.kernels import (
        decode_attention,
        index_select,
        layer_norm,
        linear,
        matmul,
        rms_norm,
        silu_and_mul,
        softmax,
    )
    from wavec.kernels.attention import attention
    from wavec.kernels.paged_attention import paged_attention

    h, kw = torch.float16, {"backend": backend} if backend else {}
    a, b = torch.randn(128, 64, device=dev, dtype=h), torch.randn(128, 64, device=dev, dtype=h)
    x, w = torch.randn(64, 1024, device=dev, dtype=h), torch.randn(1024, device=dev, dtype=h)
    table, idx = torch.randn(1000, 256, device=dev, dtype=h), torch.randint(0, 1000, (64,), device=dev)
    gu = torch.randn(64, 2 * 512, device=dev, dtype=h)
    q = torch.randn(2, 20, 256, 64, device=dev, dtype=h)
    qd = torch.randn(1, 1, 32, 128, device=dev, dtype=h)
    kd = torch.randn(1, 256, 8, 128, device=dev, dtype=h)
    kc = torch.randn(16, 16, 8, 128, device=dev, dtype=h)  # 256 keys in 16 pages of 16
    tables, lens = (
        torch.arange(16, device=dev, dtype=torch.int32)[None],
        torch.full((1,), 256, device=dev, dtype=torch.int32),
    )
    from wavec.kernels import rows

    direct, y = rows._kernel("softmax", wc.f16, 1024, backend), torch.empty_like(x)
    return [
        *_moe_cases(dev, kw),
        *[
            ("a compiled kernel called directly (softmax 64x1024)", lambda: direct(x, y), lambda: torch.softmax(x, -1)),
            ("matmul 128x128x64", lambda: matmul(a, b, **kw), lambda: torch.matmul(a, b.T)),
            ("linear 128x128x64", lambda: linear(a, b, **kw), lambda: F.linear(a, b)),
            ("softmax 64x1024", lambda: softmax(x, **kw), lambda: torch.softmax(x, -1)),
            ("rms_norm 64x1024", lambda: rms_norm(x, w, **kw), lambda: F.rms_norm(x, (1024,), w)),
            ("layer_norm 64x1024", lambda: layer_norm(x, w, w, **kw), lambda: F.layer_norm(x, (1024,), w, w)),
            ("silu_and_mul 64x512", lambda: silu_and_mul(gu, **kw), lambda: F.silu(gu[:, :512]) * gu[:, 512:]),
            ("index_select 64 of 1000x256", lambda: index_select(table, idx, **kw), lambda: table.index_select(0, idx)),
            (
                "attention 2x20x256x64",
                lambda: attention(q, q, q, **kw),
                lambda: F.scaled_dot_product_attention(q, q, q),
            ),
            (
                "decode_attention 1x32/8x256 d128",
                lambda: decode_attention(qd, kd, kd, **kw),
                lambda: F.scaled_dot_product_attention(
                    qd.transpose(1, 2), kd.transpose(1, 2), kd.transpose(1, 2), enable_gqa=True
                ),
            ),
            ("paged_attention 1x32/8x256 d128 page 16", lambda: paged_attention(qd, kc, kc, tables, lens, **kw), None),
        ],
    ]


def _moe_cases(dev: str, kw: dict) -> list:
    """OLMoE's layer (E = 64, k = 8, H = 2048, I = 1024, bf16) at decode batches: the routing kernels and
    the whole step.  Weights are ``torch.empty`` (never read by the null driver).  Torch has no fused
    counterpart (None: not timed)."""
    from wavec.kernels import fused_experts, moe_align_block_size, topk_softmax
    from wavec.kernels.fused_moe import fused_moe

    b, e, k, h, i = torch.bfloat16, 64, 8, 2048, 1024
    w1, w2 = torch.empty(e, 2 * i, h, device=dev, dtype=b), torch.empty(e, h, i, device=dev, dtype=b)
    cases = []
    for t in (1, 16):
        x, logits = torch.randn(t, h, device=dev, dtype=b), torch.randn(t, e, device=dev)
        wts, ids = torch.topk(torch.softmax(logits, -1), k)
        ids = ids.to(torch.int32)
        cases += [
            (f"topk_softmax T={t} E=64 k=8", lambda lg=logits: topk_softmax(lg, k, True, **kw), None),
            (f"moe_align_block_size T={t} k=8 E=64 B=16", lambda d=ids: moe_align_block_size(d, e, 16, **kw), None),
            (
                f"fused_experts OLMoE T={t} (align, up, down, combine)",
                lambda x=x, w=wts, d=ids: fused_experts(x, w1, w2, w, d, **kw),
                None,
            ),
            (
                f"fused_moe OLMoE T={t} (+ topk_softmax)",
                lambda x=x, lg=logits: fused_moe(x, w1, w2, lg, k, True, **kw),
                None,
            ),
        ]
    return cases


def main(calls: int, null_driver: bool, ops: list[str]) -> None:
    if null_driver:
        install_null_driver()
        dev, backend, sync, where = "cpu", "cuda", lambda: None, "null driver, CPU tensors (wavec's Python share)"
    else:
        dev, backend, sync, where = "cuda", None, torch.cuda.synchronize, torch.cuda.get_device_name()
    lines = [f"{where}; {calls} calls each, us", "entry point | wavec p50 | p99 | max | torch p50 | p99 | max"]
    print(*lines, sep="\n")
    for name, ours, theirs in cases(dev, backend):
        if ops and not any(o in name for o in ops):
            continue
        torch_stats = "- | - | -" if theirs is None else _stats(latencies(theirs, calls, sync))
        lines.append(f"{name} | {_stats(latencies(ours, calls, sync))} | {torch_stats}")
        print(lines[-1], flush=True)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "host_latency.md"), "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--null-driver", action="store_true")
    ap.add_argument("--ops", default="", help="comma-separated substrings of the entry points to run")
    args = ap.parse_args()
    main(args.calls, args.null_driver, [o for o in args.ops.split(",") if o])
