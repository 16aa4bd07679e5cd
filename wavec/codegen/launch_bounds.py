"""The launch bound of ``SchedulingConstraint(min_workgroups_per_sm=N)`` in the PTX: ``.minnctapersm N``
after the entry's ``.maxntid`` (PTX ISA "Performance-tuning directives").  ptxas then allots at most the
registers that let N workgroups of ``.maxntid`` threads share one SM's register file, spilling if it must;
the driver's JIT reads the same directive when the PTX itself is loaded.

IREE emits ``.maxntid`` from the workgroup size and has no spelling for the minimum, so it is written into
the text it returns (one entry per module: a wavec kernel).

Requires: PTX with exactly one ``.entry`` and its ``.maxntid`` line.  Guarantees: the same text with one
``.minnctapersm`` line after that ``.maxntid``, or a ``CodegenError`` when there is no single such line.
"""

from __future__ import annotations

import re

from wavec.errors import CodegenError

_MAXNTID = re.compile(r"^(\s*\.maxntid\s+\d+(?:\s*,\s*\d+)*\s*)$", re.M)


def with_min_workgroups(ptx: str, count: int, loc=None) -> str:
    """``ptx`` with ``.minnctapersm count`` after its entry's ``.maxntid``."""
    found = _MAXNTID.findall(ptx)
    if len(found) != 1 or ".minnctapersm" in ptx:
        raise CodegenError(
            loc,
            message=f"min_workgroups_per_sm: expected one .maxntid line and no .minnctapersm in the PTX, "
            f"found {len(found)} .maxntid",
        )
    return _MAXNTID.sub(lambda m: f"{m.group(1)}\n.minnctapersm {count}", ptx, count=1)


__all__ = ["with_min_workgroups"]
