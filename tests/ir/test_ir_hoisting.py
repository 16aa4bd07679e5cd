"""Loop-invariant index arithmetic is emitted outside the K loop (codegen hoists by symbol scope)."""

import pytest
from iree.compiler import ir

import wavec as wc
from wavec.kernels.gemm import make_gemm
from wavec.tuning.plan import DEFAULT_SUBS


def _invariant_ops_in_loops(mlir: str) -> list[str]:
    """Ops inside an scf.for body none of whose operands is defined inside that loop."""
    found = []
    with ir.Context() as ctx:
        ctx.load_all_available_dialects()
        module = ir.Module.parse(mlir)

        def walk(op):
            for region in op.regions:
                for block in region.blocks:
                    for inner in block.operations:
                        if inner.operation.name == "scf.for":
                            check(inner.operation)
                        walk(inner.operation)

        def check(loop):
            inside = set()
            body = loop.regions[0].blocks[0]
            for arg in body.arguments:
                inside.add(arg)
            for inner in body.operations:
                op = inner.operation
                operands = list(op.operands)
                if (
                    op.name.startswith("arith.")
                    and op.name != "arith.constant"
                    and operands
                    and not any(v in inside for v in operands)
                ):
                    found.append(str(op).split("\n")[0][:120])
                for r in op.results:
                    inside.add(r)

        walk(module.operation)
    return found


@pytest.mark.parametrize("stages", [1, 3])
def test_no_loop_invariant_arith_inside_the_k_loop(stages: int) -> None:
    subs = {**DEFAULT_SUBS, wc.sym.NUM_STAGES: stages}
    mlir = wc.compile(make_gemm(), subs, target="sm_90", backend="cuda", cache=False).mlir
    assert "scf.for" in mlir
    assert _invariant_ops_in_loops(mlir) == []
