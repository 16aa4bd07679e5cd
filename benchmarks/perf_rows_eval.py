"""The performance model (``rows`` family) against measured row-kernel times, on the CPU: every line of the
given ``benchmarks/rows.py`` tables (``rows.txt``: op, N, rows, wavec us, ...) is compiled as the library
compiles it (the aligned plan, or ``rows_odd``'s kernel, tables and views), decomposed for the GPU named
(the odd kernels' x views counted once: ``decompose(views=)``) and predicted; prints per point the measured,
predicted, roofline and P80-ceiling times and per kernel the mean and largest absolute error.  No device.

    python benchmarks/perf_rows_eval.py [--gpu H200] benchmarks/results/session16_h200/run6/rows.txt ...
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from typing import Any

import torch

import wavec as wc
from wavec.kernels import rows, rows_odd
from wavec.perf import decompose, features, schedule
from wavec.perf.estimator import estimate, launch_values
from wavec.perf.gpus import GPUS, gpu

VECTORS = {"softmax": 0, "rms_norm": 1, "layer_norm": 2}


def library_launch(kind: str, dtype: Any, m: int, n: int) -> tuple[Any, list, dict, tuple | None]:
    """(compiled kernel, tensor shapes, integer scalars, views) of the library's launch for contiguous rows
    [m, n] at a 16-byte boundary."""
    tdt = getattr(torch, {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}[dtype.name])
    if rows_odd.odd_config(dtype, n, kind, n) is None:
        kernel = wc.compile(*rows.kernel_for(kind, dtype, n), backend="emulator")
        return kernel, [(m, n)] + [(n,)] * VECTORS[kind] + [(m, n)], {}, None
    x = torch.empty(m, n, dtype=tdt, device="meta")
    tables = kind != "softmax" and m * n * x.element_size() >= rows_odd.TABLE_MIN_BYTES
    kernel = rows_odd.odd_kernel(kind, dtype, n, n, "emulator", tables)
    vec = 16 // x.element_size()
    vectors = [torch.empty(n, dtype=tdt, device="meta")] * VECTORS[kind]
    if tables:
        vectors += [rows_odd.shifted_table(v, vec, (n - vec + 1) // vec) for v in vectors]
    inner = torch.empty(rows_odd.inner_size(kind, dtype, n, n), dtype=torch.int8, device="meta")
    starts = torch.empty(m, dtype=torch.int32, device="meta")
    out = torch.empty(-(-m * n // vec) * vec, dtype=tdt, device="meta")
    reread = rows_odd.odd_reread(dtype, n, kind, n, tables)
    args = rows_odd.odd_args(x, out, 0, starts, inner, tuple(vectors), (), reread)
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    roots = [id(t if t._base is None else t._base) for t in tensors]  # (meta tensors have no addresses)
    views = tuple(roots.index(r) for r in roots)
    return kernel, [tuple(t.shape) for t in tensors], {"n": n, "gap": 0}, views


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
        kernel, shapes, scalars, views = library_launch(kind, dtype, m, n)
        d = decompose(kernel, *shapes, gpu=spec, views=views, **scalars)
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
