"""Host latency per call of the library entry points beside torch's own ops (issue #25: <= 10 us per call,
p99 <= 2x p50, no call over 1 ms in 2000), on problems so small that the GPU is never the bottleneck.

Each call is timed alone with ``time.perf_counter`` (the Python call returns once its launches are
queued); every 64 calls a synchronize keeps the queue short, outside the timed region.  One run prints
p50 / p99 / max in microseconds for wavec and torch side by side.

    python benchmarks/host_latency.py [--calls 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from wavec.kernels import decode_attention, index_select, layer_norm, matmul, rms_norm, silu_and_mul, softmax
from wavec.kernels.attention import attention

F = torch.nn.functional


def latencies(fn, calls: int) -> list[float]:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    out = []
    for i in range(calls):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e6)
        if i % 64 == 63:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return out


def _row(name: str, ours, theirs, calls: int) -> str:
    a, b = latencies(ours, calls), latencies(theirs, calls)

    def stats(xs: list[float]) -> str:
        q = statistics.quantiles(xs, n=100)
        return f"{statistics.median(xs):.1f} | {q[98]:.1f} | {max(xs):.0f}"

    return f"{name} | {stats(a)} | {stats(b)}"


def main(calls: int) -> None:
    dev, h = "cuda", torch.float16
    a, b = torch.randn(128, 64, device=dev, dtype=h), torch.randn(128, 64, device=dev, dtype=h)
    x, w = torch.randn(64, 1024, device=dev, dtype=h), torch.randn(1024, device=dev, dtype=h)
    table, idx = torch.randn(1000, 256, device=dev, dtype=h), torch.randint(0, 1000, (64,), device=dev)
    gu = torch.randn(64, 2 * 512, device=dev, dtype=h)
    q = torch.randn(2, 20, 256, 64, device=dev, dtype=h)
    qd = torch.randn(1, 1, 32, 128, device=dev, dtype=h)
    kd = torch.randn(1, 256, 8, 128, device=dev, dtype=h)
    rows = [
        ("matmul 128x128x64", lambda: matmul(a, b), lambda: torch.matmul(a, b.T)),
        ("softmax 64x1024", lambda: softmax(x), lambda: torch.softmax(x, -1)),
        ("rms_norm 64x1024", lambda: rms_norm(x, w), lambda: F.rms_norm(x, (1024,), w)),
        ("layer_norm 64x1024", lambda: layer_norm(x, w, w), lambda: F.layer_norm(x, (1024,), w, w)),
        ("silu_and_mul 64x512", lambda: silu_and_mul(gu), lambda: F.silu(gu[:, :512]) * gu[:, 512:]),
        ("index_select 64 of 1000x256", lambda: index_select(table, idx), lambda: table.index_select(0, idx)),
        ("attention 2x20x256x64", lambda: attention(q, q, q), lambda: F.scaled_dot_product_attention(q, q, q)),
        (
            "decode_attention 1x32/8x256 d128",
            lambda: decode_attention(qd, kd, kd),
            lambda: F.scaled_dot_product_attention(
                qd.transpose(1, 2), kd.transpose(1, 2), kd.transpose(1, 2), enable_gqa=True
            ),
        ),
    ]
    print(f"device: {torch.cuda.get_device_name()}; {calls} calls each, us")
    print("entry point | wavec p50 | p99 | max | torch p50 | p99 | max")
    for name, ours, theirs in rows:
        print(_row(name, ours, theirs, calls))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    main(ap.parse_args().calls)
