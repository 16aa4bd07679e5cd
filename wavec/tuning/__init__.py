"""Autotuning (DESIGN §9): legality filter, parallel compile, interleaved timing, cache, cost model, ceiling."""

from .legality import legal, reject_after_compile, shared_bytes
from .search import Candidate, TuningResult, autotune, lookup

__all__ = ["autotune", "legal", "lookup", "reject_after_compile", "shared_bytes", "Candidate", "TuningResult"]
