"""Slices ``x[:, :n]`` of rows ``P`` long whose offset within 16 bytes drifts from row to row against the
contiguous output's (``kernels/rows_odd_drift.py``, ``(P - n) % V != 0``) through the public ``softmax`` /
``rms_norm`` / ``layer_norm``, under each output variant of ``OddRules.drift`` in one run (``shared``:
the row re-read from shared memory at the output's alignment; ``scatter``: every value stored alone;
``narrow``: no odd kernel, rows.py's narrow variant, as before), beside torch eager and two device copies
of the same bytes: ``y.copy_(x)`` of the slice itself (benchmarks/rows.py's anchor: torch's strided copy)
and of a contiguous tensor of the slice's elements (the aligned rows' anchor).  do_bench medians, inputs of 256 MB, f32
statistics checked against torch first; registers and spills of each variant's kernels.  Issue 20's target:
>= 0.80 of copy for rows >= 1024 elements.

    python benchmarks/rows_drift.py [--slices 4097:4104,2049:2052,1025:1030,8191:8196]
        [--kinds softmax,rms_norm,layer_norm] [--variants shared,scatter,narrow,shared@4o]
        [--dtype bfloat16|float16|float32] [--no-tables]

The table is printed as it goes and written to ``$OUT/rows_drift.txt`` when ``OUT`` is set.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

import torch

from benchmarks.rows import BYTES, _us, row_ops
from wavec.kernels import rows, rows_odd
from wavec.kernels import rows_odd_rules as rules

LIBRARY = rules.RULES


def use(variant: str) -> None:
    """The odd kernels compiled and the row ops decided next take the drift ``variant`` (``narrow``: none);
    ``shared@4o``: under a sweep's layout too (chunks a lane, ``o`` one row a workgroup, ``a`` the
    library's rows; ``benchmarks/rows_odd_sweep.py``)."""
    name, _, lay = variant.partition("@")
    layout = (int(lay[:-1]), lay[-1] == "o") if lay else None
    rules.RULES = dataclasses.replace(LIBRARY, drift="" if name == "narrow" else name, layout=layout)
    rows_odd._COMPILED.clear()
    rows._DECIDED.clear()


def registers() -> str:
    """(registers, spills, shared bytes) of the odd kernels compiled since ``use``; none: the narrow one."""
    out = []
    for k in rows_odd._COMPILED.values():
        meta = k.artifact.metadata
        out.append(f"{meta.registers}r {meta.spills}s {meta.shared_bytes}B")
    return ", ".join(out) or "narrow kernel"


def inputs(n: int, pitch: int, dtype: torch.dtype) -> tuple[Any, ...]:
    """(x [m, n] at ``pitch``, w, b, the slice's copy time, a contiguous copy's time) for ``BYTES`` of rows."""
    m = max(1, BYTES // (n * torch.empty(0, dtype=dtype).element_size()))
    x = torch.randn(m, pitch, device="cuda", dtype=dtype)[:, :n]
    w, b = torch.randn(n, device="cuda", dtype=dtype), torch.randn(n, device="cuda", dtype=dtype)
    y = torch.empty(m, n, device="cuda", dtype=dtype)
    dense = x.contiguous()
    return x, w, b, _us(lambda: y.copy_(x)), _us(lambda: y.copy_(dense))


def main() -> None:
    arg = lambda flag, default: sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv else default  # noqa: E731
    slices = [tuple(int(v) for v in s.split(":")) for s in arg("--slices", "4097:4104,2049:2052,1025:1030").split(",")]
    kinds = arg("--kinds", "softmax,rms_norm,layer_norm").split(",")
    variants = arg("--variants", "shared,scatter,narrow").split(",")
    dtype = getattr(torch, arg("--dtype", "bfloat16"))
    if "--no-tables" in sys.argv:
        rows_odd.TABLE_MIN_BYTES = 1 << 62
    lines = [
        f"device: {torch.cuda.get_device_name()}, {dtype}",
        "op | N of P | variant | us | of slice copy | of dense copy | x torch | kernels",
    ]
    print(*lines, sep="\n", flush=True)
    for n, pitch in slices:
        x, w, b, t_slice, t_dense = inputs(n, pitch, dtype)
        lines.append(f"copy | {n} of {pitch} | slice {t_slice:.1f} us, dense {t_dense:.1f} us")
        print(lines[-1], flush=True)
        calls = row_ops(x, w, b)
        for kind in kinds:
            ours, theirs = calls[kind]
            want = theirs().float()
            t_torch = _us(theirs)
            for variant in variants:
                use(variant)
                torch.testing.assert_close(ours().float(), want, rtol=2e-2, atol=3e-2)
                t = _us(ours)
                ratios = f"{t_slice / t:.2f} | {t_dense / t:.2f} | {t_torch / t:.2f}"
                line = f"{kind} | {n} of {pitch} | {variant} | {t:.1f} | {ratios}"
                lines.append(f"{line} | {registers()}")
                print(lines[-1], flush=True)
    rules.RULES = LIBRARY
    rows_odd._COMPILED.clear()
    rows._DECIDED.clear()
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "rows_drift.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
