"""Prepared launches (``CompiledKernel.prepare`` / ``FastLaunch``) and the library's one-lookup decisions,
on the CPU: the null driver (``wavec.runtime.null_driver``) records what would be launched."""

from __future__ import annotations

import ctypes
import gc
import os
import struct
import threading

import pytest
import torch

import wavec as wc
from tests.unit.test_binding import gemm_args, gemm_meta
from wavec.errors import AlignmentMiss, ArgumentError
from wavec.runtime import launcher
from wavec.runtime.artifact import ArgSpec, Artifact
from wavec.runtime.null_driver import NullKernel, driver, launches


class CpuKernel(NullKernel):
    null_stream = 7


def _kernel(monkeypatch, meta, record: list) -> CpuKernel:
    monkeypatch.setattr(launcher, "_load_driver", lambda kernel: driver(record))
    return CpuKernel(Artifact(target="sm_90", format="ptx", binary=b".version 8.0", metadata=meta, mlir=""))


def _scaled_meta():
    """A GEMM-shaped kernel with an f32 and an i32 scalar after the tensors."""
    return gemm_meta(constants=("M", "N", "alpha", "count"), scalars=(("alpha", "f32"), ("count", "i32")))


def _bits(x: float) -> int:
    return struct.unpack("<i", struct.pack("<f", x))[0]


def test_prepared_launch_packs_pointers_constants_and_scalars(monkeypatch) -> None:
    record: list = []
    k = _kernel(monkeypatch, _scaled_meta(), record)
    launch = k.prepare((*gemm_args(m=192, n=96), 0.5, 3), fresh_outputs=True)
    assert launches(record) == []  # preparing validates, it does not launch
    for alpha, count in [(0.5, 3), (-2.25, 1 << 20)]:
        args = gemm_args(m=192, n=96)  # new tensors of the prepared shapes
        launch(*args, alpha, count)
        grid, ptrs, consts = launches(record)[-1]
        assert grid == (3, 3, 1) and ptrs == [t.data_ptr() for t in args]
        assert consts == [192, 96, _bits(alpha), count]
    launch.pointers(4096, 8192, 65536, 1.0, 2)
    assert launches(record)[-1][1] == [4096, 8192, 65536] and launches(record)[-1][2][2:] == [_bits(1.0), 2]


def test_prepare_validates_like_a_call(monkeypatch) -> None:
    k = _kernel(monkeypatch, gemm_meta(), [])
    a, b, c = gemm_args()
    with pytest.raises(ArgumentError, match="argument 'c'"):
        k.prepare((a, b, torch.zeros(128, 64, dtype=torch.float16)))
    with pytest.raises(AlignmentMiss):
        k.prepare(tuple(gemm_args(m=100)))


def test_prepared_launch_errors_name_the_argument(monkeypatch) -> None:
    record: list = []
    k = _kernel(monkeypatch, _scaled_meta(), record)
    args = gemm_args()
    launch = k.prepare((*args, 1.0, 1))
    with pytest.raises(ArgumentError, match=r"argument 'b'.*not aligned to 16 bytes"):
        launch.pointers(4096, 4098, 8192, 1.0, 1)
    with pytest.raises(ArgumentError, match=r"argument 'alpha'.*expected a Python number, got str"):
        launch(*args, "1.0", 1)
    with pytest.raises(ArgumentError, match=r"argument 'count'.*int32 range, got int 2147483648"):
        launch(*args, 1.0, 2**31)
    with pytest.raises(ArgumentError, match=r"argument 'count'.*got float"):
        launch(*args, 1.0, 1.5)
    assert launches(record) == []


def test_outputs_overlapping_an_input_are_refused_unless_fresh(monkeypatch) -> None:
    record: list = []
    meta = gemm_meta(args=(ArgSpec("a", "f32", ("M", "N"), False), ArgSpec("c", "f32", ("M", "N"), True)))
    meta = gemm_meta(args=meta.args, static_symbols=(), constants=("M", "N"), divisibility=(), grid=("1", "1", "1"))
    k = _kernel(monkeypatch, meta, record)
    a, c = torch.zeros(64, 32), torch.zeros(64, 32)
    checked = k.prepare((a, c))
    with pytest.raises(ArgumentError, match=r"argument 'c'.*overlaps input 'a'"):
        checked(a, a)
    fresh = k.prepare((a, c), fresh_outputs=True)
    fresh(a, c)
    assert launches(record)[-1][1] == [a.data_ptr(), c.data_ptr()]


def test_other_threads_pack_their_own_buffer(monkeypatch) -> None:
    record: list = []
    k = _kernel(monkeypatch, _scaled_meta(), record)
    launch = k.prepare((*gemm_args(), 0.5, 3))
    args = gemm_args()
    thread = threading.Thread(target=lambda: launch(*args, 4.0, 9))
    thread.start()
    thread.join()
    _grid, ptrs, consts = launches(record)[-1]
    assert ptrs == [t.data_ptr() for t in args] and consts == [128, 64, _bits(4.0), 9]
    launch(*args, 0.5, 3)  # the owner's buffer kept its own scalars' slots
    assert launches(record)[-1][2] == [128, 64, _bits(0.5), 3]


def test_zero_grid_launches_nothing(monkeypatch) -> None:
    record: list = []
    k = _kernel(monkeypatch, gemm_meta(), record)
    launch = k.prepare(tuple(gemm_args(m=0)))
    launch(*gemm_args(m=0))
    assert launches(record) == []


def test_rows_decide_once_per_tensor_key(monkeypatch) -> None:
    """softmax / rms_norm: a repeated call reuses its decision; a non-dense input, another dtype or a
    given weight decide again, and every result matches torch."""
    from wavec.kernels import rows

    built: list = []
    runner = rows._runner
    monkeypatch.setattr(rows, "_DECIDED", rows.Decisions("rows"))
    monkeypatch.setattr(rows, "_runner", lambda op, x, *a: built.append(op) or runner(op, x, *a))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 80, generator=g).half()
    for expect, arg in [(1, x), (1, x.clone()), (2, x.t().contiguous().t()), (3, x.float())]:
        got = rows.softmax(arg, backend="emulator")
        torch.testing.assert_close(got.float(), torch.softmax(arg.float(), -1), atol=2e-3, rtol=2e-3)
        assert len(built) == expect
    w = torch.randn(80, generator=g).half()
    for weight in (None, w, None, w):
        got = rows.rms_norm(x, weight, backend="emulator")
        want = torch.nn.functional.rms_norm(x.float(), (80,), None if weight is None else weight.float(), 1e-6)
        torch.testing.assert_close(got.float(), want, atol=4e-3, rtol=4e-3)
    assert built[3:] == ["rms_norm", "rms_norm"]
    with pytest.raises(wc.WavecError, match="x must be a torch.Tensor"):
        rows.softmax([1.0, 2.0])


def test_settle_garbage_freezes_once_and_obeys_the_knob(monkeypatch) -> None:
    from wavec import compiler

    gc.unfreeze()
    monkeypatch.setattr(compiler, "_SETTLED", False)
    monkeypatch.setenv("WAVEC_GC_FREEZE", "0")
    compiler._settle_garbage(True)
    assert gc.get_freeze_count() == 0
    monkeypatch.setenv("WAVEC_GC_FREEZE", "1")
    compiler._settle_garbage(False)  # the first cache hit of the process
    assert gc.get_freeze_count() > 0 and compiler._SETTLED
    gc.unfreeze()
    compiler._settle_garbage(False)  # later hits leave the collector alone
    assert gc.get_freeze_count() == 0
    compiler._settle_garbage(True)  # a build settles again
    assert gc.get_freeze_count() > 0
    gc.unfreeze()


def test_launch_api_knob(monkeypatch) -> None:
    """WAVEC_LAUNCH_API: c (the default: the C launcher), ctypes (libcuda's cuLaunchKernel where libcuda loads)
    or cuda-python."""
    from wavec.knobs import KNOBS

    assert KNOBS["launch_api"].default == "c"
    from wavec.errors import KnobError

    monkeypatch.setenv("WAVEC_LAUNCH_API", "cuda-python")
    assert launcher._libcuda_launch() is None
    monkeypatch.setenv("WAVEC_LAUNCH_API", "ctypes")
    c_launch = launcher._libcuda_launch()
    assert c_launch is None or (c_launch.argtypes is None and c_launch.restype is ctypes.c_int)
    monkeypatch.setenv("WAVEC_LAUNCH_API", "c")
    if launcher._libcuda_launch() is not None:  # (libcuda loads here: the C launcher was built for it)
        assert launcher._libcuda_launch().__name__ == "launch"
    monkeypatch.setenv("WAVEC_LAUNCH_API", "cuda")
    with pytest.raises(KnobError, match="WAVEC_LAUNCH_API"):
        launcher._libcuda_launch()


_CU_LAUNCH = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p
)  # cuLaunchKernel's C signature


@pytest.mark.parametrize("api", ["ctypes", "c"])
@pytest.mark.parametrize("prepared", [True, False])
def test_ctypes_launch_passes_64_bit_pointers(monkeypatch, prepared: bool, api: str) -> None:
    """The ctypes launch has no argtypes (``launcher._libcuda_launch``): a C function of cuLaunchKernel's
    signature, called the way both launch paths call libcuda's, receives the function, the stream and the
    parameter buffer as whole 64-bit addresses and the sizes as given, and the buffer holds the pointers.
    ``c``: the same through the C launcher (``runtime.c_launcher``, the pointers passed as ints)."""
    seen: list = []

    def fake(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra) -> int:
        first = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))[0]
        seen.append((fn, gx, gy, gz, bx, by, bz, shared, stream, ctypes.c_uint64.from_address(first).value, extra))
        return 0

    callback = _CU_LAUNCH(fake)
    raw = ctypes.CDLL(None)._FuncPtr(ctypes.cast(callback, ctypes.c_void_p).value)
    raw.restype = ctypes.c_int
    k = _kernel(monkeypatch, gemm_meta(), [])
    fn_address, stream = 0x7F12_3456_7000, 0x5555_AAAA_0010
    k._c_launch, k._fn_ptrs[k._current_device()] = raw, ctypes.c_void_p(fn_address)
    if api == "c":
        c_mod = _c_launcher()
        c_mod.set_target(ctypes.cast(callback, ctypes.c_void_p).value)
        k._c_launch, k._c_ints = c_mod.launch, True
    monkeypatch.setattr(k, "_raw_stream", lambda device: stream)
    args = gemm_args()
    if prepared:
        k.prepare(tuple(args), fresh_outputs=True)(*args)
    else:
        k(*args)
    assert seen == [(fn_address, 2, 2, 1, *k._block, k._shared, stream, args[0].data_ptr(), None)]


def _c_launcher():
    """The C launcher's module (``runtime.c_launcher``: built with the system C compiler)."""
    import shutil

    from wavec.runtime import c_launcher

    if shutil.which(os.environ.get("CC") or "cc") is None:
        pytest.skip("no C compiler on this machine (the C launcher is built with one)")
    return c_launcher.module()


def test_c_launcher_calls_its_target_with_every_value() -> None:
    """The C launcher passes cuLaunchKernel's eleven values through (ints, None, ``c_void_p``s), returns
    the target's result, and refuses a wrong count or a size past 32 bits."""
    mod = _c_launcher()
    seen: list = []

    def fake(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra) -> int:
        seen.append((fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra))
        return 7

    callback = _CU_LAUNCH(fake)
    mod.set_target(ctypes.cast(callback, ctypes.c_void_p).value)
    big = 0x7F12_3456_7000
    assert mod.launch(big, 5, 6, 7, 128, 2, 1, 4096, ctypes.c_void_p(big + 16), big + 32, None) == 7
    assert mod.launch(ctypes.c_void_p(big), 1, 1, 1, 32, 1, 1, 0, None, ctypes.c_void_p(None), 0) == 7
    assert seen[0] == (big, 5, 6, 7, 128, 2, 1, 4096, big + 16, big + 32, None)
    assert seen[1] == (big, 1, 1, 1, 32, 1, 1, 0, None, None, None)
    with pytest.raises(TypeError, match="11 arguments"):
        mod.launch(big, 1, 1, 1)
    with pytest.raises(OverflowError):
        mod.launch(big, 1 << 32, 1, 1, 32, 1, 1, 0, None, None, None)
    mod.set_target(mod.noop_address())
    assert mod.launch(big, 1, 1, 1, 32, 1, 1, 0, None, None, None) == 0


def test_c_launcher_build_failure_names_the_fix(monkeypatch, tmp_path) -> None:
    from wavec.errors import LaunchError
    from wavec.runtime import c_launcher

    monkeypatch.setenv("WAVEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setattr(c_launcher, "_LOADED", {})
    with pytest.raises(LaunchError, match="WAVEC_LAUNCH_API=ctypes"):
        c_launcher.module()
    assert not list((tmp_path / "launch").glob("*.so"))  # nothing half-built left to load


def test_fake_driver_kernels_never_take_the_ctypes_launch(monkeypatch) -> None:
    monkeypatch.setenv("WAVEC_LAUNCH_API", "ctypes")
    k = _kernel(monkeypatch, gemm_meta(), [])
    assert k._c_launch is None  # CPU tensors: the unit tests' fake driver, never libcuda


def test_misaligned_tensors_take_the_full_path(monkeypatch) -> None:
    """A tensor off the kernel's alignment (a slice one element in) goes to the fallback (the compiled
    kernel's full path, which picks the variant for such addresses), reshaped to the prepared shapes."""
    record: list = []
    k = _kernel(monkeypatch, gemm_meta(), record)
    full: list = []
    launch = k.prepare(tuple(gemm_args()), fallback=lambda *a: full.append(a))
    a, b, c = gemm_args()
    shifted = torch.zeros(128 * 64 + 1, dtype=torch.float16)[1:].view(128, 64)
    launch(shifted, b, c.view(-1))
    assert launches(record) == [] and len(full) == 1
    assert full[0][0] is shifted and full[0][2].shape == (128, 64)


def test_runner_tables_key_on_the_code_knobs(monkeypatch) -> None:
    """A runner decided with ``WAVEC_CHECK_BOUNDS`` set is not served once it is cleared, nor the reverse
    (``knobs.code_key`` joins every ``Decisions`` key), and the key follows setenv / delenv at once."""
    from wavec.kernels.fastpath import Decisions
    from wavec.knobs import code_key

    monkeypatch.delenv("WAVEC_CHECK_BOUNDS", raising=False)
    table, plain, checked = Decisions("t"), object(), object()
    unset = code_key()
    table.remember("k", plain)
    monkeypatch.setenv("WAVEC_CHECK_BOUNDS", "1")
    assert code_key() != unset and table.get("k") is None
    table.remember("k", checked)
    assert table.get("k") is checked
    monkeypatch.delenv("WAVEC_CHECK_BOUNDS")
    assert code_key() == unset and table.get("k") is plain and len(table) == 2
