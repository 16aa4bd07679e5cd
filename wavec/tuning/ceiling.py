"""Analytical lower bound on a GEMM launch's time, and the % of it a measured time reaches.

The bound is the launch overhead plus the largest of: the matrix pipe (the busiest SM's
``ceil(ctas / sms)`` workgroups of ``2 * BLOCK_M * BLOCK_N * K`` padded FLOPs at ``rate / sms``), HBM
(A and B read once, C written once), L2 (every workgroup's A and B panels) and shared memory (the
busiest SM's waves reading their A and B slices).  Rates: published figures per GPU, overridable by
``measure_rates`` (GPU only) or passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .devices import DEVICES as TABLE


@dataclass(frozen=True)
class DeviceRates:
    name: str
    sms: int
    matrix_flops: float  # dense f16/bf16 FLOP/s on the matrix units
    hbm_bytes: float  # bytes/s
    l2_bytes: float  # bytes/s
    shared_bytes_per_sm: float  # bytes/s per SM
    launch_s: float = 2e-6


SHARED_BYTES_PER_CLOCK = 128  # per SM (CU): 32 banks of 4 bytes
DEVICES = {  # from the device table (tuning/devices.py)
    key: DeviceRates(d.name, d.sms, d.matrix_flops, d.hbm_bytes_s, d.l2_bytes_s, SHARED_BYTES_PER_CLOCK * d.clock_hz)
    for key, d in TABLE.items()
}


def device_rates(gpu_name: str = "H100", measured: dict | None = None) -> DeviceRates:
    """Rates for a GPU name (substring match: "NVIDIA H200" -> H200; unknown names get H100's),
    with any field in ``measured`` (e.g. ``{"hbm_bytes": 4.3e12}``) replacing the published one."""
    base = next((r for k, r in DEVICES.items() if k in gpu_name.upper()), DEVICES["H100"])
    return replace(base, **(measured or {}))


def gemm_ceiling(
    m: int,
    n: int,
    k: int,
    block_m: int,
    block_n: int,
    waves=(2, 2),
    in_bytes: int = 2,
    out_bytes: int = 4,
    rates: DeviceRates | None = None,
) -> dict:
    """Seconds per bound and the overall ``bound`` for one launch of ``C[m, n] = A[m, k] @ B[n, k].T``."""
    r = rates or DEVICES["H100"]
    ctas = -(-m // block_m) * -(-n // block_n)
    per_sm = -(-ctas // r.sms)  # round-robin: the busiest SM's workgroups
    mma = per_sm * 2.0 * block_m * block_n * k / (r.matrix_flops / r.sms)
    hbm = ((m * k + n * k) * in_bytes + m * n * out_bytes) / r.hbm_bytes
    l2 = ctas * (block_m + block_n) * k * in_bytes / r.l2_bytes
    shared = per_sm * (block_m * k * waves[1] + block_n * k * waves[0]) * in_bytes / r.shared_bytes_per_sm
    parts = {"mma": mma, "hbm": hbm, "l2": l2, "shared": shared}
    bound = max(parts.values()) + r.launch_s
    limiter = max(parts, key=parts.__getitem__)
    return {**parts, "launch": r.launch_s, "bound": bound, "limiter": limiter, "ctas": ctas, "waves": -(-ctas // r.sms)}


def percent_of_ceiling(measured_s: float, ceiling: dict) -> float:
    return 100.0 * ceiling["bound"] / measured_s


def measure_rates(size: int = 8192) -> dict:
    """Matrix FLOP/s (torch f16 matmul) and HBM bytes/s (a large copy) measured on the visible GPU."""
    import torch

    from .timing import cuda_event_timer

    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    t_mm = min(cuda_event_timer(None, lambda: a @ b, reps=5) for _ in range(3))
    x = torch.empty(1 << 29, device="cuda", dtype=torch.uint8)
    y = torch.empty_like(x)
    t_cp = min(cuda_event_timer(None, lambda: y.copy_(x), reps=5) for _ in range(3))
    return {"matrix_flops": 2.0 * size**3 / t_mm, "hbm_bytes": 2.0 * x.numel() / t_cp}
