"""Odd-length RMSNorm / LayerNorm (and softmax: ``--kinds softmax``) rows (``kernels/rows_odd.py``) over the
layouts they can take (``rows_odd_rules.RULES`` replaced by modified copies), beside the library's: chunks a
lane (which set the waves a row) and rows a workgroup (``rows_per_workgroup``'s choice, or one row a workgroup
as the aligned long rows that reached 0.96 of copy), through the public ``rms_norm`` / ``layer_norm``
(shifted tables included at these sizes); each beside a device copy of the same bytes, one run, do_bench
medians, bf16 rows of 256 MB, with registers, spills and threads a workgroup.  Issue 20's target: >= 0.80
of copy for rows >= 1024 elements.

``--bounds 0,-1,2,4``: each layout also under a launch bound of that many workgroups an SM
(``SchedulingConstraint(min_workgroups_per_sm=)``; 0: the library's, ``OddRules.one_row_bounds``; -1: none).
``--dtype float16|bfloat16|float32`` (default bf16).  ``--full 0,1``: each layout with the norms' masked
interior (0) and over the whole tile (1, ``OddRules.full_tile``); default the library's ``full_tile``
only.  ``--layouts default``: the library's layout only (``odd_config``), e.g. to time the whole tile
against the masked one in one run; ``--layouts 0,x,4a,8o``: those (``parse_layouts``).  ``--reread 0,-1,1``:
LayerNorm as the library decides (0, ``OddRules.reread_tiles``), without (-1) or with (1, f32 too) a second
read of its chunks after the statistics (one row a workgroup through tables).  ``--short 1,0``: f32 rows of
8196-12291 (16-bit 8201-12295) at the library's shorter tiles (1, ``OddRules.short_tiles``) and at the power of
two (0).
Contiguous rows past ``OddRules.aligned_elements`` that the 16-byte run divides take this path too; the
layout ``x`` times them through ``benchmarks/rows.py``'s aligned kernels instead (and odd rows through the
library with the odd path off).

    python benchmarks/rows_odd_sweep.py [--lengths 2049,4097,8191,16383] [--kinds rms_norm,layer_norm]
        [--full 0,1] [--layouts default|0,4a,8o] [--bounds 0,2] [--reread 0,1] [--short 1,0]
        [--dtype float16]
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

import torch

from wavec.kernels import rows, rows_odd
from wavec.kernels import rows_odd_rules as rules

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rows_sweep import _us, row_inputs  # noqa: E402  (the aligned sweep's inputs and timer)

F = torch.nn.functional
LIBRARY = rules.RULES  # the library's choices; each helper below replaces one field of ``rules.RULES``


def _set(**changes: Any) -> None:
    rules.RULES = dataclasses.replace(rules.RULES, **changes)


def bound(count: int) -> None:
    """The odd kernels compiled next under a launch bound of ``count`` workgroups an SM (0: the library's,
    ``OddRules.one_row_bounds``; -1: none)."""
    _set(bound=None if count == 0 else count)


EVERY_TILE = frozenset(32 << i for i in range(8)) | {1280, 1536, 2560, 3072}  # every block_j the path takes


def reread(flag: int) -> None:
    """The odd LayerNorm kernels compiled next re-read their chunks at every tile and dtype (1), at none
    (-1), or at the library's (0, ``OddRules.reread_tiles``); the plan's other conditions hold as in the
    library (one row a workgroup through tables)."""
    every = dict.fromkeys(("f16", "bf16", "f32"), EVERY_TILE)
    _set(reread_tiles=LIBRARY.reread_tiles if flag == 0 else every if flag > 0 else {})


def short_tiles(flag: int) -> None:
    """The odd kernels compiled next take the shorter tiles (1, the library's) or powers of two (0)."""
    _set(short_tiles=LIBRARY.short_tiles if flag else {})


def layout(runs: int, one: bool, full: bool = LIBRARY.full_tile) -> None:
    """Make the odd-row path take ``runs`` chunks a lane, over one row a workgroup (``one``, from two waves)
    or ``rows_per_workgroup``'s, the norms' interior over the whole tile or masked (``full``), freshly
    compiled; ``runs`` 0: the library's layout, -1: the aligned kernels of rows.py (aligned rows; odd rows
    then take the library's other paths)."""
    _set(layout=None if runs == 0 else (runs, one), full_tile=full)
    rows_odd._COMPILED.clear()
    rows._DECIDED.clear()


def dtype_of(x: Any) -> Any:
    return rows.DTYPES[str(x.dtype).removeprefix("torch.")]


def registers() -> str:
    """(registers, spills, threads a workgroup) of the odd kernels compiled since ``layout``."""
    out = []
    for k in rows_odd._COMPILED.values():
        meta = k.artifact.metadata
        out.append(f"{meta.registers}r {meta.spills}s {meta.block[0] * meta.block[1] * meta.block[2]}t")
    return ", ".join(out)


LAYOUTS = ((0, False), (1, False), (1, True), (2, False), (2, True), (4, False), (4, True))


def parse_layouts(text: str) -> list[tuple[int, bool]]:
    """``--layouts 0,x,4a,8o``: the library's (0), the aligned kernels (x), or chunks a lane with
    ``rows_per_workgroup``'s rows (a) or one row a workgroup (o)."""
    named = {"0": (0, False), "x": (-1, False)}
    return [named[t] if t in named else (int(t[:-1]), t[-1] == "o") for t in text.split(",")]


def sweep(
    kind: str, n: int, x: Any, w: Any, b: Any, t_copy: float, fulls: list, layouts=LAYOUTS, bounds=(0,),
    rereads=(0,), tag: str = "",
) -> list[str]:  # fmt: skip
    """One line per (chunks a lane, rows a workgroup, whole tile, launch bound, re-read) layout of ``kind``
    at rows of ``n``."""
    want, call = {
        "softmax": (lambda: torch.softmax(x, -1), lambda: rows.softmax(x)),
        "rms_norm": (lambda: F.rms_norm(x, (n,), w, 1e-6), lambda: rows.rms_norm(x, w, 1e-6)),
        "layer_norm": (lambda: F.layer_norm(x, (n,), w, b, 1e-5), lambda: rows.layer_norm(x, w, b)),
    }[kind]
    want = want()
    lines = []
    combos = ((lay, full, c, r) for lay in layouts for full in fulls for c in bounds for r in rereads)
    for (runs, one), full, count, again in combos:
        if kind != "layer_norm":  # (only LayerNorm re-reads: one line per layout for the others)
            if again != rereads[0]:
                continue
            again = 0
        bound(count)
        reread(again)
        layout(runs, one, full)
        name = "default" if not runs else "aligned kernel" if runs < 0 else "one" if one else "auto"
        name += " full" if full else " masked"
        name += f" +b{count}" if count > 0 else " no bound" if count < 0 else ""
        name += (" reread" if again > 0 else " no reread" if again < 0 else "") + tag
        try:
            got = call()
            torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=3e-2)
            t = _us(call)
        except Exception as e:  # a layout past a workgroup's threads fails to compile: say so
            lines.append(f"{kind} | {n} | {runs or '-'} | {name} | failed: {type(e).__name__} {str(e)[:90]}")
        else:
            cfg = rules.library_config(dtype_of(x).bytes, n, kind, n)
            lines.append(f"{kind} | {n} | {runs or cfg} | {name} | {t:.1f} | {t_copy / t:.2f} | {registers()}")
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    arg = lambda flag, default: sys.argv[sys.argv.index(flag) + 1] if flag in sys.argv else default  # noqa: E731
    lengths = [int(v) for v in arg("--lengths", "2049,4097,8191,16383").split(",")]
    kinds = arg("--kinds", "rms_norm,layer_norm").split(",")
    fulls = [bool(int(v)) for v in arg("--full", str(int(LIBRARY.full_tile))).split(",")]
    pick = arg("--layouts", "all")
    layouts = LAYOUTS[:1] if pick == "default" else LAYOUTS if pick == "all" else parse_layouts(pick)
    bounds = [int(v) for v in arg("--bounds", "0").split(",")]
    rereads = [int(v) for v in arg("--reread", "0").split(",")]
    shorts = [int(v) for v in arg("--short", "1").split(",")]
    dt = getattr(torch, arg("--dtype", "bfloat16"))
    head = "op | N | chunks a lane (default: block, waves, rows) | rows a workgroup | us | of copy | kernels"
    lines = [f"device: {torch.cuda.get_device_name()}, {dt}", head]
    print(*lines, sep="\n", flush=True)
    for n in lengths:
        x, w, b, _y, t_copy = row_inputs(n, dt)
        for kind in kinds:
            for short in shorts:
                short_tiles(short)
                tag = "" if shorts == [1] else " short" if short else " pow2"
                lines += sweep(kind, n, x, w, b, t_copy, fulls, layouts, bounds, rereads, tag)
    rules.RULES = LIBRARY
    layout(0, False)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "rows_odd_sweep.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
