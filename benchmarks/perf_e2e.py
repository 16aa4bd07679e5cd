"""End-to-end check of the performance model (issue #22): a transformers decoder's forward time predicted
as the sum of its wavec kernels' predicted times plus what wavec does not launch (torch's own kernels and
the host gaps between kernels, both measured), against the measured forward.

The model is ``benchmarks/transformers_e2e.py``'s Llama-3-8B-shaped decoder (random bf16 weights, no
download) with its linears, RMSNorms and attention routed through wavec (``enable(model, linears=True)``).
For each prefill case:

1. the wavec launches of one forward are traced (``wavec.runtime.trace_launches``: the artifacts that ran,
   with the shapes they saw) and each is predicted by ``wavec.perf.forward.predict_launches`` (decomposed,
   scheduled, featurised, the family's MLP; a kernel of no trained family counts at its measured time);
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

from benchmarks.transformers_e2e import build
from wavec.integrations import transformers as wt

PREFILL = [(1, 2048), (8, 512), (2, 1024)]  # batch, tokens
DEVICE = "cuda"


def profiled(fn: Callable[[], Any]) -> list[tuple[str, float]]:
    """(kernel name, device seconds) of every kernel one ``fn()`` launches, in launch order."""
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and e.device_time > 0]
    events.sort(key=lambda e: e.time_range.start)
    return [(e.name, e.device_time * 1e-6) for e in events if "Memcpy" not in e.name and "Memset" not in e.name]


def run_case(model: Any, b: int, s: int, gpu_name: str) -> dict[str, Any]:
    from triton.testing import do_bench

    from wavec.perf.forward import predict_launches
    from wavec.runtime import trace_launches

    ids = torch.randint(0, model.config.vocab_size, (b, s), device=DEVICE)

    def fwd() -> Any:
        return model(ids, use_cache=False).logits

    with torch.no_grad():
        fwd()  # compiles and prepares every launch
        with trace_launches() as launches:
            fwd()
        torch.cuda.synchronize()
        wall = do_bench(fwd, warmup=5, rep=50, return_mode="median") * 1e-3
    kernels = profiled(fwd)
    predicted = predict_launches(launches, gpu_name)
    names = {p.kernel for p in predicted}
    measured = [(n, t) for n, t in kernels if n in names]
    paired = [m[0] for m in measured] == [p.kernel for p in predicted]
    fam: dict[str, list[float]] = {}
    errors, unmodelled = [], 0.0
    for i, p in enumerate(predicted):
        got = measured[i][1] if paired else float("nan")
        if p.estimate is None:
            unmodelled += got
            continue
        row = fam.setdefault(p.family or "", [0.0, 0.0])
        row[0] += got
        row[1] += p.estimate.time_s
        errors.append(abs(p.estimate.time_s - got) / got)
    wavec_meas = sum(t for _, t in measured)
    wavec_pred = sum(p.estimate.time_s for p in predicted if p.estimate is not None) + unmodelled
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
        "launch_mape": statistics.fmean(errors) if errors and paired else float("nan"),
        "launches": len(predicted),
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
    model = build(args.layers)
    wt.enable(model, linears=True)
    rows = [run_case(model, b, s, gpu_name) for b, s in PREFILL]
    if not all(r["paired"] for r in rows):
        print("warning: profiled wavec kernels did not pair with the traced launches one to one (NaN rows)")
    text = f"device {torch.cuda.get_device_name()}, perf model '{gpu_name}', {args.layers} layers, bf16\n{table(rows)}"
    print(text)
    print(wt.report())
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "perf_e2e.txt"), "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
