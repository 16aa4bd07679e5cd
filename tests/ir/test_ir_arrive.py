"""IR tier for ``wc.arrive``: the traced record (an ``Atomic`` of kind ``"arrive"``, a rank-0 i1 result,
its ``expected`` expression), the one replica that updates the counter, and the emitted MLIR in the order
``codegen/arrive.py`` guarantees: release fence, barrier, the atomic under the replica guard (NVIDIA: the
wrapping ``atom.inc`` inline; AMD: ``atomic_rmw addi`` then the reset), the shared word stored, barrier,
the word loaded, acquire fence, then the ``exit_if`` branch."""

from __future__ import annotations

import re

import pytest

import wavec as wc
from tests import arrive_kernels as ak
from wavec.frontend import dtypes as dt
from wavec.frontend.ops_atomic import Atomic


def test_the_traced_record() -> None:
    trace = ak.make_last_sums().trace()
    (node,) = [n for n in trace.graph.nodes if n.meta.get("op") is Atomic]
    assert node.kwargs["kind"] == "arrive" and node.kwargs["expected"] == ak.S
    assert node.meta["type"].shape == () and node.meta["type"].dtype == dt.i1


def _order(text: str, needles: list[str]) -> list[int]:
    at, out = 0, []
    for needle in needles:
        m = re.compile(needle).search(text, at)
        assert m is not None, f"{needle!r} not found after offset {at}"
        out.append(m.start())
        at = m.end()
    return out


@pytest.mark.parametrize("target", ["sm_80", "gfx942"])
def test_mlir_order(target: str) -> None:
    tpw = 64 if target == "gfx942" else 32
    mlir = wc.compile(ak.make_last_sums(tpw), {ak.T: 8}, target=target, backend="emulator", cache=False).mlir
    if target == "gfx942":
        fence, atom = r'llvm\.fence syncscope\("agent"\) release', r"memref\.atomic_rmw addi"
        after = [r"memref\.atomic_rmw assign", r"memref\.store", r"gpu\.barrier", r"memref\.load"]
        tail = [r'llvm\.fence syncscope\("agent"\) acquire']
    else:
        fence, atom = r'"fence\.acq_rel\.gpu;"', r'"atom\.acq_rel\.gpu\.global\.inc\.u32 \$0, \[\$1\], \$2;"'
        after, tail = [r"memref\.store", r"gpu\.barrier", r"memref\.load"], [r'"fence\.acq_rel\.gpu;"']
    _order(mlir, [fence, r"gpu\.barrier", r"arith\.cmpi eq, %thread_id_x|scf\.if", atom, *after, *tail, r"scf\.if"])
    assert mlir.count("memref<1xi32, #gpu.address_space<workgroup>>") >= 1
    assert len(re.findall(atom, mlir)) == 1  # one atomic, by one thread
