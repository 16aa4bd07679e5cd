"""The performance model (``rows`` family) against measured row-kernel times, on the CPU: every line of the
given ``benchmarks/rows.py`` tables (``rows.txt``: op, N, rows, wavec us, ...) is compiled as the library
compiles it (``perf.library.library_launch``: the aligned plan, or ``rows_odd``'s kernel, tables and views),
decomposed for the GPU named (the odd kernels' x views counted once: ``decompose(views=)``) and predicted by
the ``rows`` family's model; prints per point the measured, predicted, roofline and P80-ceiling times and per
kernel the mean and largest absolute error.  No device.

    python benchmarks/perf_rows_eval.py [--gpu H200] benchmarks/results/session16_h200/run6/rows.txt ...
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from typing import Any

import wavec as wc
from wavec.perf import decompose, features, schedule
from wavec.perf.estimator import estimate, launch_values
from wavec.perf.gpus import GPUS, gpu
from wavec.perf.library import library_launch


def points(path: str) -> list[tuple[str, Any, int, int, float]]:
    """(op, dtype, rows, N, measured us) of every contiguous line of a ``rows.py`` table."""
    text = open(path).read()
    dtype = {"float32": wc.f32, "bfloat16": wc.bf16, "float16": wc.f16}[re.search(r"torch\.(\w+)", text).group(1)]
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) >= 9 and cells[2].isdigit() and cells[1].isdigit():
            out.append((cells[0], dtype, int(cells[2]), int(cells[1]), float(cells[3])))
    return out


def main(argv: list[str]) -> None:
    name = argv[argv.index("--gpu") + 1] if "--gpu" in argv else "H200"
    files = [a for i, a in enumerate(argv) if not a.startswith("--") and (i == 0 or argv[i - 1] != "--gpu")]
    spec = gpu(name)
    key = next(k for k, v in GPUS.items() if v == spec)
    errors: dict[str, list[float]] = defaultdict(list)
    print("op | dtype | N | rows | kernel | measured us | predicted | roofline | P80 | error")
    for kind, dtype, m, n, us in (p for f in files for p in points(f)):
        launch = library_launch(kind, (m, n), spec, dtype.name)
        d = decompose(launch.compiled, *launch.shapes, gpu=spec, views=launch.views, **launch.scalars)
        e = estimate(launch_values(d, features(d, schedule(d, spec))), spec, key, "rows")
        err = e.time_s * 1e6 / us - 1
        errors[d.kernel].append(abs(err))
        times = " | ".join(f"{c * 1e6:.1f}" for c in (e.time_s, e.roofline_s, e.ceiling_s))
        print(f"{kind} | {dtype.name} | {n} | {m} | {d.kernel} | {us:.1f} | {times} | {err:+.1%}", flush=True)
    print("\nkernel | points | mean abs error | max")
    for kernel_name, errs in sorted(errors.items()):
        print(f"{kernel_name} | {len(errs)} | {100 * sum(errs) / len(errs):.1f}% | {100 * max(errs):.1f}%")


if __name__ == "__main__":
    main(sys.argv[1:])
