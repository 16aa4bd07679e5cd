"""Which layout the odd-row kernels (``kernels/rows_odd.py``) take for a row length: the measured choices as one
declared record (``OddRules``, the library's ``RULES``) and the plan they give a row (``odd_plan``: tile,
waves, rows a workgroup, launch bound, second read, whole tile), decided once per call shape.

Requires: nothing (pure arithmetic on the dtype's element size, the length and the pitch).  Guarantees:
``odd_plan`` is None exactly where the odd path does not apply; every table of ``OddRules`` is read from
``RULES`` at call time, so ``benchmarks/rows_odd_sweep.py`` times other choices by replacing ``RULES`` with a
``dataclasses.replace``'d copy (its ``layout`` and ``bound`` overrides force one layout on every tile).  The
measurements behind each entry are in docs/reductions.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

MAX_WAVES = 16  # two rows of 16 waves: 1024 threads, a workgroup's limit
RUNS_PER_WAVE = 4  # chunks per lane and wave, as the aligned one-tile rows (``rows.RUNS_PER_WAVE``)
NORM_RUNS = 2  # the norms': 64 registers or fewer (``tests/binary/test_rows_compile.py``)
MAX_ELEMENTS = 16384  # the longest rows this path takes (16383 bf16 or f32); longer rows loop
# a drifting slice's shared row buffers a workgroup at most (gfx942's LDS): past it (softmax's two rows of
# 2048 chunks, 65.6 KB) the ``"shared"`` variant stores by ``"scatter"`` instead
DRIFT_SHARED_MAX = 64 << 10
DRIFTS = ("shared", "scatter")  # ``rows_odd_drift``'s output variants (``OddRules.drift``)


def _bounds() -> dict[tuple[str, int], int]:
    return {
        ("layer_norm", 1280): 5,
        ("layer_norm", 1536): 5,
        ("layer_norm", 2048): 3,
        ("layer_norm", 2560): 2,
        ("layer_norm", 3072): 2,
        ("layer_norm", 4096): 2,
        ("rms_norm", 1024): 4,
    }


def _reread() -> dict[str, frozenset[int]]:
    by_one_row = frozenset({512, 1024, 1280, 1536, 2048})
    return {"f16": by_one_row, "bf16": by_one_row, "f32": frozenset({4096})}


@dataclass(frozen=True)
class OddRules:
    """The odd path's layout choices.  Tiles (``block_j``) count 16-byte chunks; element bytes key the
    per-dtype tables.

    - ``one_row_runs``: chunks a lane of contiguous norms over one row a workgroup (two waves or more):
      smaller workgroups, more resident, more bytes in flight than two rows at ``NORM_RUNS``.
    - ``ln_long_elements`` / ``ln_long_runs``: LayerNorm tiles of that many elements or more take that many
      chunks a lane (an SM holds whole rows only; smaller workgroups put more rows on it);
      ``ln_tile_runs``: per tile, overriding both (f32 16383: 8 waves of 16 chunks re-reading, no spill).
    - ``one_row_bounds``: (kind, tile) -> the launch bound (workgroups an SM) of the one-row norms reading
      tables, where the bound measured faster.
    - ``aligned_elements``: contiguous rows past that many elements take this path even where the run
      divides them (the aligned one tile read slower).
    - ``softmax_one_row``: contiguous softmax tiles of one row a workgroup -> its waves.
    - ``short_tiles``: the tiles a power of two shrinks to where the row's chunks fit, smallest first.
    - ``reread_tiles``: element type -> LayerNorm tiles that read their chunks again after the statistics.
    - ``full_tile``: the norms' interior over the whole tile (lanes past K reread the last chunk) instead of
      masked loads, whose branches took LayerNorm to 101-128 registers.
    - ``drift``: slices whose offset within 16 bytes drifts from row to row against the contiguous output's
      (``(P - n) % V``, bf16 4097 of 4104): ``rows_odd_drift``'s variant, ``"shared"`` (the row re-read from
      shared memory at the output's alignment: 16-byte global stores) or ``"scatter"`` (each value stored
      alone); ``""``: none (the narrow kernel of rows.py).  ``"shared"`` measured 1.1-3.4x ``"scatter"``
      (H200, docs/reductions.md); ``"scatter"`` serves row buffers past ``DRIFT_SHARED_MAX``.
    - ``drift_softmax_one_row``: element bytes -> drifting softmax slices of that many waves a row or more
      take one row a workgroup (half the row buffers a workgroup: bf16 4097 0.77 -> 0.84 of a dense copy,
      8191 0.64 -> 0.79; measured for 16-bit rows of 4 and 8 waves).
    - ``layout`` / ``bound``: a sweep's overrides: (chunks a lane, one row a workgroup) for every tile
      (chunks -1: no odd kernel, the aligned ones), and one launch bound for every kernel (-1: none)."""

    one_row_runs: int = 4
    ln_long_elements: int = 8192
    ln_long_runs: int = 8
    ln_tile_runs: Mapping[int, int] = field(default_factory=lambda: {4096: 16})
    one_row_bounds: Mapping[tuple[str, int], int] = field(default_factory=_bounds)
    aligned_elements: Mapping[int, int] = field(default_factory=lambda: {4: 8192, 2: 8192})
    softmax_one_row: Mapping[int, Mapping[int, int]] = field(
        default_factory=lambda: {4: {1024: 8, 2048: 8, 2560: 20}, 2: {1280: 8, 1536: 8, 2048: 8}}
    )
    short_tiles: Mapping[int, Mapping[int, tuple[int, ...]]] = field(
        default_factory=lambda: {4: {4096: (2560, 3072)}, 2: {2048: (1280, 1536)}}
    )
    reread_tiles: Mapping[str, frozenset[int]] = field(default_factory=_reread)
    full_tile: bool = True
    drift: str = "shared"
    drift_softmax_one_row: Mapping[int, int] = field(default_factory=lambda: {2: 4})
    layout: tuple[int, bool] | None = None
    bound: int | None = None


RULES = OddRules()


class OddPlan(NamedTuple):
    """The odd kernel a call shape takes: ``config`` = (``block_j``, waves a row, rows a workgroup);
    ``drift``: a drifting slice's output variant (``OddRules.drift``), None for the others."""

    config: tuple[int, int, int]
    bound: int | None
    reread: bool
    full: bool
    drift: str | None = None


def rows_per_workgroup(waves: int, tpw: int = 32) -> int:
    """Four rows of one wave, two while they fit a workgroup's 1024 threads (as ``rows.row_constraints``),
    else one (M then a batch dim: the per-row values are rank 0 and broadcast by name, as the [M] ones)."""
    return 4 if waves == 1 else 2 if 2 * waves * tpw <= 1024 else 1


def _tile(element_bytes: int, chunks: int) -> int:
    block_j = 32
    while block_j < chunks:
        block_j *= 2
    return next((t for t in RULES.short_tiles.get(element_bytes, {}).get(block_j, ()) if chunks <= t), block_j)


def library_config(element_bytes: int, n: int, kind: str, pitch: int) -> tuple[int, int, int] | None:
    """``odd_config``'s layout from the tables alone, without a sweep's ``layout`` override."""
    vec = 16 // element_bytes
    unit = 32 * vec
    aligned_long = pitch == n and n > RULES.aligned_elements.get(element_bytes, MAX_ELEMENTS)
    drifts = (pitch - n) % vec != 0
    if (n % vec == 0 and not aligned_long) or n <= unit or n > MAX_ELEMENTS or (drifts and not RULES.drift):
        return None
    block_j = _tile(element_bytes, (n - vec + 1) // vec)
    fewest = block_j // (MAX_WAVES * 32)  # chunks a lane that keep a row within MAX_WAVES (f32 past 8192)
    one_row = RULES.softmax_one_row.get(element_bytes, {})
    if kind == "softmax" and block_j in one_row:
        return block_j, one_row[block_j], 1
    if kind != "softmax" and block_j >= 2 * RULES.one_row_runs * 32:
        long_ln = kind == "layer_norm" and block_j * vec >= RULES.ln_long_elements
        runs = RULES.ln_long_runs if long_ln else RULES.one_row_runs
        runs = RULES.ln_tile_runs.get(block_j, runs) if kind == "layer_norm" else runs
        return block_j, block_j // (max(runs, fewest) * 32), 1
    runs = RUNS_PER_WAVE if kind == "softmax" or block_j <= RULES.one_row_runs * 32 else NORM_RUNS
    waves = max(1, block_j // ((max(runs, fewest) if kind == "softmax" else runs) * 32))
    one_row_from = RULES.drift_softmax_one_row.get(element_bytes)
    if kind == "softmax" and drifts and one_row_from is not None and waves >= one_row_from:
        return block_j, waves, 1
    return block_j, waves, rows_per_workgroup(waves)


def odd_config(dtype, n: int, kind: str, pitch: int) -> tuple[int, int, int] | None:
    """(``block_j``, waves per row, rows per workgroup) for rows of ``n`` elements at a row pitch of ``pitch``
    elements, or None where the odd path does not apply: rows the 16-byte run divides (the aligned kernels;
    but contiguous rows past ``aligned_elements``, whose last chunk is then the edge's tail), rows of one
    wave's unit or less (one narrowed tile serves them), rows past ``MAX_ELEMENTS`` (they loop; past 8192 f32
    slices too), a pitch whose offset within 16 bytes drifts from row to row against the contiguous output's
    where ``OddRules.drift`` is empty (else ``odd_plan`` names the drift variant).  Slices take the
    contiguous rows' layouts (one row a workgroup too: ``rows_odd.back``), drifting 16-bit softmax slices of four
    waves or more one row a workgroup (``drift_softmax_one_row``).  Norms of two waves or more take one row
    a workgroup at ``one_row_runs`` (LayerNorm: ``ln_long_runs`` / ``ln_tile_runs``), shorter ones ``NORM_RUNS``
    chunks a lane at two rows (64 registers or fewer: 32 warps an SM); a tile one wave covers
    at ``one_row_runs`` (1025 f16 / bf16) one wave a row, four rows; softmax ``RUNS_PER_WAVE``, or one row at
    the tiles ``softmax_one_row`` names.  The tile: the power of two of the row's chunks, or the first of
    ``short_tiles`` that holds them."""
    config = library_config(dtype.bytes, n, kind, pitch)
    if config is None or RULES.layout is None:
        return config
    runs, one = RULES.layout
    if runs < 0:
        return None
    waves = max(1, config[0] // (runs * 32))
    return config[0], waves, 1 if one and waves > 1 else rows_per_workgroup(waves)


def odd_full(kind: str, full: bool | None = None) -> bool:
    """Whether the odd kernel of ``kind`` takes the whole tile (``full``, default ``full_tile``; norms only)."""
    return kind != "softmax" and (RULES.full_tile if full is None else full)


def odd_plan(dtype, n: int, kind: str, pitch: int, tables: bool = True, full: bool | None = None) -> OddPlan | None:
    """The kernel rows of ``n`` at ``pitch`` take, or None (``odd_config``): its layout; the launch bound of
    contiguous norms over one row a workgroup reading their vectors through ``tables`` at the tiles
    ``one_row_bounds`` names (the gathered vectors of small inputs would spill under it: LayerNorm 16383
    136-152 bytes); whether LayerNorm over one row a workgroup through tables re-reads its chunks
    (``reread_tiles``); ``odd_full``'s whole tile; for a drifting slice ``drift_variant``'s output."""
    config = odd_config(dtype, n, kind, pitch)
    if config is None:
        return None
    drift = drift_variant(16 // dtype.bytes, n, pitch, config)
    one_row = config[2] == 1 and tables
    bound = RULES.one_row_bounds.get((kind, config[0])) if one_row else None
    if RULES.bound is not None:
        bound = RULES.bound if RULES.bound > 0 else None
    reread = kind == "layer_norm" and one_row and config[0] in RULES.reread_tiles.get(dtype.name, ())
    return OddPlan(config, bound, reread, odd_full(kind, full), drift)


def drift_variant(vec: int, n: int, pitch: int, config: tuple[int, int, int]) -> str | None:
    """``OddRules.drift`` for rows of ``n`` at ``pitch`` whose offset within 16 bytes drifts (None for the
    others); ``"shared"`` becomes ``"scatter"`` where its row buffers would pass ``DRIFT_SHARED_MAX``."""
    if (pitch - n) % vec == 0:
        return None
    if RULES.drift not in DRIFTS:
        raise ValueError(f"OddRules.drift must be one of {DRIFTS} or empty, got {RULES.drift!r}")
    block_j, _waves, rows = config
    over = drift_shared_bytes(rows, block_j) > DRIFT_SHARED_MAX
    return "scatter" if RULES.drift == "shared" and over else RULES.drift


def drift_shared_bytes(rows: int, block_j: int) -> int:
    """The ``"shared"`` variant's row buffers a workgroup: ``rows`` rows of a head slot row, the tile's
    ``block_j`` chunks and two tail slot rows, 16 bytes each (``rows_odd_drift.write_shared``)."""
    return rows * (block_j + 3) * 16
