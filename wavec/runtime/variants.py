"""Run-time counts of the launches that go to a kernel's variants: the narrow variant of sizes that break
its divisibility (odd sizes) and the strided variant of non-contiguous or misaligned tensors (views,
unaligned addresses), which ``CompiledKernel.variant_for`` compiles (docs/sizes_and_strides.md).  They
are correct but slower; this says how often a process takes them, per kernel and reason.

Requires: nothing beyond the standard library and :mod:`wavec.knobs`.

Guarantees:

* :func:`reason` names what a variant departs from its base kernel in: ``"narrow (N, K)"`` (the symbols
  whose runs it narrows), ``"strided"`` (row strides as launch values: a slice, a head of a packed
  projection), ``"strided (x, out)"`` (those arguments also read in shorter runs: a transposed view, an
  unaligned base or pitch), or both joined by ``" + "``.
* :func:`count` is called once per launch of a variant (the prepared launch, the checked launch or the
  full path of a variant kernel, whichever runs it; never for the base kernel's own launches): one
  counter increment, and with ``WAVEC_WARN_VARIANTS=1`` a warning the first time each (kernel, reason)
  is launched in the process.
* :func:`variant_report` returns ``{kernel label: {reason: launches}}``; :func:`reset_variant_report`
  clears it.
"""

from __future__ import annotations

import warnings
from collections import Counter

from wavec.knobs import knobs

__all__ = ["count", "reason", "variant_report", "reset_variant_report"]

_COUNTS: Counter = Counter()


def reason(
    base_caps: dict[str, int], base_strided: dict[str, int] | None, caps: dict[str, int],
    strided: dict[str, int] | None,
) -> str:  # fmt: skip
    """What a variant of ``caps`` / ``strided`` changes against its base kernel's options."""
    parts = []
    narrowed = sorted(s for s, c in caps.items() if base_caps.get(s) != c)
    if narrowed:
        parts.append(f"narrow ({', '.join(narrowed)})")
    if strided is not None:
        base = base_strided or {}
        capped = sorted(a for a, c in strided.items() if base.get(a) != c)
        if base_strided is None or capped:
            parts.append(f"strided ({', '.join(capped)})" if capped else "strided")
    return " + ".join(parts)


def count(key: tuple[str, str]) -> None:
    """One launch of the variant ``key`` = (kernel label, reason)."""
    seen = _COUNTS[key]
    _COUNTS[key] = seen + 1
    if not seen and knobs.warn_variants:
        label, why = key
        warnings.warn(
            f"kernel {label}: launching its {why} variant (slower than the dense, aligned kernel); "
            "wavec.runtime.variant_report() counts these launches (WAVEC_WARN_VARIANTS=0 silences this)",
            stacklevel=3,
        )


def variant_report() -> dict[str, dict[str, int]]:
    """Launches of variants in this process: ``{kernel label: {reason: launches}}`` (module docstring)."""
    out: dict[str, dict[str, int]] = {}
    for (label, why), n in sorted(_COUNTS.items()):
        out.setdefault(label, {})[why] = n
    return out


def reset_variant_report() -> None:
    _COUNTS.clear()
