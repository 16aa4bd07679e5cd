"""Unit tier: the IR schema (``passes/schema.py``), the verifier that enforces it, targets as capabilities,
and the pipeline layout (core list plus the Hopper wing at named points)."""

from typing import Literal

import pytest
import sympy

import wavec as wc
from wavec.errors import OptionError
from wavec.frontend.constraints import ConstraintSet
from wavec.frontend.ops import Read
from wavec.kernels.elementwise import DEFAULT_SUBS, make_copy
from wavec.passes import schema
from wavec.passes.context import PassContext
from wavec.passes.pipeline import CORE, HOPPER, PASS_NAMES, run_pipeline
from wavec.passes.verify import TraceVerificationError, verify_trace
from wavec.target import get_target


def _traced(stop_after: str):
    kernel = make_copy(wc.f16)
    trace = kernel.trace()
    ctx = PassContext.build(trace, ConstraintSet(kernel.constraints, DEFAULT_SUBS), "sm_90")
    run_pipeline(trace, ctx, stop_after=stop_after)
    read = next(n for n in trace.graph.nodes if n.meta.get("op") is Read)
    return trace, read, set(PASS_NAMES[: PASS_NAMES.index(stop_after) + 1])


def test_every_key_has_a_type_and_a_known_producer():
    for keys in (schema.META, schema.KWARGS):
        for key in keys.values():
            assert key.producers and set(key.producers) <= set(PASS_NAMES) | {schema.TRACE}, key


def test_verifier_accepts_the_pipeline_output():
    trace, _read, ran = _traced("insert_barriers")
    verify_trace(trace, "insert_barriers", ran)


def test_verifier_rejects_a_wrongly_typed_key():
    trace, read, ran = _traced("mask_bounds")
    read.meta["mask_dims"] = ["M"]  # a list of str, not a tuple of symbols
    with pytest.raises(TraceVerificationError, match=r"meta\['mask_dims'\].*is not a"):
        verify_trace(trace, "mask_bounds", ran)


def test_verifier_rejects_an_undeclared_key():
    trace, read, ran = _traced("expand")
    read.meta["vectorized"] = True
    with pytest.raises(TraceVerificationError, match=r"meta\['vectorized'\] is not declared"):
        verify_trace(trace, "expand", ran)
    del read.meta["vectorized"]
    read.kwargs = {**read.kwargs, "width": 8}
    with pytest.raises(TraceVerificationError, match=r"kwargs\['width'\] is not declared"):
        verify_trace(trace, "expand", ran)


def test_verifier_rejects_a_key_produced_too_early():
    trace, read, ran = _traced("expand")
    read.meta["mask_dims"] = (sympy.Symbol("M"),)  # mask_bounds has not run yet
    with pytest.raises(TraceVerificationError, match=r"mask_dims.*before its producer mask_bounds ran"):
        verify_trace(trace, "expand", ran)


def test_conforms():
    c, m, s = schema.conforms, sympy.Symbol("M"), sympy.Symbol("N")
    assert c((m, s), tuple[sympy.Symbol, sympy.Symbol]) and not c((m,), tuple[sympy.Symbol, sympy.Symbol])
    assert c({m: 2 * s}, dict[sympy.Symbol, schema.Expr]) and not c({m: "x"}, dict[sympy.Symbol, schema.Expr])
    assert c(None, int | None) and c("ldmatrix", Literal["ldmatrix"]) and not c("x", Literal["ldmatrix"])


def test_stop_after_runs_a_prefix():
    _trace, read, _ = _traced("infer_indices")
    assert "layout" in read.meta and "key" not in read.meta
    with pytest.raises(OptionError):
        _traced("nope")


def test_pipeline_is_the_core_list_with_the_hopper_wing():
    assert [n for n in PASS_NAMES if n in {s[0] for s in CORE}] == [s[0] for s in CORE]
    for after, name, _fn, _why in HOPPER:
        assert PASS_NAMES.index(name) == PASS_NAMES.index(after) + 1
    assert all(why for _n, _f, why in CORE)


def test_targets_are_capabilities():
    sm80, sm90, sm90a, mi300 = (get_target(n) for n in ("sm_80", "sm_90", "sm_90a", "gfx942"))
    assert sm80.has_cp_async and sm80.has_mma_sync and not sm80.has_wgmma and sm80.sms == 108
    assert sm90.sms == sm90a.sms == 132 and not sm90.has_wgmma and not sm90.has_tma
    assert sm90a.has_wgmma and sm90a.has_tma
    assert not (mi300.has_cp_async or mi300.has_mma_sync or mi300.has_nvvm_math) and mi300.threads_per_wave == 64
    assert mi300.sms == 304
