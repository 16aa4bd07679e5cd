"""Aligned softmax / RMSNorm / LayerNorm rows (``kernels/rows.py``) over the layouts one row can take: one
tile over W waves (two rows a workgroup), one row a workgroup over W waves (``make_*_long``), and loop
tiles of B elements a wave; each beside a device copy of the same bytes, one run, do_bench
medians, bf16 rows of 256 MB.  Each line gives the layout's registers and residency; a layout whose
registers limit its resident workgroups is timed again under a launch bound of one more (``+bN``:
``SchedulingConstraint(min_workgroups_per_sm=N)``, ptxas spilling if it must).  It picks ``config_for``'s
table (issue 20: >= 0.80 of copy at >= 1024).

    python benchmarks/rows_sweep.py [--lengths 4096,8192,16384] [--dtype bfloat16] [--kinds rms_norm,...]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import torch
import triton.testing

import wavec as wc
from wavec.kernels import rows

F = torch.nn.functional
BYTES = 256 << 20


def _us(fn: Callable[[], Any]) -> float:
    return 1000 * triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def layouts(kind: str, dtype: Any, n: int) -> list[tuple[str, wc.WaveKernel, int, int]]:
    """(name, kernel, BLOCK_N, waves a row) of every layout tried for rows of ``n``."""
    vec = 16 // dtype.bytes
    unit = 32 * vec
    out: list[tuple[str, wc.WaveKernel, int, int]] = []
    extra = {"block_n": n} if kind == "layer_norm" else {}
    for waves in (2, 4, 8, 16):
        if n // (waves * unit) in (1, 2, 4, 8):
            kernel = rows.MAKERS[kind](dtype, loop=False, vec=vec, waves_per_row=waves, **extra)
            out.append((f"tile/{waves}w", kernel, n, waves))
    long = {"softmax": rows.make_softmax_long, "rms_norm": rows.make_rms_norm_long}.get(kind, rows.make_layer_norm_long)
    for waves in (4, 8, 16, 32):
        runs = n // (waves * unit)
        if runs in (1, 2, 4):
            out.append((f"long/{waves}w", long(dtype, waves, vec=vec), n, waves))
        if kind == "layer_norm" and runs in (2, 4, 8):  # x read again after the statistics: no row in registers
            out.append((f"long-rr/{waves}w", long(dtype, waves, vec=vec, reread=True), n, waves))
    for block in (1024, 2048, 4096):
        if block < n:
            extra = {"block_n": block} if kind == "layer_norm" else {}
            out.append((f"loop/{block}", rows.MAKERS[kind](dtype, loop=True, vec=vec, **extra), block, 1))
    return out


def residency(kernel: Any, waves: int, n: int, block: int, item: int) -> tuple[str, int, bool]:
    """(registers, spill bytes, resident threads per SM and the row KB those threads hold loaded at once
    as text; resident workgroups per SM; whether registers, not threads, limit them) on this device (a
    row tile of ``block`` over ``waves`` waves)."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    meta = kernel.artifact.metadata
    threads = meta.block[0] * meta.block[1] * meta.block[2]
    regs = -(-max(meta.registers, 1) // 8) * 8  # (allocated 8 a thread at a time)
    by_regs = props.regs_per_multiprocessor // (regs * threads)
    per_sm = min(by_regs, props.max_threads_per_multi_processor // threads)
    held = per_sm * threads * min(n, block) * item / (32 * waves) / 1024
    return f"{meta.registers}, {meta.spills}, {per_sm * threads}, {held:.0f}", per_sm, by_regs == per_sm


def bounded(kernel: wc.WaveKernel, count: int) -> wc.WaveKernel:
    """``kernel`` with the launch bound ``min_workgroups_per_sm=count`` (ptxas fits its registers)."""
    sched = wc.SchedulingConstraint(min_workgroups_per_sm=count)
    return wc.WaveKernel(kernel.fn, [*kernel.constraints, sched], kernel.scope_locals)


def time_layouts(kind: str, dtype: Any, n: int, args: tuple, want: Any, y: Any, t_copy: float) -> list[str]:
    """One line per layout of ``layouts``, and for a tile or long layout whose registers limit its resident
    workgroups, one more for the same layout bounded to one more workgroup an SM (``+bN``)."""
    default, lines = rows.config_for(dtype, n, kind), []
    for name, kernel, block, waves in layouts(kind, dtype, n):
        todo = [(name, kernel)]
        while todo:
            label, kern = todo.pop()
            try:
                k = wc.compile(kern, {rows.BLOCK_N: block})
            except wc.WavecError as e:
                print(f"{kind} | {n} | {label} | compile failed: {str(e)[:100]}", flush=True)
                continue
            y.fill_(float("nan"))
            k(*args)
            torch.testing.assert_close(y.float(), want.float(), rtol=2e-2, atol=2e-2)
            t = _us(lambda: k(*args))
            held, per_sm, by_regs = residency(k, waves, n, block, y.element_size())
            lines.append(f"{kind} | {n} | {label} | {t:.1f} | {t_copy / t:.2f} | {default} | {held}")
            print(lines[-1], flush=True)
            if label == name and by_regs and not name.startswith("loop"):
                todo.append((f"{name}+b{per_sm + 1}", bounded(kernel, per_sm + 1)))
    return lines


def row_inputs(n: int, tdtype: Any) -> tuple[Any, Any, Any, Any, float]:
    """(x [M, n] of ``BYTES``, weight, bias, an output like x, a device copy of x's bytes in microseconds)."""
    m = BYTES // (n * tdtype.itemsize)
    x = torch.randn(m, n, device="cuda", dtype=tdtype)
    w, b = torch.randn(n, device="cuda", dtype=tdtype), torch.randn(n, device="cuda", dtype=tdtype)
    y = torch.empty_like(x)
    return x, w, b, y, _us(lambda: y.copy_(x))


def main() -> None:
    arg = lambda flag, default: sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv else default  # noqa: E731
    lengths = [int(v) for v in arg("--lengths", "4096,8192,16384").split(",")]
    tdtype = getattr(torch, arg("--dtype", "bfloat16"))
    kinds = arg("--kinds", "softmax,rms_norm,layer_norm").split(",")
    dtype = rows.DTYPES[str(tdtype).removeprefix("torch.")]
    lines = [
        f"device: {torch.cuda.get_device_name()}, {tdtype}",
        "op | N | layout | us | of copy | default | registers, spills, threads / SM, KB loaded in flight / SM",
    ]
    print(*lines, sep="\n", flush=True)
    for n in lengths:
        x, w, b, y, t_copy = row_inputs(n, tdtype)
        for kind in kinds:
            want, args = {
                "softmax": lambda: (torch.softmax(x, -1), (x, y)),
                "rms_norm": lambda: (F.rms_norm(x, (n,), w, 1e-6), (x, w, y, 1e-6, 1.0 / n)),
                "layer_norm": lambda: (F.layer_norm(x, (n,), w, b, 1e-5), (x, w, b, y, 1e-5, 1.0 / n)),
            }[kind]()
            lines += time_layouts(kind, dtype, n, args, want, y, t_copy)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "rows_sweep.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
