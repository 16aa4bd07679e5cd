"""``wavec.kernels.softmax`` / ``rms_norm`` / ``layer_norm`` (any row length, ``kernels/rows.py``) beside
torch eager and a device copy of the same bytes, one run: do_bench medians on fresh inputs, rows of 96 to
16384 elements including odd lengths, bf16 (``--dtype``).  Bandwidth counts one read and one write of x.
Targets (issue 20): >= 80% of copy bandwidth for rows >= 1024 elements, >= 1.0x torch everywhere.

    python benchmarks/rows.py [--quick | --odd] [--dtype float16|bfloat16|float32]

``--odd``: only odd lengths (``kernels/rows_odd.py``: 16-byte accesses for the rows' interiors), plus a
slice ``x[:, :4097]`` of rows 4104 long.
"""

from __future__ import annotations

import sys

import torch
import triton.testing

from wavec.kernels import layer_norm, rms_norm, softmax

F = torch.nn.functional
BYTES = 256 << 20  # per input tensor: well past the 50 MB L2


def _us(fn) -> float:
    return 1000 * triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def main(quick: bool, dtype: torch.dtype, odd: bool = False) -> None:
    lengths: list = [96, 1000, 4096, 4097, 16384]
    if odd:
        lengths = [301, 1025, 2049, 4097, 8191, 16383, (4097, 4104)]
    elif not quick:
        lengths = [96, 128, 300, 1000, 1024, 2048, 2049, 4096, 4097, 8191, 8192, 16383, 16384]
    print(f"device: {torch.cuda.get_device_name()}, {dtype}")
    print("op | N | rows | wavec us | GB/s | of copy | torch us | torch/wavec")
    for length in lengths:
        n, pitch = length if isinstance(length, tuple) else (length, length)
        m = max(1, BYTES // (n * x_bytes(dtype)))
        x = torch.randn(m, pitch, device="cuda", dtype=dtype)[:, :n]
        w, b = torch.randn(n, device="cuda", dtype=dtype), torch.randn(n, device="cuda", dtype=dtype)
        y = torch.empty(m, n, device="cuda", dtype=dtype)
        t_copy = _us(lambda: y.copy_(x))
        ops = {
            "softmax": (lambda: softmax(x), lambda: torch.softmax(x, -1)),
            "rms_norm": (lambda: rms_norm(x, w, 1e-6), lambda: F.rms_norm(x, (n,), w, 1e-6)),
            "layer_norm": (lambda: layer_norm(x, w, b, 1e-5), lambda: F.layer_norm(x, (n,), w, b, 1e-5)),
        }
        for name, (ours, theirs) in ops.items():
            torch.testing.assert_close(ours().float(), theirs().float(), rtol=2e-2, atol=2e-2)
            t_w, t_t = _us(ours), _us(theirs)
            gbs = 2 * x.numel() * x.element_size() / t_w / 1e3
            label = n if pitch == n else f"{n} of {pitch}"
            print(f"{name} | {label} | {m} | {t_w:.1f} | {gbs:.0f} | {t_copy / t_w:.2f} | {t_t:.1f} | {t_t / t_w:.2f}")


def x_bytes(dtype: torch.dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()


if __name__ == "__main__":
    name = sys.argv[sys.argv.index("--dtype") + 1] if "--dtype" in sys.argv else "bfloat16"
    main("--quick" in sys.argv, getattr(torch, name), "--odd" in sys.argv)
