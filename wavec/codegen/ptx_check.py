"""Checks on the PTX that LLVM produced, for rules no MLIR verifier sees (one regex pass each).

``wgmma_fence_violations``: every register write a ``wgmma.mma_async`` depends on must come before the
``wgmma.fence`` that orders it; LLVM may move plain copies after the fence.
``wgmma_descriptor_violations``: every wgmma matrix descriptor must reach the instruction as ``or.b64
%d, %lo, C`` (or a constant), never as a 64-bit ``add``, whose carry into the high word ptxas 12.9
dropped (``codegen.hopper.wgmma.split_descriptor`` builds them the checked way).  The incidents behind
both: docs/hopper.md, "Module contracts".
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
