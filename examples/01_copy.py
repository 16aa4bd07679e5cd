"""Example 1: a 2-D copy. Each lane moves 16 contiguous bytes; the grid follows the dynamic M, N."""

import sys

import torch
from _check import device_and_backend, report

import wavec as wc
from wavec.kernels.elementwise import DEFAULT_SUBS, make_copy


def main() -> bool:
    device, backend = device_and_backend()
    kernel = wc.compile(make_copy(wc.f16), DEFAULT_SUBS, backend=backend)
    src = torch.randn(64, 2048, device=device, dtype=torch.float16)
    dst = torch.full_like(src, float("nan"))
    kernel(src, dst)
    return report("copy f16 [64, 2048]", dst, src, 0.0, backend)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
