"""Checks on the PTX that LLVM produced, for rules no MLIR verifier sees.

``wgmma_fence_violations``: PTX asks that every register write an asynchronous ``wgmma.mma_async``
depends on come before the ``wgmma.fence`` that orders it; LLVM does not know that rule and may move
plain register copies (e.g. an accumulator's zero-initialisation in a peeled first loop iteration) to
after the fence.  ``lowering_wgmma.fence_operands`` prevents the case we have seen; this check refuses
any other before a wrong kernel can run.  It costs one regex pass over the PTX.
"""

from __future__ import annotations

import re

_FENCED = re.compile(r"wgmma\.fence\.sync\.aligned;(.*?)wgmma\.mma_async[^{]*\{([^}]*)\}", re.S)
_DEST = re.compile(r"\s*(?:@!?%p\d+\s+)?[a-z][\w.:]*\s+(%[rf]\d+),")


def wgmma_fence_violations(ptx: str) -> list[str]:
    """Instructions between a ``wgmma.fence`` and the next ``wgmma.mma_async`` that write one of that
    wgmma's accumulator registers."""
    bad = []
    for m in _FENCED.finditer(ptx):
        acc = {r.strip() for r in m.group(2).split(",")}
        for line in m.group(1).splitlines():
            dst = _DEST.match(line)
            if dst and dst.group(1) in acc:
                bad.append(line.strip())
    return bad
