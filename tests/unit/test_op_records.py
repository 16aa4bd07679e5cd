"""Every op record is complete: its roles name rules the passes have, its lowering is registered by the
module it names, the MLIR ops that give its semantics are emulated, and every DSL function has a
docstring.  A new op that misses any of these fails here, not in the middle of a kernel."""

from __future__ import annotations

import importlib
import inspect

import pytest

import wavec as wc
from wavec.codegen.lowering import LOWERINGS
from wavec.emulator import OPS, load_ops
from wavec.errors import WavecError
from wavec.frontend import ops, ops_hopper, ops_math  # noqa: F401 - ops_hopper: its records are subclasses of Op
from wavec.frontend.unary_kinds import UNARY_KINDS
from wavec.kernels.elementwise import BLOCK_M, BLOCK_N, M, N, rowwise_constraints
from wavec.passes.expand import RULES
from wavec.passes.infer_indices import ANCHORS, FLOWS


def _records() -> list[type]:
    out, todo = [], [ops.Op]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            todo.append(sub)
            if sub is not ops.Elementwise and not sub.__name__.startswith("_"):  # shared defaults
                out.append(sub)
    return sorted(out, key=lambda c: c.__name__)


RECORDS = _records()
load_ops()


def test_records_are_discovered() -> None:
    names = {r.__name__ for r in RECORDS}
    assert {"Read", "Write", "MMA", "Unary", "Reduce", "Iterate", "WarpgroupMMA", "TmaFill"} <= names
    assert len({r.name for r in RECORDS}) == len(RECORDS), "two records share a name"


@pytest.mark.parametrize("op", RECORDS, ids=lambda c: c.__name__)
def test_record_roles(op: type) -> None:
    assert op.name != "op", f"{op.__name__} has no name"
    if op.anchor is not None:
        assert op.anchor in ANCHORS, f"{op.__name__}: no infer_indices anchor {op.anchor!r}"
        assert isinstance(op.anchor_priority, int), f"{op.__name__}: anchor without a priority"
    assert op.index_flow is None or op.index_flow in FLOWS, f"{op.__name__}: no index flow {op.index_flow!r}"
    assert op.expansion in RULES, f"{op.__name__}: no expansion rule {op.expansion!r}"


@pytest.mark.parametrize("op", RECORDS, ids=lambda c: c.__name__)
def test_record_lowering_and_semantics(op: type) -> None:
    importlib.import_module(op.lowering)
    assert op in LOWERINGS, f"{op.__name__}: no lowering rule registered"
    assert LOWERINGS[op].__module__ == op.lowering, f"{op.__name__} is lowered in {LOWERINGS[op].__module__}"
    assert op.emulated_ops is not None, f"{op.__name__} does not declare the MLIR ops that give its semantics"
    missing = [m for m in op.emulated_ops if m not in OPS]
    assert not missing, f"{op.__name__}: the emulator lacks {missing}"


@pytest.mark.parametrize("kind", list(UNARY_KINDS))
def test_unary_kinds_are_emulated_and_public(kind: str) -> None:
    k = UNARY_KINDS[kind]
    assert k.float_op in OPS and (k.int_op is None or k.int_op in OPS)
    if kind != "neg":  # -x
        assert getattr(wc, kind).__module__ == ops_math.__name__, f"wc.{kind} is missing"


def test_dsl_functions_have_docstrings() -> None:
    public = [getattr(wc, n) for n in wc.__all__ if n != "compile"]
    funcs = [f for f in public if inspect.isfunction(f) and f.__module__.startswith("wavec.frontend.ops")]
    assert len(funcs) > 40
    assert not [f.__name__ for f in funcs if not (f.__doc__ or "").strip()]


def test_unknown_unary_kind_names_the_accepted_ones() -> None:
    @wc.wave(rowwise_constraints(32, 4))
    def k(a: wc.Memory[M, N, wc.f32], out: wc.Memory[M, N, wc.f32]):
        wc.write(wc.unary("tanhh", wc.read(a)), out)

    with pytest.raises(WavecError, match="unknown kind 'tanhh'.*tanh.*erf"):
        wc.compile(k, {BLOCK_M: 2, BLOCK_N: 128}, backend="emulator", cache=False)


def test_float_only_kind_rejects_integers() -> None:
    @wc.wave(rowwise_constraints(32, 4))
    def k(a: wc.Memory[M, N, wc.i32], out: wc.Memory[M, N, wc.i32]):
        wc.write(wc.erf(wc.read(a)), out)

    with pytest.raises(WavecError, match="needs a float operand"):
        wc.compile(k, {BLOCK_M: 2, BLOCK_N: 128}, backend="emulator", cache=False)
