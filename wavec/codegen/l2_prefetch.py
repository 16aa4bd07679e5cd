"""The L2 prefetch size of ``SchedulingConstraint(l2_prefetch=B)`` on every ``cp.async`` in the PTX:
``cp.async.{ca,cg}.shared.global.L2::{B}B`` (PTX ISA "cp.async", ``.level::prefetch_size``, PTX 7.4,
sm_80+), as CUTLASS's sm80 copies spell it.  The L2 then fetches the whole B-byte block of a missed
sector from DRAM in one request rather than sector by sector (docs/attention.md, "L2 prefetch": the
decode measurement).

MLIR's ``nvgpu.device_async_copy`` (and NVVM's ``cp.async`` ops under it) have no spelling for the
qualifier, so it is written into the text IREE returns, beside the launch bound of
``codegen/launch_bounds.py``.

Requires: PTX text.  Guarantees: the same text with the qualifier on each ``cp.async`` copy (commits and
waits untouched), or a ``CodegenError`` when the PTX already carries a prefetch size.
"""

from __future__ import annotations

import re

from wavec.errors import CodegenError

SIZES = (64, 128, 256)
_COPY = re.compile(r"\bcp\.async\.(ca|cg)\.shared\.global(?=[\s\[])")


def with_l2_prefetch(ptx: str, size: int, loc=None) -> str:
    """``ptx`` with ``.L2::{size}B`` on every ``cp.async`` global-to-shared copy."""
    if ".L2::" in ptx:
        raise CodegenError(loc, message=f"l2_prefetch={size}: the PTX already has an L2 prefetch size")
    return _COPY.sub(lambda m: f"cp.async.{m.group(1)}.shared.global.L2::{size}B", ptx)


__all__ = ["SIZES", "with_l2_prefetch"]
