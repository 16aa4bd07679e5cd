"""Opt-in variants of the dense split-KV decode kernel for mid batches (issues #23 / #24; docs/attention.md
"Decode variants").  The default kernel (mma.sync, two waves of 16 rows, ``cp.async`` two stages) holds
255 registers at 64 threads on sm_90a, so 4 workgroups share an SM with one 16 KB K/V tile each in
flight; these variants put more K/V bytes in flight per SM:

- ``mma="wgmma"`` (sm_90a): one warpgroup (128 threads) of 64 rows, K and V staged by TMA in the
  128-byte swizzle (``passes/hopper/pipeline_tma.py``, as the prefill kernel's), ``WGMMA_CONFIG``'s 64-key
  tile four stages deep: three 32 KB tiles in flight behind one thread's copies, where the mma.sync tile's
  64 threads each hold the addresses of their share of every ``cp.async``.  The 60 padded rows (q_len 1,
  G 4) cost only wgmma issue.
- ``launch_bound=N`` (``SchedulingConstraint(min_workgroups_per_sm=N)``): ptxas keeps the registers low
  enough for N workgroups an SM, spilling where it must (untimed; the spills are reported, not refused).
- deeper ``cp.async`` pipelines: ``config=(BLOCK_N, waves, stages)`` with 3 or 4 stages (``decode_config``).

``Variant`` carries the choice from the entry point to the kernel factory; ``check_variant`` names the
argument where one cannot serve.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import wavec as wc

MMAS = ("mma_sync", "wgmma")
ASYNC_COPIES = ("auto", "cp.async", "tma")
WAVE_ROWS = {"mma_sync": 16, "wgmma": 64}  # query rows of one wave (a warp) / one warpgroup
TARGET = {"mma_sync": None, "wgmma": "sm_90a"}  # None: the visible GPU (the emulator's default target)
# wgmma: (BLOCK_N, warpgroups, stages); 64 keys four deep is 128 KB of K/V stages (one workgroup an SM),
# 170 registers (bf16 d128, ptxas 13 sm_90a); 128 keys spend 238 registers for the same bytes in flight
WGMMA_CONFIG = (64, 1, 4)


@dataclass(frozen=True)
class Variant:
    """How the split kernel is built: the matrix instruction, how K/V are staged, a launch bound."""

    mma: str = "mma_sync"
    async_copy: str = "auto"
    launch_bound: int | None = None

    @property
    def wave_rows(self) -> int:
        return WAVE_ROWS[self.mma]

    @property
    def target(self) -> str | None:
        return TARGET[self.mma]

    def constraint_options(self) -> dict:
        """``decode_constraints``' keywords for this variant (none for the default: its kernel unchanged)."""
        options: dict[str, Any] = {}
        if self.mma != "mma_sync":
            options["mma"] = self.mma
        if self.async_copy != "auto":
            options["async_copy"] = self.async_copy
        if self.launch_bound is not None:
            options["min_workgroups_per_sm"] = self.launch_bound
        return options


DEFAULT = Variant()


def check_variant(
    fn: str, q: Any, mma: str | None, async_copy: str, launch_bound: int | None, one_launch: bool, backend
) -> Variant:
    """The ``Variant`` of a call, or a ``WavecError`` naming the argument that cannot serve."""

    def fail(message: str) -> wc.WavecError:
        return wc.WavecError(message=f"{fn}: {message}")

    mma = mma or "mma_sync"
    if mma not in MMAS:
        raise fail(f"mma must be one of {MMAS} or None, got {mma!r}")
    if async_copy not in ASYNC_COPIES:
        raise fail(f"async_copy must be one of {ASYNC_COPIES}, got {async_copy!r}")
    if launch_bound is not None and (type(launch_bound) is not int or not 1 <= launch_bound <= 32):
        raise fail(f"launch_bound must be None or an int in 1..32, got {launch_bound!r}")
    if async_copy == "tma" and mma != "wgmma":
        raise fail("async_copy='tma' stages K/V for wgmma tiles only: pass mma='wgmma' too")
    if mma == "wgmma":
        if one_launch:
            raise fail("one_launch=True is built for mma='mma_sync' only (the in-kernel combine's layout)")
        if backend not in (None, "cuda", "emulator"):
            raise fail(f"mma='wgmma' needs the CUDA backend (or the emulator), got backend={backend!r}")
        if q.is_cuda and _capability(q) != (9, 0):
            raise fail(f"mma='wgmma' needs an sm_90 GPU (Hopper), this one is sm_{''.join(map(str, _capability(q)))}")
    if launch_bound is not None and backend not in (None, "cuda", "emulator"):
        raise fail(f"launch_bound is a PTX launch bound: NVIDIA targets only, got backend={backend!r}")
    return Variant(mma, async_copy, launch_bound)


def _capability(q: Any) -> tuple[int, int]:
    import torch

    return tuple(torch.cuda.get_device_capability(q.device))  # type: ignore[return-value]


def parse_variant(text: str) -> tuple[tuple | None, Variant]:
    """``decode_tiles.py``'s ``--configs`` entries: ``BLOCK_NxWAVESxSTAGES`` then ``:``-separated options
    (``wgmma``, ``cp.async``, ``lb<N>``), or ``default`` / ``wgmma`` alone for the variant's own tile;
    e.g. ``64x1x3:wgmma``, ``32x2x2:lb5``."""
    head, *opts = text.split(":")
    if head in ("default", "wgmma"):
        opts, head = ([head] if head == "wgmma" else []) + opts, ""
    config = tuple(int(v) for v in head.split("x")) if head else None
    mma, copy, bound = "mma_sync", "auto", None
    for opt in opts:
        if opt in MMAS:
            mma = opt
        elif opt in ASYNC_COPIES:
            copy = opt
        elif opt.startswith("lb") and opt[2:].isdigit():
            bound = int(opt[2:])
        else:
            raise ValueError(f"unknown option {opt!r} in {text!r} (wgmma, mma_sync, cp.async, tma, lb<N>)")
    return config, Variant(mma, copy, bound)
