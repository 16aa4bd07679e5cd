"""End-to-end check of the performance model (issue #22): a transformers decoder's forward time predicted
as the sum of its wavec kernels' predicted times plus what wavec does not launch (torch's own kernels and
the host gaps between kernels, both measured), against the measured forward.

The model is ``benchmarks/transformers_e2e.py``'s Llama-3-8B-shaped decoder (random bf16 weights, no
download) with its linears, RMSNorms and attention routed through wavec (``enable(model, linears=True)``).
For each prefill case:

1. the wavec library calls of one forward are recorded (``linear`` -> gemm M,N,K; ``rms_norm`` -> M,N;
   ``attention`` -> B,H,S,D,KVH,Skv, causal), each launch predicted by ``wavec.perf`` exactly as ``python -m
   wavec perf`` does (the kernel compiled for the GPU's target as the library compiles it, decomposed,
   scheduled, featurised, the family's MLP);
2. one forward is profiled (``torch.profiler``, CUDA time per kernel, in launch order) and the forward is
   timed (``do_bench`` median);
3. predicted forward = measured forward - measured wavec kernel time + predicted wavec kernel time; the
   table gives its error, the per-family sums (measured vs predicted) and the per-launch MAPE.

Decode steps are not predicted: split-KV decode attention has no performance-model family yet.

    python -m benchmarks.perf_e2e [--layers 4] [--gpu h200] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable
from typing import Any

import torch

import wavec.kernels
import wavec.kernels.attention
from benchmarks.transformers_e2e import build
from wavec.integrations import transformers as wt

PREFILL = [(1, 2048), (8, 512), (2, 1024)]  # batch, tokens
DEVICE = "cuda"

Launch = tuple[str, tuple[int, ...], bool]  # library kernel, sizes, causal


class Recorder:
    """Wraps the library entry points the integration calls; ``launches`` lists one entry per call while
    ``on``."""

    def __init__(self) -> None:
        self.on = False
        self.launches: list[Launch] = []

    def wrap(self, module: Any, name: str, sizes: Callable[..., Launch]) -> None:
        original = getattr(module, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.on:
                self.launches.append(sizes(*args, **kwargs))
            return original(*args, **kwargs)

        setattr(module, name, call)


def _linear(x: torch.Tensor, w: torch.Tensor, bias: Any = None) -> Launch:
    return "gemm", (x.numel() // x.shape[-1], w.shape[0], w.shape[1]), False


def _rms_norm(x: torch.Tensor, w: torch.Tensor, *args: Any, **kwargs: Any) -> Launch:
    return "rms_norm", (x.numel() // x.shape[-1], x.shape[-1]), False


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False, **kwargs: Any) -> Launch:
    if kwargs.get("layout", "bhsd") == "bshd":
        (b, s, h, d), (skv, kvh) = q.shape, k.shape[1:3]
    else:
        (b, h, s, d), (kvh, skv) = q.shape, k.shape[1:3]
    return "attention", (b, h, s, d, kvh, skv), bool(causal)


def install(rec: Recorder) -> None:
    rec.wrap(wavec.kernels, "linear", _linear)
    rec.wrap(wavec.kernels, "rms_norm", _rms_norm)
    rec.wrap(wavec.kernels.attention, "attention", _attention)


def predict(launch: Launch, gpu_name: str) -> tuple[float, str]:
    """(predicted seconds, kernel name as the profiler shows it) of one library launch."""
    from wavec.perf import decompose, features, gpu, schedule
    from wavec.perf.estimator import estimate, family_of
    from wavec.perf.library import library_launch

    kernel, sizes, causal = launch
    spec = gpu(gpu_name)
    mma = "wgmma" if kernel in ("gemm", "attention") and spec.arch == "sm_90" else "mma_sync"
    compiled, shapes = library_launch(kernel, sizes, spec, "bf16", mma, causal)
    decomp = decompose(compiled, *shapes, gpu=spec)
    feats = features(decomp, schedule(decomp, spec))
    values = {**feats.values, "registers": float(decomp.registers or 0), "shared_bytes": float(decomp.shared_bytes)}
    return estimate(values, spec, gpu_name, family_of(kernel, mma)).time_s, decomp.kernel


def profiled(fn: Callable[[], Any]) -> list[tuple[str, float]]:
    """(kernel name, device seconds) of every kernel one ``fn()`` launches, in launch order."""
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and e.device_time > 0]
    events.sort(key=lambda e: e.time_range.start)
    return [(e.name, e.device_time * 1e-6) for e in events if "Memcpy" not in e.name and "Memset" not in e.name]


def run_case(model: Any, rec: Recorder, b: int, s: int, gpu_name: str, cache: dict) -> dict[str, Any]:
    from triton.testing import do_bench

    ids = torch.randint(0, model.config.vocab_size, (b, s), device=DEVICE)

    def fwd() -> Any:
        return model(ids, use_cache=False).logits

    with torch.no_grad():
        fwd()  # compiles and prepares every launch
        rec.launches, rec.on = [], True
        fwd()
        rec.on = False
        torch.cuda.synchronize()
        wall = do_bench(fwd, warmup=5, rep=50, return_mode="median") * 1e-3
    kernels = profiled(fwd)
    for launch in rec.launches:
        if launch not in cache:
            cache[launch] = predict(launch, gpu_name)
    names = {cache[la][1] for la in rec.launches}
    measured = [(n, t) for n, t in kernels if n in names]
    fam: dict[str, list[float]] = {}
    errors = []
    paired = len(measured) == len(rec.launches)
    for i, launch in enumerate(rec.launches):
        pred = cache[launch][0]
        got = measured[i][1] if paired else float("nan")
        row = fam.setdefault(launch[0], [0.0, 0.0])
        row[0] += got
        row[1] += pred
        if paired:
            errors.append(abs(pred - got) / got)
    wavec_meas = sum(t for _, t in measured)
    wavec_pred = sum(cache[la][0] for la in rec.launches)
    all_kernels = sum(t for _, t in kernels)
    return {
        "case": f"prefill {b}x{s}",
        "wall": wall,
        "wavec_meas": wavec_meas,
        "wavec_pred": wavec_pred,
        "other": all_kernels - wavec_meas,
        "gaps": wall - all_kernels,
        "pred": wall - wavec_meas + wavec_pred,
        "families": fam,
        "launch_mape": statistics.fmean(errors) if errors else float("nan"),
        "launches": len(rec.launches),
        "paired": paired,
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'case':16} {'forward ms':>10} {'predicted':>10} {'error':>7} {'wavec meas':>10} {'wavec pred':>10} "
        f"{'torch krn':>9} {'gaps':>7} {'launches':>8} {'launch MAPE':>11}"
    )
    lines = [head]
    for r in rows:
        lines.append(
            f"{r['case']:16} {r['wall'] * 1e3:10.3f} {r['pred'] * 1e3:10.3f} {(r['pred'] / r['wall'] - 1):+7.1%} "
            f"{r['wavec_meas'] * 1e3:10.3f} {r['wavec_pred'] * 1e3:10.3f} {r['other'] * 1e3:9.3f} "
            f"{r['gaps'] * 1e3:7.3f} {r['launches']:8d} {r['launch_mape']:11.1%}"
        )
    lines.append("")
    lines.append(f"{'case':16} {'family':10} {'measured ms':>11} {'predicted ms':>12} {'error':>7}")
    for r in rows:
        for name, (got, pred) in sorted(r["families"].items()):
            lines.append(f"{r['case']:16} {name:10} {got * 1e3:11.3f} {pred * 1e3:12.3f} {pred / got - 1:+7.1%}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--gpu", default=None, help="performance-model GPU key (default: h200 or h100 by name)")
    ap.add_argument("--out", default=os.environ.get("OUT"))
    args = ap.parse_args()
    gpu_name = args.gpu or ("h200" if "H200" in torch.cuda.get_device_name() else "h100")
    torch.manual_seed(0)
    rec = Recorder()
    install(rec)  # before enable: the integration binds linear and rms_norm when it patches the modules
    model = build(args.layers)
    wt.enable(model, linears=True)
    cache: dict = {}
    rows = [run_case(model, rec, b, s, gpu_name, cache) for b, s in PREFILL]
    text = f"device {torch.cuda.get_device_name()}, perf model '{gpu_name}', {args.layers} layers, bf16\n{table(rows)}"
    print(text)
    print(wt.report())
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "perf_e2e.txt"), "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
