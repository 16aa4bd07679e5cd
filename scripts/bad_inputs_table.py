#!/usr/bin/env python3
"""Try every bad input we know of against wavec and write the table of what each one raises.

Launch errors: the compiled GEMM (``wavec.kernels.gemm``) and ``scale_shift`` (``wavec.kernels.elementwise``)
kernels on the emulator backend, called with CPU tensors that are wrong in one way each.  Definition and
compile errors: small kernels that are wrong in one way each, and bad ``wc.compile`` options.

    .venv/bin/python scripts/bad_inputs_table.py            # rewrite docs/bad_inputs.md
    .venv/bin/python scripts/bad_inputs_table.py --check    # exit 1 if docs/bad_inputs.md is stale
    .venv/bin/python scripts/bad_inputs_table.py --print    # print the table

Every case is expected to raise a :class:`wavec.errors.WavecError` subclass; launch errors must name the
argument (``ArgumentError.fields["arg"]``).  Cases marked ``bug`` are known not to (yet); the table says so.
``tests/unit/test_bad_inputs_table.py`` checks all of this and that the doc is up to date.  Nothing is
written to the compile cache (``cache=False``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

import wavec as wc
from wavec import Memory, Register, f16, f32
from wavec.errors import WavecError
from wavec.kernels import attention as attn
from wavec.kernels import elementwise as ew
from wavec.kernels import gemm as gm
from wavec.tuning.plan import DEFAULT_SUBS

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "bad_inputs.md"
M, N, K = wc.sym.M, wc.sym.N, wc.sym.K


@dataclass
class Case:
    group: str
    input: str  # what is wrong, in words
    run: Callable[[], object]  # raises (or not)
    arg: str | None = None  # the argument the message must name (launch errors)
    bug: str | None = None  # why this case does not raise a WavecError naming ``arg`` today


@dataclass
class Row:
    case: Case
    error: BaseException | None  # None: nothing was raised

    @property
    def error_class(self) -> str:
        if self.error is None:
            return "(none)"
        cls = type(self.error)
        return cls.__name__ if cls.__module__.startswith("wavec") else f"{cls.__module__}.{cls.__name__}"

    @property
    def message(self) -> str:
        """The first line of the error text (without the kernel source location, shown separately)."""
        e = self.error
        if e is None:
            return ""
        if isinstance(e, WavecError):
            try:
                text = type(e).template.format(**e.fields)
            except (KeyError, IndexError):
                text = str(e)
        else:
            text = str(e)
        return normalize(text.strip().splitlines()[0] if text.strip() else "")

    @property
    def where(self) -> str:
        loc = getattr(self.error, "loc", None)
        if loc is None:
            return ""
        path = Path(loc.filename)
        with contextlib.suppress(ValueError):
            path = path.resolve().relative_to(ROOT)
        return f"{path.as_posix()}:{loc.line}"

    @property
    def ok(self) -> bool:
        """Raised a WavecError that names the expected argument (when the case has one)."""
        e = self.error
        if not isinstance(e, WavecError):
            return False
        if self.case.arg is None:
            return True
        return e.fields.get("arg") == self.case.arg and f"'{self.case.arg}'" in str(e)


REPO = str(pathlib.Path(__file__).resolve().parents[1]) + "/"


def normalize(text: str) -> str:
    """Drop what varies between runs and checkouts: addresses and the repository's location."""
    return re.sub(r"0x[0-9a-f]+", "0x…", text.replace(REPO, ""))


# ------------------------------------------------------------------------------------- the kernels


def _compile(kernel, subs, **kw):
    return wc.compile(kernel, subs, backend=kw.pop("backend", "emulator"), cache=False, **kw)


@contextlib.contextmanager
def _env(name: str, value: str):
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


def _half(*shape) -> torch.Tensor:
    return torch.randn(*shape).half()


def _huge_k_call(kernel) -> None:
    """K = 2**31 + 8 (> int32): a [1, K] and b [2, K] f16 views of a sparse memory-mapped file (no RAM)."""
    kk = 2**31 + 8
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sparse.bin"
        with open(path, "wb") as f:
            f.truncate(3 * kk * 2)
        buf = torch.from_file(str(path), shared=True, size=3 * kk, dtype=torch.float16)
        try:
            kernel(buf[:kk].view(1, kk), buf[kk:].view(2, kk), torch.empty(1, 2))
        finally:
            del buf


class _Lazy:
    """A kernel compiled on its first call (so that listing the cases costs nothing)."""

    _compiled: dict = {}

    def __init__(self, name: str, build: Callable[[], object]) -> None:
        self.name, self.build = name, build

    def __call__(self, *args, **kwargs):
        k = self._compiled.get(self.name)
        if k is None:
            k = self._compiled[self.name] = self.build()
        return k(*args, **kwargs)


def launch_cases() -> list[Case]:
    g = _Lazy("gemm", lambda: _compile(gm.make_gemm(), DEFAULT_SUBS))
    g_k64 = _Lazy("gemm K=64", lambda: _compile(gm.make_gemm(), {**DEFAULT_SUBS, K: 64}))
    ss = _Lazy("scale_shift", lambda: _compile(ew.make_scale_shift(wc.f32), ew.DEFAULT_SUBS))
    a, b, c = _half(64, 64), _half(32, 64), torch.empty(64, 32)
    x, y, bias, out = torch.randn(8, 64), torch.randn(8, 64), torch.randn(64), torch.empty(8, 64)
    shared = torch.zeros(8 * 64 + 8 * 64 - 64)  # b and out overlapping by their last/first row
    at = _Lazy(
        "attention",
        lambda: _compile(
            attn.make_attention(wc.f16, "bhsd", False, 2),
            {attn.BLOCK_M: 32, attn.BLOCK_N: 32, attn.NUM_STAGES: 2, attn.D: 64},
        ),
    )
    q = _half(1, 2, 16, 64)
    A = "attention (q, k, v, o [B, H, S, 64] f16, then `scale: wc.Scalar[f32]`)"
    G, S = (
        "GEMM `c = a @ b.T` (a [M, K] f16, b [N, K] f16, c [M, N] f32)",
        "scale_shift f32 `out = a * b + bias` (a, b, out [M, N], bias [N])",
    )
    return [
        Case(G, "a is float32", lambda: g(a.float(), b, c), "a"),
        Case(G, "b is bfloat16", lambda: g(a, b.bfloat16(), c), "b"),
        Case(G, "c (output) is float16", lambda: g(a, b, c.half()), "c"),
        Case(G, "a has rank 3", lambda: g(a[None], b, c), "a"),
        Case(G, "c has rank 1", lambda: g(a, b, c.reshape(-1)), "c"),
        Case(G, "b on the `meta` device (not CPU)", lambda: g(a, b.to("meta"), c), "b"),
        Case(G, "a is a broadcast view (`expand`: stride 0)", lambda: g(_half(1, 64).expand(64, 64), b, c), "a"),
        Case(
            G,
            "c's strides make its elements share memory (`as_strided`)",
            lambda: g(a, b, torch.empty(64 * 16 + 16).as_strided((64, 32), (16, 1))),
            "c",
        ),
        Case(G, "b's K (72) contradicts a's K (64)", lambda: g(a, _half(32, 72), c), "b"),
        Case(G, "c's M (65) contradicts a's M (64)", lambda: g(a, b, torch.empty(65, 32)), "c"),
        Case(G, "c's N (30) contradicts b's N (32)", lambda: g(a, b, torch.empty(64, 30)), "c"),
        Case(
            G, "K = 128 where K = 64 was bound at compile time", lambda: g_k64(_half(64, 128), _half(32, 128), c), "a"
        ),
        Case(G, "K = 2**31 + 8 does not fit in int32", lambda: _huge_k_call(g), "a"),
        Case(G, "one argument (neither the 2 inputs nor all 3)", lambda: g(a), "b"),
        Case(G, "four arguments", lambda: g(a, b, c, c), "#4"),
        Case(G, "no arguments", lambda: g(), "a"),
        Case(G, "b is a numpy array", lambda: g(a, b.numpy(), c), "b"),
        Case(G, "a is None", lambda: g(None, b, c), "a"),
        Case(G, "b is a Python list (inputs-only call)", lambda: g(a, b.tolist()), "b"),
        Case(G, "b has rank 1 (inputs-only call)", lambda: g(a, b.reshape(-1)), "b"),
        Case(G, "c aliases a (`a.view(torch.float32)`)", lambda: g(a, b, a.view(torch.float32)), "c"),
        Case(S, "bias has rank 2", lambda: ss(x, y, bias[None], out), "bias"),
        Case(S, "bias has 32 elements, a has N = 64", lambda: ss(x, y, torch.randn(32), out), "bias"),
        Case(
            S,
            "out and a are interleaved column slices of one buffer",
            lambda: ss(shared[:512].view(8, 64)[:, :32], y[:, :32], bias[:32], shared[:512].view(8, 64)[:, 32:]),
            "out",
        ),
        Case(S, "a is int32", lambda: ss(x.int(), y, bias, out), "a"),
        Case(S, "b is float16", lambda: ss(x, y.half(), bias, out), "b"),
        Case(S, "out on the `meta` device", lambda: ss(x, y, bias, out.to("meta")), "out"),
        Case(S, "out is a (in place)", lambda: ss(x, y, bias, x), "out"),
        Case(
            S,
            "out overlaps b by one row",
            lambda: ss(x, shared[:512].view(8, 64), bias, shared[448:].view(8, 64)),
            "out",
        ),
        Case(S, "two arguments (neither the 3 inputs nor all 4)", lambda: ss(x, y), "bias"),
        Case(S, "keyword `output=` (no such argument)", lambda: ss(a=x, b=y, bias=bias, output=out), "output"),
        Case(S, "a given by position and by keyword", lambda: ss(x, y, bias, a=x), "a"),
        Case(S, "keywords a, b, out: bias missing", lambda: ss(a=x, b=y, out=out), "bias"),
        Case(A, "scale (f32 scalar) is a string", lambda: at(q, q, q, torch.empty_like(q), "0.1"), "scale"),
        Case(A, "scale is a 1-D tensor", lambda: at(q, q, q, torch.empty_like(q), torch.ones(2)), "scale"),
        Case(A, "scale is missing (inputs-only call)", lambda: at(q, q, q), "scale"),
    ]


# ------------------------------------------------------------------------- definition / compile errors


def _gemm_body(a_spec, b_spec):
    """A GEMM-like kernel whose operands are declared by ``a_spec`` / ``b_spec`` ((dims, dtype))."""
    (adims, adt), (bdims, bdt) = a_spec, b_spec

    @wc.wave(gm.gemm_constraints())
    def bad_gemm(a: Memory[adims[0], adims[1], adt], b: Memory[bdims[0], bdims[1], bdt], c: Memory[M, N, f32]):
        acc = Register[M, N, f32](0.0)

        @wc.iterate(K, init_args=[acc])
        def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
            return wc.mma(wc.read(a), wc.read(b), acc)

        wc.write(body, c)

    return bad_gemm


def _gemm_without(kind) -> wc.WaveKernel:
    constraints = [c for c in gm.gemm_constraints() if not isinstance(c, kind)]

    @wc.wave(constraints)
    def gemm(a: Memory[M, K, f16], b: Memory[N, K, f16], c: Memory[M, N, f32]):
        acc = Register[M, N, f32](0.0)

        @wc.iterate(K, init_args=[acc])
        def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
            return wc.mma(wc.read(a), wc.read(b), acc)

        wc.write(body, c)

    return gemm


def _row_prefix_sums() -> wc.WaveKernel:
    """A GEMM whose C holds the prefix sums of its rows along N (``wc.cumsum(c, N)``)."""

    @wc.wave(gm.gemm_constraints())
    def gemm_cumsum(a: Memory[M, K, f16], b: Memory[N, K, f16], c: Memory[M, N, f32]):
        @wc.iterate(K, init_args=[Register[M, N, f32](0.0)])
        def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
            return wc.mma(wc.read(a), wc.read(b), acc)

        wc.write(wc.cumsum(body, N), c)

    return gemm_cumsum


def _write_wrong_dtype() -> wc.WaveKernel:
    @wc.wave(ew.rowwise_constraints(32, 8))
    def cast_copy(src: Memory[M, N, f32], dst: Memory[M, N, f16]):
        wc.write(wc.read(src), dst)

    return cast_copy


def _unannotated() -> wc.WaveKernel:
    @wc.wave(ew.rowwise_constraints(32, 8))
    def copy(src, dst: Memory[M, N, f16]):
        wc.write(wc.read(src), dst)

    return copy


def _returns_value() -> wc.WaveKernel:
    @wc.wave(ew.rowwise_constraints(32, 8))
    def copy(src: Memory[M, N, f16], dst: Memory[M, N, f16]):
        return wc.read(src)

    return copy


def _iterate_wrong_count() -> wc.WaveKernel:
    @wc.wave(gm.gemm_constraints())
    def gemm(a: Memory[M, K, f16], b: Memory[N, K, f16], c: Memory[M, N, f32]):
        acc = Register[M, N, f32](0.0)

        @wc.iterate(K, init_args=[acc])
        def body(acc: Register[M, N, f32]) -> Register[M, N, f32]:
            out = wc.mma(wc.read(a), wc.read(b), acc)
            return out, out

        wc.write(body, c)

    return gemm


def _elementwise(body, dtype) -> wc.WaveKernel:
    @wc.wave(ew.rowwise_constraints(32, 4))
    def elementwise(src: Memory[M, N, dtype], dst: Memory[M, N, dtype]):
        wc.write(body(wc.read(src)), dst)

    return elementwise


WGMMA = wc.MMAType.NV_WGMMA_F32_64xNx16_F16


def _log(v, keep=None, **kw):
    """``wc.debug_log(v, **kw)``, then ``keep`` (default ``v``) for the element-wise kernel to write."""
    wc.debug_log(v, **kw)
    return v if keep is None else keep


def definition_cases() -> list[Case]:
    D, OPT = "kernel definition", "wc.compile options"
    subs = DEFAULT_SUBS
    BM = wc.sym.BLOCK_M
    return [
        Case(D, "`wc.read` called outside a kernel", lambda: wc.read(torch.zeros(4))),
        Case(
            D,
            "mma operands do not contract (b declared [K, N])",
            lambda: _compile(_gemm_body(((M, K), f16), ((K, N), f16)), subs),
        ),
        Case(
            D,
            "mma operands of different dtypes (f16 and bf16)",
            lambda: _compile(_gemm_body(((M, K), f16), ((N, K), wc.bf16)), subs),
        ),
        Case(D, "bf16 operands with the f16 MMA instruction", lambda: _compile(gm.make_gemm(wc.bf16), subs)),
        Case(
            D,
            "f16 operands with the int8 MMA instruction",
            lambda: _compile(gm.make_gemm(wc.f16, 32, wc.MMAType.NV_I32_16x8x32_I8), subs),
        ),
        Case(
            D,
            "`matmul` of float32 tensors without `allow_tf32=True`",
            lambda: gm.matmul(torch.randn(16, 32), torch.randn(16, 32), backend="emulator"),
        ),
        Case(D, "an f32 value written to f16 memory", lambda: _compile(_write_wrong_dtype(), ew.DEFAULT_SUBS)),
        Case(D, "an argument without a Memory annotation", lambda: _compile(_unannotated(), ew.DEFAULT_SUBS)),
        Case(D, "the kernel returns a value", lambda: _compile(_returns_value(), ew.DEFAULT_SUBS)),
        Case(
            D,
            "arithmetic on fp8 values (`x * 2.0`, x f8e4m3fn)",
            lambda: _compile(_elementwise(lambda v: v * 2.0, wc.f8e4m3fn), ew.DEFAULT_SUBS),
        ),
        Case(
            D,
            "a bit operation on floats (`x & 1`, x f32)",
            lambda: _compile(_elementwise(lambda v: v & 1, f32), ew.DEFAULT_SUBS),
        ),
        Case(D, "a real exponent (`x ** 0.5`)", lambda: _compile(_elementwise(lambda v: v**0.5, f32), ew.DEFAULT_SUBS)),
        Case(
            D,
            "an integer to a negative power (`x ** -1`, x i32)",
            lambda: _compile(_elementwise(lambda v: v**-1, wc.i32), ew.DEFAULT_SUBS),
        ),
        Case(D, "an iterate body returns 2 values for 1 init_arg", lambda: _compile(_iterate_wrong_count(), subs)),
        Case(
            D,
            "`wc.debug_log(x, iterations=2)` outside any loop",
            lambda: _compile(_elementwise(lambda v: _log(v, iterations=2), f32), ew.DEFAULT_SUBS),
        ),
        Case(
            D,
            "`wc.debug_log` of a mask (`x > 0`, i1)",
            lambda: _compile(_elementwise(lambda v: _log(v > 0, keep=v), f32), ew.DEFAULT_SUBS),
        ),
        Case(
            D,
            "no TilingConstraint for the reduction dim K",
            lambda: _compile(_gemm_without(wc.TilingConstraint), {k: v for k, v in subs.items() if k != gm.BLOCK_K}),
        ),
        Case(D, "no HardwareConstraint", lambda: _compile(_gemm_without(wc.HardwareConstraint), subs)),
        Case(D, "a constraint list entry that is not a constraint", lambda: wc.wave(["tile M by 64"])(lambda a: None)),
        Case(D, "waves=(3, 2): wave tile 64/3 is not an integer", lambda: _compile(gm.make_gemm(waves=(3, 2)), subs)),
        Case(
            D, "BLOCK_M = 48: a 24-row wave tile for the 16-row mma", lambda: _compile(gm.make_gemm(), {**subs, BM: 48})
        ),
        Case(
            D,
            "BLOCK_N = 8: prefix sums along 4-column wave tiles (padded to the mma's 8)",
            lambda: _compile(_row_prefix_sums(), {**subs, wc.sym.BLOCK_N: 8}),
        ),
        Case(
            D,
            "BLOCK_K = 24: rows of 3 runs for 128 copying threads",
            lambda: _compile(gm.make_gemm(), {**subs, wc.sym.BLOCK_K: 24}),
        ),
        Case(D, "HardwareConstraint(threads_per_wave=48)", lambda: wc.HardwareConstraint(threads_per_wave=48)),
        Case(D, "a register tile with a repeated dim (`Register[M, M, f32]`)", lambda: Register[M, M, f32]),
        Case(
            D,
            "64 waves = 2048 threads per workgroup",
            lambda: _compile(gm.make_gemm(waves=(8, 8)), {**subs, BM: 128, wc.sym.BLOCK_N: 512}),
        ),
        Case(
            D,
            "threads_per_wave=64 with an NVIDIA (32-lane) MMA",
            lambda: _compile(gm.make_gemm(threads_per_wave=64), subs),
        ),
        Case(
            D,
            "wgmma MMA type compiled for target sm_90 (no `a`)",
            lambda: _compile(gm.make_gemm(mma_type=WGMMA, waves=(1, 1)), subs, target="sm_90"),
        ),
        Case(
            D,
            "wgmma with a 32-row wave tile (64x64 tile, 2x1 warpgroups)",
            lambda: _compile(gm.make_gemm(mma_type=WGMMA, waves=(2, 1)), subs, target="sm_90a"),
        ),
        Case(
            D,
            "wgmma with BLOCK_K = 8",
            lambda: _compile(gm.make_gemm(mma_type=WGMMA, waves=(1, 1)), {**subs, wc.sym.BLOCK_K: 8}, target="sm_90a"),
        ),
        Case(D, "calling the uncompiled kernel", lambda: gm.make_gemm()(torch.zeros(1))),
        Case(
            OPT,
            "BLOCK_M missing from subs",
            lambda: _compile(gm.make_gemm(), {k: v for k, v in subs.items() if k != BM}),
        ),
        Case(OPT, "BLOCK_M = -64", lambda: _compile(gm.make_gemm(), {**subs, BM: -64})),
        Case(OPT, "BLOCK_M = 64.0 (a float)", lambda: _compile(gm.make_gemm(), {**subs, BM: 64.0})),
        Case(OPT, "BLOCK_M = object() (not a number)", lambda: _compile(gm.make_gemm(), {**subs, BM: object()})),
        Case(
            OPT,
            "print_ir_after=['no_such_pass']",
            lambda: _compile(gm.make_gemm(), subs, print_ir_after=["no_such_pass"]),
        ),
        Case(
            OPT,
            "print_ir_after='no_such_pass' (a string, not a list)",
            lambda: _compile(gm.make_gemm(), subs, print_ir_after="no_such_pass"),
        ),
        Case(OPT, "target='sm_70'", lambda: _compile(gm.make_gemm(), subs, target="sm_70")),
        Case(OPT, "target='gfx942' for a 32-lane kernel", lambda: _compile(gm.make_gemm(), subs, target="gfx942")),
        Case(OPT, "backend='opencl'", lambda: _compile(gm.make_gemm(), subs, backend="opencl")),
        Case(OPT, "WAVEC_BACKEND=opencl in the environment", lambda: _with_env_backend(gm.make_gemm(), subs)),
        Case(OPT, "a plain function instead of a @wc.wave kernel", lambda: _compile(lambda a: None, subs)),
        Case(
            OPT,
            "torch_op='no_namespace'",
            lambda: _compile(ew.make_scale_shift(wc.f32), ew.DEFAULT_SUBS, torch_op="no_namespace"),
        ),
    ]


def _with_env_backend(kernel, subs):
    with _env("WAVEC_BACKEND", "opencl"):
        return wc.compile(kernel, subs, cache=False)


# ------------------------------------------------------------------------------------------ table


def cases() -> list[Case]:
    """Every case, in table order (cheap: kernels compile on first use)."""
    return launch_cases() + definition_cases()


def run_cases(selected: list[Case] | None = None) -> list[Row]:
    rows = []
    for case in selected if selected is not None else cases():
        try:
            case.run()
        except Exception as exc:  # noqa: BLE001 - recording whatever is raised is the point
            rows.append(Row(case, exc))
        else:
            rows.append(Row(case, None))
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(rows: list[Row]) -> str:
    out = [
        "# What bad inputs raise",
        "",
        "Generated by `scripts/bad_inputs_table.py` (do not edit; `--check` tells whether this file is stale,",
        "and `tests/unit/test_bad_inputs_table.py` fails when it is).  Launch errors come from the GEMM and",
        "`scale_shift` kernels compiled for the emulator backend and called with CPU tensors; the CUDA launcher",
        "validates arguments with the same code (`wavec/runtime/binding.py`), except that it wants CUDA tensors",
        "where the emulator wants CPU ones.  *message* is the first line of the error text; *where* is the",
        "kernel source line an error points at, when it has one.  Addresses are shown as `0x…`.",
        "",
        "Every row should raise a `wavec.errors.WavecError` subclass, and a launch error should name the",
        "argument.  Rows marked **bug** do not (yet); see the list at the end.",
    ]
    group = None
    for i, row in enumerate(rows, 1):
        if row.case.group != group:
            group = row.case.group
            out += [
                "",
                f"## {group}",
                "",
                "| # | input | error class | argument | message (first line) | where |",
                "|---|---|---|---|---|---|",
            ]
        arg = row.error.fields.get("arg", "") if isinstance(row.error, WavecError) else ""
        flag = " **bug**" if row.case.bug else ""
        out.append(
            f"| {i} | {_cell(row.case.input)}{flag} | `{row.error_class}` | "
            f"{'`' + arg + '`' if arg else ''} | {_cell(row.message)} | {row.where} |"
        )
    bugs = [(i, r) for i, r in enumerate(rows, 1) if r.case.bug]
    if bugs:
        out += ["", "## Known bugs", ""]
        out += [f"- #{i} {_cell(r.case.input)}: {r.case.bug}." for i, r in bugs]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help=f"exit 1 if {DOC.relative_to(ROOT)} is stale")
    parser.add_argument("--print", action="store_true", help="print the table instead of writing it")
    parser.add_argument("--output", type=Path, default=DOC)
    opts = parser.parse_args(argv)
    text = render(run_cases())
    if opts.print:
        sys.stdout.write(text)
        return 0
    if opts.check:
        current = opts.output.read_text() if opts.output.exists() else ""
        if current != text:
            print(f"{opts.output} is stale; run scripts/bad_inputs_table.py", file=sys.stderr)
            return 1
        return 0
    opts.output.write_text(text)
    print(f"wrote {opts.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
