"""``wavec.kernels.softmax`` / ``rms_norm`` / ``layer_norm`` (any row length, ``kernels/rows.py``) beside
torch eager and a device copy of the same bytes, one run: do_bench medians on fresh inputs, rows of 96 to
16384 elements including odd lengths, bf16 (``--dtype``).  Bandwidth counts one read and one write of x.
Targets (issue 20): >= 80% of copy bandwidth for rows >= 1024 elements, >= 1.0x torch everywhere.

    python benchmarks/rows.py [--quick | --odd | --norms] [--kinds softmax,rms_norm,layer_norm]
                              [--lengths 1024,4097,...] [--dtype float16|bfloat16|float32] [--no-tables]
                              [--drift shared|scatter|narrow]

``--odd``: only odd lengths (``kernels/rows_odd.py``: 16-byte accesses for the rows' interiors), plus a
slice ``x[:, :4097]`` of rows 4104 long.  ``--norms``: RMSNorm and LayerNorm at every length >= 1024 of
the default and odd lists (aligned and odd, one run).  ``--kinds`` / ``--lengths`` narrow any of these.
``--no-tables``: the norms' odd rows gather their weight and bias element by element at every size
(``rows_odd.TABLE_MIN_BYTES``; by default inputs of 32 MB or more read them from per-call shifted tables).
``--drift``: the output variant of slices whose offset within 16 bytes drifts (the ``4097 of 4104`` row;
``OddRules.drift``, default the library's ``shared``; ``narrow``: rows.py's narrow variant); every
variant in one run: ``benchmarks/rows_drift.py``.
Each row also stands against the performance model's P80 ceiling for the GPU (``wavec.perf.standing``:
the ceiling's time over the measured one; "n/a" names the kernels the model does not cover, such as the
odd-length rows), and the underperforming rows (efficiency more than ``GAP`` below it) are listed last.
The table is printed as it goes and written to ``$OUT/rows.txt`` (``rows_no_tables.txt``) when ``OUT`` is
set.
"""

from __future__ import annotations

import dataclasses
import os
import sys

import torch
import triton.testing

from wavec.kernels import layer_norm, rms_norm, rows_odd, rows_odd_rules, softmax
from wavec.perf.standing import GAP, standing

F = torch.nn.functional
BYTES = 256 << 20  # per input tensor: well past the 50 MB L2
FULL = [96, 128, 300, 1000, 1024, 2048, 2049, 4096, 4097, 8191, 8192, 16383, 16384]
ODD = [301, 1025, 2049, 4097, 8191, 16383, (4097, 4104)]
NORMS = [1024, 1025, 2048, 2049, 4096, 4097, 8191, 8192, 16383, 16384, (4097, 4104)]


def _us(fn) -> float:
    return 1000 * triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def row_ops(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> dict:
    """Kind -> (wavec's call, torch's) on rows ``x`` with the weight ``w`` and bias ``b``."""
    n = x.shape[-1]
    return {
        "softmax": (lambda: softmax(x), lambda: torch.softmax(x, -1)),
        "rms_norm": (lambda: rms_norm(x, w, 1e-6), lambda: F.rms_norm(x, (n,), w, 1e-6)),
        "layer_norm": (lambda: layer_norm(x, w, b, 1e-5), lambda: F.layer_norm(x, (n,), w, b, 1e-5)),
    }


def main(lengths: list, dtype: torch.dtype, kinds: list[str]) -> list[str]:
    tables = "off" if rows_odd.TABLE_MIN_BYTES > BYTES else "on"
    lines = [
        f"device: {torch.cuda.get_device_name()}, {dtype}, odd norms' shifted tables {tables}",
        "op | N | rows | wavec us | GB/s | of copy | torch us | torch/wavec | of P80 ceiling",
    ]
    print(*lines, sep="\n", flush=True)
    under: list[str] = []
    for length in lengths:
        n, pitch = length if isinstance(length, tuple) else (length, length)
        m = max(1, BYTES // (n * x_bytes(dtype)))
        x = torch.randn(m, pitch, device="cuda", dtype=dtype)[:, :n]
        w, b = torch.randn(n, device="cuda", dtype=dtype), torch.randn(n, device="cuda", dtype=dtype)
        y = torch.empty(m, n, device="cuda", dtype=dtype)
        t_copy = _us(lambda: y.copy_(x))
        ops = row_ops(x, w, b)
        for name in kinds:
            ours, theirs = ops[name]
            torch.testing.assert_close(ours().float(), theirs().float(), rtol=2e-2, atol=2e-2)
            t_w, t_t = _us(ours), _us(theirs)
            gbs = 2 * x.numel() * x.element_size() / t_w / 1e3
            label = n if pitch == n else f"{n} of {pitch}"
            st = standing(ours, t_w * 1e-6, torch.cuda.get_device_name())
            line = f"{name} | {label} | {m} | {t_w:.1f} | {gbs:.0f} | {t_copy / t_w:.2f} | {t_t:.1f} | {t_t / t_w:.2f}"
            line += f" | {st.cell()}"
            print(line, flush=True)
            lines.append(line)
            under += [f"{name} {label}: gap {st.gap:.2f}"] if st.underperforming else []
    lines.append(f"underperforming (efficiency more than {GAP} below the P80 ceiling): {', '.join(under) or 'none'}")
    print(lines[-1], flush=True)
    return lines


def x_bytes(dtype: torch.dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()


def _arg(flag: str, default: str) -> str:
    return sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv else default


def _lengths() -> list:
    if "--lengths" in sys.argv:
        return [int(v) for v in _arg("--lengths", "").split(",")]
    if "--odd" in sys.argv:
        return ODD
    if "--norms" in sys.argv:
        return NORMS
    return [96, 1000, 4096, 4097, 16384] if "--quick" in sys.argv else FULL


if __name__ == "__main__":
    default_kinds = "rms_norm,layer_norm" if "--norms" in sys.argv else "softmax,rms_norm,layer_norm"
    kinds = _arg("--kinds", default_kinds).split(",")
    unknown = sorted(set(kinds) - {"softmax", "rms_norm", "layer_norm"})
    if unknown:
        sys.exit(f"--kinds: unknown {unknown}; softmax, rms_norm, layer_norm")
    if "--no-tables" in sys.argv:
        rows_odd.TABLE_MIN_BYTES = 1 << 62
    if "--drift" in sys.argv:
        drift = _arg("--drift", "shared")
        rows_odd_rules.RULES = dataclasses.replace(rows_odd_rules.RULES, drift="" if drift == "narrow" else drift)
    table = main(_lengths(), getattr(torch, _arg("--dtype", "bfloat16")), kinds)
    if os.environ.get("OUT"):
        name = "rows_no_tables.txt" if "--no-tables" in sys.argv else "rows.txt"
        with open(os.path.join(os.environ["OUT"], name), "w") as f:
            f.write("\n".join(table) + "\n")
