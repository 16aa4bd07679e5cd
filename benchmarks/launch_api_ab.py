"""The two launch APIs in one process (issue #25): one compiled kernel loaded twice, once under
``WAVEC_LAUNCH_API=ctypes`` and once under ``c`` (the knob is read when the launcher loads), called in
alternating rounds so that clock and load drift fall on both alike.

Each round times ``--calls`` calls of one API with ``host_latency.latencies`` (50 warm-up calls, then
``time.perf_counter`` per call, a synchronize every 64 calls outside the timed region) and then the same
for the other API; the table gives the median over rounds of each round's p50 and p99 in microseconds, and
the median per-round difference.  The kernel is the rows softmax 64x1024 f16, called directly (the prepared
launch by tensors): the launch API is the only difference between the two.

    python benchmarks/launch_api_ab.py [--calls 2000] [--rounds 9]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

import wavec as wc
from wavec.runtime.kernel import CompiledKernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from host_latency import latencies  # noqa: E402  (its per-call timer: perf_counter, a sync every 64 calls)

APIS = ("ctypes", "c")


def _loaded(artifact, api: str, args: tuple) -> CompiledKernel:
    """A fresh launcher of ``artifact`` whose launch API is ``api`` (loaded by its first call)."""
    old = os.environ.get("WAVEC_LAUNCH_API")
    os.environ["WAVEC_LAUNCH_API"] = api
    try:
        kern = CompiledKernel(artifact, "cuda")
        kern(*args)
        torch.cuda.synchronize()
    finally:
        if old is None:
            os.environ.pop("WAVEC_LAUNCH_API", None)
        else:
            os.environ["WAVEC_LAUNCH_API"] = old
    return kern


def _p(xs: list[float], q: int) -> float:
    return statistics.quantiles(xs, n=100)[q - 1]


def main(calls: int, rounds: int) -> None:
    from wavec.kernels import rows

    x = torch.randn(64, 1024, device="cuda", dtype=torch.float16)
    y = torch.empty_like(x)
    artifact = rows._kernel("softmax", wc.f16, 1024, None).artifact
    kerns = {api: _loaded(artifact, api, (x, y)) for api in APIS}
    torch.testing.assert_close(y.float(), torch.softmax(x.float(), -1), atol=2e-3, rtol=2e-3)
    p50: dict[str, list[float]] = {a: [] for a in APIS}
    p99: dict[str, list[float]] = {a: [] for a in APIS}
    for r in range(rounds):
        order = APIS if r % 2 == 0 else APIS[::-1]
        for api in order:
            xs = latencies(lambda k=kerns[api]: k(x, y), calls, torch.cuda.synchronize)
            p50[api].append(_p(xs, 50))
            p99[api].append(_p(xs, 99))
    diff = [a - b for a, b in zip(p50["ctypes"], p50["c"], strict=True)]
    print(f"{torch.cuda.get_device_name()}; softmax 64x1024 f16, {rounds} alternating rounds of {calls} calls, us")
    print("API | p50 (median of rounds) | p99 (median of rounds) | p50 per round")
    for api in APIS:
        each = " ".join(f"{v:.2f}" for v in p50[api])
        print(f"{api} | {statistics.median(p50[api]):.2f} | {statistics.median(p99[api]):.2f} | {each}")
    wins = sum(d > 0 for d in diff)
    print(f"ctypes - c per round: median {statistics.median(diff):.2f} us; c faster in {wins} of {rounds} rounds")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    main(args.calls, args.rounds)
