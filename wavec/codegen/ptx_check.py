"""Checks on the PTX that LLVM produced, for rules no MLIR verifier sees.

``wgmma_fence_violations``: PTX asks that every register write an asynchronous ``wgmma.mma_async``
depends on come before the ``wgmma.fence`` that orders it; LLVM does not know that rule and may move
plain register copies (e.g. an accumulator's zero-initialisation in a peeled first loop iteration) to
after the fence.  ``codegen.hopper.wgmma.fence_operands`` prevents the case we have seen; this check refuses
any other before a wrong kernel can run.  It costs one regex pass over the PTX.

``wgmma_descriptor_violations``: every ``wgmma`` shared-memory matrix descriptor must reach the
instruction as ``or.b64 %d, %lo, C`` (``C`` the constant high word: SBO and swizzle mode, shifted), or a
64-bit constant, possibly through ``mov``s: its high word is then a constant ptxas materialises itself.  A
descriptor computed as a 64-bit ``add`` (the start address plus the whole descriptor constant) leaves
ptxas a carry chain into the high word, and ptxas 12.9 dropped it: in the peeled first K iteration of
the warp-specialized 128x256 and 128x192 tiles (two consumer warpgroups, A descriptors offset per
warpgroup) it took the A descriptors' high word from an unrelated register (``R2UR UR17, R11`` with
R11 the high half of the M-tile offset: no swizzle, SBO 0), so the first K tile's wgmmas read A in the
wrong layout (relative error sqrt(128 / K) on an H100).  ``codegen.hopper.wgmma.split_descriptor`` builds
descriptors the checked way.
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


_WGMMA = re.compile(r"wgmma\.mma_async[^{;]*\{[^}]*\},\s*(\{[^}]*\}|%rd\d+),\s*(%rd\d+)")
_DEF = re.compile(r"^\s*(?:@!?%p\d+\s+)?([a-z][\w.:]*)\s+(%rd\d+),\s*([^;]*);", re.M)


def _descriptor_ok(reg: str, defs: dict, seen: set) -> str | None:
    """None when every definition of ``reg`` gives it a constant high word, else the offending one."""
    if reg in seen:  # a loop-carried copy of itself
        return None
    seen.add(reg)
    for op, args in defs.get(reg, [("<undefined>", "")]):
        src = [a.strip() for a in args.split(",")]
        if op.startswith("mov.") and re.fullmatch(r"-?\d+", src[0]):
            continue
        if op.startswith("mov.") and src[0].startswith("%rd"):
            bad = _descriptor_ok(src[0], defs, seen)
            if bad:
                return bad
            continue
        if op == "or.b64" and len(src) == 2 and re.fullmatch(r"-?\d+", src[1]) and int(src[1]) % 2**64 >= 2**32:
            continue
        return f"{op} {reg}, {args}"
    return None


def wgmma_descriptor_violations(ptx: str) -> list[str]:
    """Definitions of ``wgmma.mma_async`` descriptor operands whose high 32 bits are not a constant ORed
    in (e.g. ``add.s64 %rd73, %rd50, 4611686293305360384``); one entry per offending descriptor."""
    defs: dict[str, list] = {}
    for m in _DEF.finditer(ptx):
        defs.setdefault(m.group(2), []).append((m.group(1), m.group(3)))
    bad = []
    for m in _WGMMA.finditer(ptx):
        for reg in (m.group(1), m.group(2)):
            if reg.startswith("%rd"):
                why = _descriptor_ok(reg, defs, set())
                if why and why not in bad:
                    bad.append(why)
    return bad
