"""Example 5: RMSNorm and LayerNorm from the kernel library (row statistics with wc.sum across lanes)."""

import sys

import torch
import torch.nn.functional as F
from _check import device_and_backend, report

import wavec as wc
from wavec.kernels.norms import BLOCK_M, N, make_layernorm, make_rmsnorm


def main() -> bool:
    device, backend = device_and_backend()
    n = 1024
    x = torch.randn(21, n, device=device, dtype=torch.float16)
    w, b = torch.randn(n, device=device, dtype=torch.float16), torch.randn(n, device=device, dtype=torch.float16)
    rms = wc.compile(make_rmsnorm(n), {BLOCK_M: 4, N: n}, backend=backend)
    out = torch.full_like(x, float("nan"))
    rms(x, w, out)
    xd = x.double()
    ok = report(
        "rmsnorm f16 [21, 1024]",
        out,
        xd * torch.rsqrt((xd * xd).mean(-1, keepdim=True) + 1e-6) * w.double(),
        2e-3,
        backend,
    )
    ln = wc.compile(make_layernorm(n), {BLOCK_M: 4, N: n}, backend=backend)
    out = torch.full_like(x, float("nan"))
    ln(x, w, b, out)
    return ok & report(
        "layernorm f16 [21, 1024]", out, F.layer_norm(xd, (n,), w.double(), b.double(), 1e-5), 2e-3, backend
    )


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
