"""Example 2: ``out = a * b + bias[None, :]`` — elementwise arithmetic with a broadcast operand."""

import sys

import torch
from _check import device_and_backend, report

import wavec as wc
from wavec import Memory

M, N = wc.sym.M, wc.sym.N
BLOCK_M, BLOCK_N = wc.sym.BLOCK_M, wc.sym.BLOCK_N

constraints = [
    wc.WorkgroupConstraint(M, BLOCK_M, 0),
    wc.WorkgroupConstraint(N, BLOCK_N, 1),
    wc.WaveConstraint(M, 1),  # one wave per row of the tile
    wc.HardwareConstraint(threads_per_wave=32, vector_shapes={M: 1, N: 128}),  # 4 f32 per lane
]


@wc.wave(constraints)
def scale_shift(a: Memory[M, N, wc.f32], b: Memory[M, N, wc.f32], bias: Memory[N, wc.f32], out: Memory[M, N, wc.f32]):
    wc.write(wc.read(a) * wc.read(b) + wc.read(bias)[None, :], out)


def main() -> bool:
    device, backend = device_and_backend()
    kernel = wc.compile(scale_shift, {BLOCK_M: 4, BLOCK_N: 256}, backend=backend)
    a, b = torch.randn(32, 1024, device=device), torch.randn(32, 1024, device=device)
    bias = torch.randn(1024, device=device)
    out = torch.full_like(a, float("nan"))
    kernel(a, b, bias, out)
    ref = a.double() * b.double() + bias.double()[None, :]
    return report("a * b + bias[None, :] f32 [32, 1024]", out, ref, 1e-6, backend)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
