"""Gathers and scatters (DESIGN §12) against their anchors, one run, medians of CUDA-event timings:

- ``index_select`` and ``index_add_`` (f32 and bf16; sm_90a's vector ``red`` on a Hopper GPU) of rows vs
  torch and vs a device copy of the same bytes;
- the gathered-rows GEMM (rows in random order, C written in order) and the MoE building block (the
  same gather, a weighted atomic scatter of C) vs the dense wavec GEMM of the same M, N, K with the same
  constraints (A read in order, C written), both for sm_90a on Hopper (the scatter's
  ``red.global.add.v2.f32``) and for the default target.

Prints one table; ``--quick`` for a short run."""

from __future__ import annotations

import sys

import torch
import triton.testing

import wavec as wc
from tests import dyn_kernels as dk
from tests.kernel_fixtures import gemm_kernel
from wavec.kernels.indexing import index_add_, index_select


def _ms(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def rows(quick: bool) -> list[str]:
    out = []
    for n_rows, width, dtype in [
        (65536, 1024, torch.float16),
        (65536, 4096, torch.float16),
        (32768, 1024, torch.float32),
    ]:
        x = torch.randn(n_rows, width, dtype=dtype, device="cuda")
        i = torch.randint(0, n_rows, (n_rows,), device="cuda")
        dst = torch.empty_like(x)
        nbytes = 2 * x.numel() * x.element_size()
        t_copy, t_torch, t_wc = (
            _ms(lambda: dst.copy_(x)),
            _ms(lambda: torch.index_select(x, 0, i)),
            _ms(lambda: index_select(x, i)),
        )
        out.append(
            f"index_select {n_rows}x{width} {str(dtype)[6:]} | {nbytes / t_wc / 1e6:.0f} GB/s | "
            f"{t_copy / t_wc:.2f} of copy | {t_torch / t_wc:.2f}x torch"
        )
        if dtype == torch.float32:
            out += index_add_rows(x, i, t_copy, "f32")
            out += index_add_rows(x.bfloat16(), i, t_copy, "bf16")
        if quick:
            break
    return out


def index_add_rows(x, i, t_copy_f32: float, name: str) -> list[str]:
    """``index_add_`` of ``x``'s rows at ``i``.  It moves 3 bytes per byte of ``x``: ``x`` read, and each
    output row read and written back (the reductions happen in L2; the output, as large as ``x``, does
    not stay there), where a copy moves 2; "of copy" compares the bandwidths of those bytes, so a kernel
    at the memory system's limit reads 1.0 (and "time vs copy" shows the 1.5x the extra bytes cost).  Copy
    anchor: the f32 copy scaled to ``x``'s bytes."""
    acc = torch.zeros_like(x)
    moved = 3 * x.numel() * x.element_size()
    t_copy = t_copy_f32 * x.element_size() / 4
    copy_bw = 2 * x.numel() * x.element_size() / t_copy
    t_torch, t_wc = _ms(lambda: acc.index_add_(0, i, x)), _ms(lambda: index_add_(acc, i, x))
    return [
        f"index_add_ {x.shape[0]}x{x.shape[1]} {name} | {moved / t_wc / 1e6:.0f} GB/s moved | "
        f"{moved / t_wc / copy_bw:.2f} of copy bandwidth (time {t_wc / t_copy:.2f}x copy's) | "
        f"{t_torch / t_wc:.2f}x torch"
    ]


def gemm(quick: bool) -> list[str]:
    cons = dk.gemm_constraints()
    subs = {dk.BM: 128, dk.BN: 128, dk.BK: 32}
    cons = [c for c in cons if not isinstance(c, wc.WaveConstraint)] + [
        wc.WaveConstraint(dk.M, 64),
        wc.WaveConstraint(dk.N, 64),
    ]
    hopper = torch.cuda.get_device_capability() == (9, 0)
    out = []
    for target in (["sm_90a"] if hopper else []) + [None]:
        kernels = [
            wc.compile(make(cons), subs, backend="cuda", target=target)
            for make in (dk.make_gathered_rows_gemm, dk.make_gather_gemm, gemm_kernel)
        ]
        out += gemm_rows(*kernels, target or "default target", quick)
    return out


def gemm_rows(gathered, scattered, dense, target: str, quick: bool) -> list[str]:
    out = []
    for m, n, k in [(4096, 4096, 4096), (8192, 2048, 4096)][: 1 if quick else 2]:
        x = torch.randn(m, k, dtype=torch.float16, device="cuda")
        ids = torch.randperm(dk.TOP_K * m, device="cuda")[:m].int()
        b = torch.randn(n, k, dtype=torch.float16, device="cuda")
        w, c = torch.rand(m, device="cuda"), torch.zeros(m, n, device="cuda")
        t_d = _ms(lambda: dense(x, b, c))
        for name, t in [
            ("gathered-rows GEMM", _ms(lambda: gathered(x, ids, b, c))),
            ("gather GEMM + weighted atomic scatter", _ms(lambda: scattered(x, ids, b, w, c))),
        ]:
            out.append(
                f"{name} {m}x{n}x{k} {target} | {2 * m * n * k / t / 1e9:.0f} TFLOP/s | {t_d / t:.2f} of dense wavec"
            )
    return out


def main() -> None:
    quick = "--quick" in sys.argv
    table = rows(quick) + gemm(quick)
    print(f"device: {torch.cuda.get_device_name()}")
    print("\n".join(table))


if __name__ == "__main__":
    main()
