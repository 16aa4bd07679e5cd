"""Shared helpers of the examples: pick the device, draw inputs, compare with torch and print."""

import torch

import wavec as wc
from wavec.compiler import default_backend


def device_and_backend() -> tuple[str, str]:
    backend = default_backend()
    return ("cuda" if backend == "cuda" else "cpu"), backend


def report(name: str, out: torch.Tensor, ref: torch.Tensor, tol: float, backend: str) -> bool:
    """Print one check line: every element written (no NaN poison left) and relative error under tol."""
    written = not torch.isnan(out.float()).any().item()
    err = ((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()
    ok = written and err <= tol
    where = "GPU" if backend == "cuda" else "CPU emulator (no GPU visible)"
    print(
        f"[{'PASS' if ok else 'FAIL'}] {name:<34} on {where}: rel. error {err:.2e} (tol {tol:.0e}), "
        f"all written: {written}"
    )
    return ok


__all__ = ["device_and_backend", "report", "wc"]
