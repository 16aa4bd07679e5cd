"""Binary tier, issue #20 item 7: the three kernels that crashed the compiler compile to a binary for sm_80,
sm_90a and gfx942; the dV product's transposed accumulator moves through shared memory where it must."""

import pytest

import wavec as wc
from tests import crash_kernels as ck

pytest.importorskip("iree.compiler")

TARGETS = ["sm_80", "sm_90a", "gfx942"]
KERNELS = {
    "batch_last": (ck.make_batch_last, {ck.BM: 128}),
    "alibi": (ck.make_alibi_attention, ck.ALIBI_SUBS),
    "dv": (ck.make_dv, ck.DV_SUBS),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(KERNELS))
def test_regression_kernel_compiles(target: str, name: str) -> None:
    make, subs = KERNELS[name]
    kernel = wc.compile(make(target), subs, backend="emulator", target=target, cache=False)
    assert kernel.artifact.format in ("cubin", "ptx", "hsaco") and kernel.artifact.binary


@pytest.mark.parametrize("target,via", [("sm_80", "shared"), ("sm_90a", "shared"), ("gfx942", "registers")])
def test_dv_conversion_path(target: str, via: str, capsys) -> None:
    """P^T from the accumulator: on NVIDIA a transpose, through shared memory; the MFMA accumulator is the
    transpose of its A layout, so P^T is exactly A there and stays in registers."""
    kernel = ck.make_dv(target)
    wc.compile(kernel, ck.DV_SUBS, backend="emulator", target=target, cache=False, print_ir_after=["convert_layouts"])
    text = capsys.readouterr().out
    assert text.count("convert_layout(") == 1 and f"via={via})" in text
