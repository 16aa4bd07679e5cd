"""Opt-in variants of the dense split-KV decode kernel for mid batches (issues #23 / #24; docs/attention.md
"Decode variants").  The default kernel (mma.sync, two waves of 16 rows, ``cp.async`` two stages) holds
255 registers at 64 threads on sm_90a, so 4 workgroups share an SM with one 16 KB K/V tile each in
flight; these variants put more K/V bytes in flight per SM:

- ``mma="wgmma"`` (sm_90a): one warpgroup (128 threads) of 64 rows, K and V staged by TMA in the
  128-byte swizzle (``passes/hopper/pipeline_tma.py``, as the prefill kernel's), ``WGMMA_CONFIG``'s 64-key
  tile three stages deep: two 32 KB tiles in flight behind one thread's copies, where each of the
  mma.sync tile's 64 threads computes the source address and zero-fill size of its 16 ``cp.async`` a tile
  (168 registers unpipelined, 255 pipelined).  The 60 padded rows (q_len 1, G 4) cost wgmma issue only.
- ``intra_wg_overlap=True`` (wgmma, TMA, 3+ stages; ``passes/hopper/intra_warpgroup_overlap.py``): the
  next tile's scores on the tensor cores while this tile's softmax runs, to shorten the dependent chain
  between one stage's wait and the next fill.
- ``launch_bound=N`` (``SchedulingConstraint(min_workgroups_per_sm=N)``): ptxas keeps the registers low
  enough for N workgroups an SM, spilling where it must (untimed; the spills are reported, not refused).
- ``l2_prefetch=64 | 128 | 256`` (``cp.async`` only): the L2 fetches that many bytes for a missed sector
  (session 14's probe: B=16 / 32 decode 2-3 % faster at 128).
- deeper ``cp.async`` pipelines: ``config=(BLOCK_N, waves, stages)`` with 3 or 4 stages (``decode_config``).

``Variant`` carries the choice from the entry point to the kernel factory; ``check_variant`` names the
argument where one cannot serve.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import wavec as wc

MMAS = ("mma_sync", "wgmma")
ASYNC_COPIES = ("auto", "cp.async", "tma")
L2_PREFETCH = (64, 128, 256)
WAVE_ROWS = {"mma_sync": 16, "wgmma": 64}  # query rows of one wave (a warp) / one warpgroup
TARGET = {"mma_sync": None, "wgmma": "sm_90a"}  # None: the visible GPU (the emulator's default target)
# wgmma: (BLOCK_N, warpgroups, stages); 64 keys three deep is 96 KB of K/V stages (two workgroups an SM),
# 169 registers (bf16 d128, ptxas 13 sm_90a); four deep (128 KB, one an SM) timed 1-4 % slower at B=8-32
# (session 17, docs/attention.md "Decode variants timed")
WGMMA_CONFIG = (64, 1, 3)
# the split rule's workgroups an SM per instruction (``decode.num_splits_for``): the mma.sync kernel's
# ``SPLIT_WAVES`` (rounded up); wgmma as many splits as keep every workgroup within one an SM (rounded down):
# the fastest split count of session 17's sweep at all four shapes (B=8: 2, B=16 / 32 and 16x4096: 1)
SPLIT_PER_SM = {"mma_sync": None, "wgmma": 1}
# decode_attention(mma=None) takes wgmma (WGMMA_CONFIG, its own split rule) from the first to the second
# count of KV-head groups (batch x kv_heads) on an sm_90 GPU: where it beat the default on the H200 (session
# 18, docs/attention.md "Decode variants timed": B = 4-16 of GQA 32/8 d128 1.10-1.22x; even at 256 groups,
# slower at 8 and 512)
AUTO_GROUPS = (32, 128)


@dataclass(frozen=True)
class Variant:
    """How the split kernel is built: the matrix instruction, how K/V are staged, a launch bound."""

    mma: str | None = "mma_sync"  # None: ``resolve`` chooses
    async_copy: str = "auto"
    launch_bound: int | None = None
    intra_wg_overlap: bool = False
    l2_prefetch: int | None = None

    @property
    def wave_rows(self) -> int:
        return WAVE_ROWS[self.mma or "mma_sync"]

    @property
    def target(self) -> str | None:
        return TARGET[self.mma or "mma_sync"]

    @property
    def split_per_sm(self) -> int | None:
        return SPLIT_PER_SM[self.mma or "mma_sync"]

    @property
    def tma(self) -> bool:
        """K and V staged by TMA (wgmma's "auto" and "tma")."""
        return self.mma == "wgmma" and self.async_copy != "cp.async"

    def constraint_options(self) -> dict:
        """``decode_constraints``' keywords for this variant (none for the default: its kernel unchanged)."""
        options: dict[str, Any] = {}
        if self.mma != "mma_sync":
            options["mma"] = self.mma
        if self.async_copy != "auto":
            options["async_copy"] = self.async_copy
        if self.launch_bound is not None:
            options["min_workgroups_per_sm"] = self.launch_bound
        if self.intra_wg_overlap:
            options["intra_wg_overlap"] = True
        if self.l2_prefetch is not None:
            options["l2_prefetch"] = self.l2_prefetch
        return options


DEFAULT = Variant()  # the mma.sync kernel
AUTO = Variant(mma=None)  # decode_attention's default: ``resolve`` picks the instruction


def resolve(variant: Variant, q: Any, caches: dict, kv_heads: int, plain: bool, backend) -> Variant:
    """``variant`` with ``mma=None`` chosen: "wgmma" where ``AUTO_GROUPS`` says it was faster, the call is
    ``plain`` (no tile, ALiBi or one-launch combine given) with every other variant field at its default, q is
    on an sm_90 GPU run by the CUDA backend, the query rows fit one warpgroup and the caches suit TMA; else
    "mma_sync" (the default kernel)."""
    if variant.mma is not None:
        return variant
    default = dataclasses.replace(variant, mma="mma_sync")
    batch, q_len, heads, _ = q.shape
    ok = plain and default == DEFAULT and backend in (None, "cuda")
    ok = ok and q.is_cuda and AUTO_GROUPS[0] <= batch * kv_heads <= AUTO_GROUPS[1]
    ok = ok and heads % max(kv_heads, 1) == 0 and q_len * (heads // max(kv_heads, 1)) <= WAVE_ROWS["wgmma"]
    if not ok or _capability(q) != (9, 0):
        return default
    wgmma = dataclasses.replace(variant, mma="wgmma")
    try:
        check_tma_strides("decode_attention", wgmma, caches)
    except wc.WavecError:
        return default
    return wgmma


def check_variant(fn: str, q: Any, variant: Variant, one_launch: bool, backend) -> Variant:
    """``variant`` if it can serve this call, else a ``WavecError`` naming the argument that cannot (the
    stages that ``intra_wg_overlap`` needs: ``check_stages``, once the tile is known)."""

    def fail(message: str) -> wc.WavecError:
        return wc.WavecError(message=f"{fn}: {message}")

    v = variant
    if v.mma not in MMAS:
        raise fail(f"mma must be one of {MMAS} or None, got {v.mma!r}")
    if v.async_copy not in ASYNC_COPIES:
        raise fail(f"async_copy must be one of {ASYNC_COPIES}, got {v.async_copy!r}")
    bound = v.launch_bound
    if bound is not None and (type(bound) is not int or not 1 <= bound <= 32):
        raise fail(f"launch_bound must be None or an int in 1..32, got {bound!r}")
    if type(v.intra_wg_overlap) is not bool:
        raise fail(f"intra_wg_overlap must be True or False, got {v.intra_wg_overlap!r}")
    if v.l2_prefetch is not None and (type(v.l2_prefetch) is not int or v.l2_prefetch not in L2_PREFETCH):
        raise fail(f"l2_prefetch must be None or one of {L2_PREFETCH}, got {v.l2_prefetch!r}")
    if v.async_copy == "tma" and v.mma != "wgmma":
        raise fail("async_copy='tma' stages K/V for wgmma tiles only: pass mma='wgmma' too")
    if v.intra_wg_overlap and not v.tma:
        raise fail(f"intra_wg_overlap=True needs mma='wgmma' over TMA, got mma={v.mma!r}, async_copy={v.async_copy!r}")
    if v.l2_prefetch is not None and v.tma:
        raise fail("l2_prefetch qualifies cp.async copies: K/V go by TMA here (pass async_copy='cp.async')")
    if v.mma == "wgmma":
        if one_launch:
            raise fail("one_launch=True is built for mma='mma_sync' only (the in-kernel combine's layout)")
        if backend not in (None, "cuda", "emulator"):
            raise fail(f"mma='wgmma' needs the CUDA backend (or the emulator), got backend={backend!r}")
        if q.is_cuda and _capability(q) != (9, 0):
            raise fail(f"mma='wgmma' needs an sm_90 GPU (Hopper), this one is sm_{''.join(map(str, _capability(q)))}")
    for name, value in (("launch_bound", bound), ("l2_prefetch", v.l2_prefetch)):
        if value is not None and backend not in (None, "cuda", "emulator"):
            raise fail(f"{name} is a PTX qualifier: NVIDIA targets only, got backend={backend!r}")
    return v


def check_stages(fn: str, variant: Variant, stages: int) -> None:
    """The next tile's scores of ``intra_wg_overlap`` read a third stage (the pass's contract)."""
    if variant.intra_wg_overlap and stages < 3:
        raise wc.WavecError(
            message=f"{fn}: intra_wg_overlap=True needs 3+ stages (config=(BLOCK_N, 1, 3)), got {stages}"
        )


def check_tma_strides(fn: str, variant: Variant, caches: dict) -> None:
    """TMA's tensor maps need the head dim contiguous and every other stride a multiple of 16 bytes: a
    cache that is not (a view into a padded row, say) is named here, at plan time (the strides are part
    of the plan's key), rather than by the launch."""
    if not variant.tma:
        return
    for name, t in caches.items():
        strides = [s * t.element_size() for s, n in zip(t.stride(), t.shape) if n > 1]
        if t.stride(-1) != 1 or any(s % 16 for s in strides[:-1]):
            raise wc.WavecError(
                message=f"{fn}: mma='wgmma' stages {name} by TMA, which needs its last dim contiguous and every "
                f"other stride a multiple of 16 bytes, got strides {tuple(t.stride())} (elements); pass "
                "async_copy='cp.async' or a cache padded to 16 bytes"
            )


def _capability(q: Any) -> tuple[int, int]:
    import torch

    return tuple(torch.cuda.get_device_capability(q.device))  # type: ignore[return-value]


def parse_variant(text: str) -> tuple[tuple | None, Variant]:
    """``decode_tiles.py``'s ``--configs`` entries: ``BLOCK_NxWAVESxSTAGES`` then ``:``-separated options
    (``wgmma``, ``cp.async``, ``ov`` for ``intra_wg_overlap``, ``lb<N>``, ``l2p<N>``), or ``default`` /
    ``wgmma`` / ``mma_sync`` alone for the variant's own tile (``default``: the library's choice, ``resolve``);
    e.g. ``64x1x3:wgmma:ov``, ``32x2x2:lb5``, ``32x2x2:l2p128``."""
    head, *opts = text.split(":")
    if head in ("default", *MMAS):
        opts, head = ([head] if head in MMAS else []) + opts, ""
    config = tuple(int(v) for v in head.split("x")) if head else None
    mma, copy, bound, overlap, l2 = None if text == "default" else "mma_sync", "auto", None, False, None
    for opt in opts:
        if opt in MMAS:
            mma = opt
        elif opt in ASYNC_COPIES:
            copy = opt
        elif opt == "ov":
            overlap = True
        elif opt.startswith("lb") and opt[2:].isdigit():
            bound = int(opt[2:])
        elif opt.startswith("l2p") and opt[3:].isdigit():
            l2 = int(opt[3:])
        else:
            raise ValueError(f"unknown option {opt!r} in {text!r} (wgmma, mma_sync, cp.async, tma, ov, lb<N>, l2p<N>)")
    return config, Variant(mma, copy, bound, overlap, l2)
