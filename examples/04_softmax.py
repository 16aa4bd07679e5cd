"""Example 4: row softmax with wc.max / wc.sum — reductions in-thread, then across the wave's lanes."""

import math
import sys

import torch
from _check import device_and_backend, report

import wavec as wc
from wavec import Memory

M, N = wc.sym.M, wc.sym.N
BLOCK_M = wc.sym.BLOCK_M

constraints = [
    wc.WorkgroupConstraint(M, BLOCK_M, 0),
    wc.WorkgroupConstraint(N, N, 1),  # a whole row per workgroup (N is bound at compile time)
    wc.WaveConstraint(M, 1),  # one wave per row
    wc.HardwareConstraint(threads_per_wave=32, vector_shapes={M: 1, N: 256}),
]


@wc.wave(constraints)
def softmax(x: Memory[M, N, wc.f16], out: Memory[M, N, wc.f16]):
    v = wc.cast(wc.read(x), wc.f32)
    e = wc.exp2((v - wc.max(v, N)[:, None]) * (1.0 / math.log(2.0)))
    wc.write(wc.cast(e * (1.0 / wc.sum(e, N))[:, None], wc.f16), out)


def main() -> bool:
    device, backend = device_and_backend()
    kernel = wc.compile(softmax, {BLOCK_M: 4, N: 1024}, backend=backend)
    x = torch.randn(37, 1024, device=device, dtype=torch.float16) * 4
    out = torch.full_like(x, float("nan"))
    kernel(x, out)
    return report("softmax f16 [37, 1024]", out, torch.softmax(x.double(), dim=-1), 2e-3, backend)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
