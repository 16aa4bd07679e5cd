"""Argument binding, grid evaluation and the launcher's host side (CPU tensors; no GPU needed)."""

from __future__ import annotations

import sys

import pytest
import torch

from wavec.errors import ArgumentError, LaunchError, WavecError
from wavec.runtime.artifact import ArgSpec, Artifact, KernelMetadata
from wavec.runtime.binding import BindingPlan, bind_arguments, compile_grid, grid_for, plan_for


def gemm_meta(**over) -> KernelMetadata:
    fields = dict(
        kernel="gemm",
        entry="gemm_entry",
        block=(128, 1, 1),
        shared_bytes=1024,
        args=(
            ArgSpec("a", "f16", ("M", "K"), False),
            ArgSpec("b", "f16", ("N", "K"), False),
            ArgSpec("c", "f32", ("M", "N"), True),
        ),
        constants=("M", "N"),
        static_symbols=(("K", 64),),
        grid=("(M + 63) // 64", "(N + 31) // 32", "1"),
        divisibility=(("M", 64), ("N", 32)),
        alignment_bytes=16,
        source="kernels/gemm.py:10",
    )
    fields.update(over)
    return KernelMetadata(**fields)


GEMM = gemm_meta()


def vec_meta(kernel: str, *args: tuple[str, bool], grid: str = "1") -> KernelMetadata:
    """A 1-D kernel over f32 vectors of length N; ``args`` are (name, is_output)."""
    return gemm_meta(
        kernel=kernel,
        args=tuple(ArgSpec(n, "f32", ("N",), o) for n, o in args),
        constants=("N",),
        static_symbols=(),
        grid=(grid, "1", "1"),
        divisibility=(),
    )


def gemm_args(m: int = 128, n: int = 64, k: int = 64) -> list[torch.Tensor]:
    return [
        torch.zeros(m, k, dtype=torch.float16),
        torch.zeros(n, k, dtype=torch.float16),
        torch.zeros(m, n, dtype=torch.float32),
    ]


def bind(tensors, meta: KernelMetadata = GEMM) -> dict[str, int]:
    return bind_arguments(meta, tensors, device_type="cpu")


def test_good_inputs_give_symbols() -> None:
    assert bind(gemm_args()) == {"M": 128, "N": 64, "K": 64}
    assert bind(gemm_args(m=64, n=32)) == {"M": 64, "N": 32, "K": 64}


def test_plan_is_cached_per_metadata() -> None:
    assert plan_for(GEMM, "cpu") is plan_for(GEMM, "cpu")
    assert plan_for(GEMM, "cpu") is not plan_for(gemm_meta(), "cpu")


def test_bind_returns_pointers_and_device() -> None:
    args = gemm_args()
    values, ptrs, device = BindingPlan(GEMM, "cpu").bind(args)
    assert ptrs == [t.data_ptr() for t in args] and device == -1


def _case(name: str):
    """Build the bad argument list of case ``name``: (tensors, meta, argument named, words in message)."""
    a, b, c = gemm_args()
    buf = torch.zeros(64 * 65, dtype=torch.float16)
    x = torch.zeros(128, dtype=torch.float32)
    vec = vec_meta("copy", ("x", False), ("y", True), grid="N // 32")
    wide = gemm_meta(
        kernel="wide",
        args=(ArgSpec("x", "f32", ("M", "N"), False), ArgSpec("y", "f32", ("M", "N"), True)),
        constants=("M", "N"),
        static_symbols=(),
        grid=("1", "1", "1"),
        divisibility=(),
    )
    cases = {
        "too_few": ([a, b], GEMM, "c", ["expected 3 tensor arguments", "got 2"]),
        "too_many": ([a, b, c, c], GEMM, "#3", ["extra", "got 4"]),
        "not_tensor": ([a, b.numpy(), c], GEMM, "b", ["torch.Tensor", "ndarray"]),
        "dtype": ([a, b.float(), c], GEMM, "b", ["f16", "torch.float32"]),
        "rank": ([a, b, c.reshape(-1)], GEMM, "c", ["rank 2", "rank 1", "(M, N)"]),
        "device": ([a, b.to("meta"), c], GEMM, "b", ["CPU tensor", "meta"]),
        "non_contiguous": (
            [a, b, torch.zeros(64, 128).t()],
            GEMM,
            "c",
            ["non-contiguous", "strides (1, 128)", ".contiguous()"],
        ),
        "alignment": ([a, buf[1 : 1 + 64 * 64].view(64, 64), c], GEMM, "b", ["aligned to 16 bytes", "offset 1"]),
        "static_symbol": (
            [torch.zeros(128, 32, dtype=torch.float16), b, c],
            GEMM,
            "a",
            ["K=64", "compile time", "got 32"],
        ),
        "consistency": ([a, b, torch.zeros(128, 96)], GEMM, "c", ["symbol N", "'b'", "64", "96"]),
        "consistency_m": ([a, b, torch.zeros(64, 64)], GEMM, "c", ["symbol M", "'a'", "128", "got 64"]),
        "divisibility": (
            [torch.zeros(100, 64, dtype=torch.float16), b, torch.zeros(100, 64)],
            GEMM,
            "a",
            ["M=100 (dimension 0) must be a multiple of 64"],
        ),
        "int32": ([torch.zeros(0, 2**31), torch.zeros(0, 2**31)], wide, "x", ["N=2147483648", "int32"]),
        "alias_same": ([x, x], vec, "y", ["overlaps input 'x'"]),
        "static_int": (
            [torch.zeros(4, dtype=torch.float16)],
            gemm_meta(
                kernel="fixed",
                args=(ArgSpec("v", "f16", (8,), False),),
                constants=(),
                static_symbols=(),
                grid=("1", "1", "1"),
                divisibility=(),
            ),
            "v",
            ["dimension 0 should be 8", "got 4"],
        ),
    }
    return cases[name]


BAD = [
    "too_few",
    "too_many",
    "not_tensor",
    "dtype",
    "rank",
    "device",
    "non_contiguous",
    "alignment",
    "static_symbol",
    "consistency",
    "consistency_m",
    "divisibility",
    "int32",
    "alias_same",
    "static_int",
]


@pytest.mark.parametrize("name", BAD)
def test_bad_inputs_name_the_argument(name: str) -> None:
    tensors, meta, arg, words = _case(name)
    with pytest.raises(ArgumentError) as info:
        bind(tensors, meta)
    msg = str(info.value)
    assert f"kernel {meta.kernel} (defined at {meta.source}): argument {arg!r}" in msg
    for w in words:
        assert w in msg, (w, msg)
    assert isinstance(info.value, WavecError)


def test_overlapping_views_of_one_storage() -> None:
    vec = vec_meta("copy", ("x", False), ("y", True), grid="N // 32")
    buf = torch.zeros(256)
    assert bind([buf[:128], buf[128:]], vec) == {"N": 128}  # disjoint halves: fine
    with pytest.raises(ArgumentError, match="overlaps input 'x'"):
        bind([buf[:128], buf[124:252]], vec)
    # Two outputs overlapping each other are reported too.
    two_out = vec_meta("two", ("y1", True), ("y2", True))
    with pytest.raises(ArgumentError, match="overlaps output 'y2'"):
        bind([buf[:128], buf[64:192]], two_out)
    assert bind([torch.zeros(0), torch.zeros(0)], two_out) == {"N": 0}  # empty tensors never overlap


def test_cuda_device_type_rejects_cpu_tensors() -> None:
    with pytest.raises(ArgumentError, match="argument 'a': expected a CUDA tensor, got one on cpu"):
        bind_arguments(GEMM, gemm_args(), device_type="cuda")


def test_size_one_dims_with_odd_strides_are_accepted() -> None:
    a = torch.zeros(64, 64, dtype=torch.float16)
    c = torch.zeros(64, 32).as_strided((64, 32), (32, 1))
    b = torch.zeros(32, 64, dtype=torch.float16)
    assert bind([a, b, c]) == {"M": 64, "N": 32, "K": 64}


def test_invalid_metadata_is_reported_at_plan_build() -> None:
    with pytest.raises(LaunchError, match="not bound by any argument"):
        BindingPlan(gemm_meta(constants=("M", "N", "Q")), "cpu")
    with pytest.raises(LaunchError, match="dtype 'f64'"):
        BindingPlan(
            gemm_meta(args=(ArgSpec("a", "f64", ("M",), False),), constants=("M",), grid=("1",) * 3, divisibility=()),
            "cpu",
        )


# ------------------------------------------------------------------------------------------- grid


def test_grid_for() -> None:
    assert grid_for(GEMM, {"M": 128, "N": 64, "K": 64}) == (2, 2, 1)
    assert grid_for(GEMM, {"M": 0, "N": 64, "K": 64}) == (0, 2, 1)
    fn = compile_grid(("max(M, 1) % 7", "-(-N // 4)", "min(M, N, 3) * 2 - 1"), ["M", "N"])
    assert fn(M=10, N=9, unused=1) == (3, 3, 5)


def test_grid_missing_symbol_and_limits() -> None:
    with pytest.raises(LaunchError, match="grid"):
        grid_for(GEMM, {"M": 128})
    with pytest.raises(LaunchError, match="exceeds"):
        grid_for(gemm_meta(grid=("1", "N * 100000", "1")), {"M": 64, "N": 64, "K": 64})
    with pytest.raises(LaunchError, match="negative"):
        grid_for(gemm_meta(grid=("1 - M", "1", "1")), {"M": 64, "N": 64, "K": 64})


@pytest.mark.parametrize(
    "expr",
    [
        "M.__class__",
        "__import__('os')",
        "M / 2",
        "open('x')",
        "[M][0]",
        "(lambda: 1)()",
        "Q + 1",
        "1.5",
        "'a'",
        "M if N else 1",
        "M ** 2",
        "max(M, key=abs)",
        "M +",
    ],
)
def test_grid_rejects_unsafe_expressions(expr: str) -> None:
    with pytest.raises(LaunchError, match="grid expression"):
        compile_grid((expr, "1", "1"), ["M", "N"], "k")


def test_grid_has_no_builtins() -> None:
    fn = compile_grid(("M", "1", "1"), ["M"])
    assert fn.__globals__["__builtins__"] == {}


# ------------------------------------------------------------------------------------------- launcher


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error a machine without a GPU gets")
def test_launcher_without_gpu_raises_wavec_error() -> None:
    from wavec.runtime.launcher import CudaKernel

    art = Artifact(target="sm_90", format="cubin", binary=b"\0", metadata=GEMM, mlir="")
    with pytest.raises(LaunchError, match="cuda.bindings|no CUDA device"):
        CudaKernel(art)


def test_launcher_rejects_hsaco() -> None:
    from wavec.runtime.launcher import CudaKernel

    art = Artifact(target="gfx942", format="hsaco", binary=b"\0", metadata=GEMM, mlir="")
    with pytest.raises(LaunchError, match="hsaco"):
        CudaKernel(art)


def test_launcher_packs_arguments_per_abi(monkeypatch: pytest.MonkeyPatch) -> None:
    from wavec.runtime import launcher
    from wavec.runtime.null_driver import NullKernel, driver

    record: list = []
    monkeypatch.setattr(launcher, "_load_driver", lambda kernel: driver(record))

    class CpuKernel(NullKernel):
        null_stream = 1234

    meta = gemm_meta(shared_bytes=100 * 1024)
    art = Artifact(target="sm_90", format="ptx", binary=b".version 8.0", metadata=meta, mlir="")
    k = CpuKernel(art)
    assert record[0] == ("load", b".version 8.0\0")
    assert record[1] == ("func", b"gemm_entry")
    assert record[2] == ("attr", 8, 100 * 1024)
    args = gemm_args(m=192, n=96)
    k(*args)
    assert record[3] == ("launch", (3, 3, 1), (128, 1, 1), 100 * 1024, 1234, [t.data_ptr() for t in args], [192, 96])
    k(*gemm_args(m=0, n=96))  # zero-size grid: no launch
    assert len(record) == 4
    with pytest.raises(ArgumentError, match="argument 'c'"):
        k(*gemm_args()[:2], torch.zeros(128, 64, dtype=torch.float16))
    assert "cuda" not in sys.modules or not hasattr(sys.modules.get("cuda"), "__fake__")


# ------------------------------------------------------------------------------------------- GPU smoke

_ADD_PTX = """
.version 7.0
.target sm_80
.address_size 64

.visible .entry wavec_test_add(
    .param .u64 p_x,
    .param .u64 p_y,
    .param .u64 p_out,
    .param .b32 p_n
)
.maxntid 128, 1, 1
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<10>;

    ld.param.u64 %rd1, [p_x];
    ld.param.u64 %rd2, [p_y];
    ld.param.u64 %rd3, [p_out];
    ld.param.u32 %r1, [p_n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.s32 %p1, %r5, %r1;
    @%p1 bra $L_done;
    cvta.to.global.u64 %rd4, %rd1;
    cvta.to.global.u64 %rd5, %rd2;
    cvta.to.global.u64 %rd6, %rd3;
    mul.wide.s32 %rd7, %r5, 4;
    add.s64 %rd8, %rd4, %rd7;
    ld.global.f32 %f1, [%rd8];
    add.s64 %rd8, %rd5, %rd7;
    ld.global.f32 %f2, [%rd8];
    add.f32 %f3, %f1, %f2;
    add.s64 %rd9, %rd6, %rd7;
    st.global.f32 [%rd9], %f3;
$L_done:
    ret;
}
"""


def _gpu_ready() -> bool:
    try:
        import cuda.bindings.driver  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu_ready(), reason="needs a CUDA GPU and cuda-bindings")
@pytest.mark.parametrize("shared_bytes", [0, 64 * 1024])
def test_gpu_launch_hand_written_ptx(shared_bytes: int) -> None:
    import threading
    import time

    from wavec.runtime.launcher import CudaKernel

    meta = KernelMetadata(
        kernel="add",
        entry="wavec_test_add",
        block=(128, 1, 1),
        shared_bytes=shared_bytes,
        args=(
            ArgSpec("x", "f32", ("N",), False),
            ArgSpec("y", "f32", ("N",), False),
            ArgSpec("out", "f32", ("N",), True),
        ),
        constants=("N",),
        static_symbols=(),
        grid=("(N + 127) // 128", "1", "1"),
        divisibility=(),
        alignment_bytes=16,
        source="test_binding.py",
    )
    k = CudaKernel(Artifact(target="sm_80", format="ptx", binary=_ADD_PTX.encode(), metadata=meta, mlir=""))
    x = torch.randn(1000, device="cuda")
    y = torch.randn(1000, device="cuda")
    out = torch.zeros(1000, device="cuda")
    k(x, y, out)
    torch.testing.assert_close(out, x + y)

    # On a side stream (the launch must follow torch's current stream).
    s = torch.cuda.Stream()
    out2 = torch.zeros(1000, device="cuda")
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        k(x, y, out2)
    torch.cuda.current_stream().wait_stream(s)
    torch.testing.assert_close(out2, x + y)

    # Captured in a CUDA graph and replayed.
    out3 = torch.zeros(1000, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        k(x, y, out3)
    g.replay()
    torch.testing.assert_close(out3, x + y)

    # From a fresh thread (no context made current there by torch yet).
    errors: list = []
    out4 = torch.zeros(1000, device="cuda")
    th = threading.Thread(target=lambda: _call_into(errors, k, x, y, out4))
    th.start()
    th.join()
    assert errors == []
    torch.cuda.synchronize()
    torch.testing.assert_close(out4, x + y)

    with pytest.raises(ArgumentError, match="argument 'x': expected a CUDA tensor"):
        k(x.cpu(), y, out)
    k(x[:0], y[:0], out[:0])  # zero-size grid: nothing launched

    n = 2000
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        k(x, y, out)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    print(f"\nwavec launch overhead (3 tensors, host side): {(t1 - t0) / n * 1e6:.2f} us per call")


def _call_into(errors: list, k, *tensors) -> None:
    try:
        k(*tensors)
    except Exception as exc:  # noqa: BLE001 - reported to the main thread
        errors.append(exc)
