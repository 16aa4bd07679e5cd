"""Per-device data that schedule rules (SM counts), cost models and ceilings (rates) need, in one table.

A device is found by name, else the visible GPU's, else by target (``device("H200")``,
``device(target="sm_80")``), else it is the H100 SXM the schedule tables were measured on.  Figures are
published ones (dense f16/bf16, boost clocks); L2 bandwidth is a commonly measured figure.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Device:
    """One GPU model: name, compile target, SMs (CUs), boost clock, sizes and rates."""

    name: str
    arch: str
    sms: int
    clock_hz: float
    l2_bytes: int
    shared_per_sm: int  # bytes of shared memory (LDS) per SM (CU)
    matrix_flops: float  # dense f16/bf16 FLOP/s
    hbm_bytes_s: float
    l2_bytes_s: float
    keys: tuple[str, ...] = ()  # substrings of the driver's device name that identify it


DEVICES: dict[str, Device] = {
    "H100": Device("H100 SXM", "sm_90", 132, 1.98e9, 50 << 20, 228 << 10, 989e12, 3.35e12, 10e12, ("H100",)),
    "H200": Device("H200", "sm_90", 132, 1.98e9, 50 << 20, 228 << 10, 989e12, 4.8e12, 10e12, ("H200",)),
    "A100": Device("A100 SXM", "sm_80", 108, 1.41e9, 40 << 20, 164 << 10, 312e12, 2.04e12, 5e12, ("A100",)),
    "MI300X": Device("MI300X", "gfx942", 304, 2.1e9, 256 << 20, 64 << 10, 1307e12, 5.3e12, 15e12, ("MI300",)),
}
BY_ARCH = {"sm_90": "H100", "sm_90a": "H100", "sm_80": "A100", "gfx942": "MI300X"}  # a target's default


def visible_name() -> str | None:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name()
    except ImportError:
        pass
    return None


def lookup(name: str) -> Device | None:
    """The table's entry whose key (or one of its name substrings) ``name`` contains, case-insensitively."""
    upper = name.upper()
    return next((d for k, d in DEVICES.items() if k in upper or any(s in upper for s in d.keys)), None)


@functools.lru_cache(maxsize=32)
def device(name: str | None = None, target: str | None = None) -> Device:
    """``name``'s entry if given, else the visible GPU's, else ``target``'s default (sm_90 -> H100,
    sm_80 -> A100, gfx942 -> MI300X), else the H100.  Cached: the visible GPU is asked once."""
    for candidate in (name, None if name else visible_name()):
        found = lookup(candidate) if candidate else None
        if found is not None:
            return found
    return DEVICES[BY_ARCH.get(target or "", "H100")]


def as_device(dev: Device | str | None, target: str | None = None) -> Device:
    """A ``Device`` from a ``Device``, a name or None (``device``'s lookup)."""
    return dev if isinstance(dev, Device) else device(dev, target)
