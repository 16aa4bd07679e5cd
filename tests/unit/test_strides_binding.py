"""Binding of strides (runtime/strides.py): a strided variant's metadata, CPU tensors, no compiler.

A dense plan answers a non-contiguous or misaligned tensor with a ``StrideMiss`` (the strided variant);
a strided plan passes each stride as its launch constant, checks it (zero / negative strides, int32,
self-overlapping outputs: ``ArgumentError`` naming the argument), and asks for the variant a stride or base
pointer needs (innermost stride not 1: cap 0; a row pitch the vector width does not divide: its cap).
"""

from __future__ import annotations

import pytest
import torch

from wavec.errors import AlignmentMiss, ArgumentError, LaunchError, StrideMiss
from wavec.runtime.artifact import ArgSpec, Artifact, KernelMetadata
from wavec.runtime.binding import BindingPlan
from wavec.runtime.strides import span_elements


def copy_meta(strided: bool, inner: bool = False, multiple: int = 8) -> KernelMetadata:
    """``dst[M, N] = src[M, N]`` (f16), dense or a strided variant (``inner``: src's innermost stride too)."""
    src_strides = ("src.stride0", "src.stride1" if inner else 1) if strided else ()
    dst_strides = ("dst.stride0", 1) if strided else ()
    consts = ("M", "N") + (("src.stride0",) + (("src.stride1",) if inner else ()) + ("dst.stride0",) if strided else ())
    return KernelMetadata(
        kernel="copy",
        entry="copy",
        block=(128, 1, 1),
        shared_bytes=0,
        args=(
            ArgSpec("src", "f16", ("M", "N"), False, src_strides, 1 if inner else multiple if strided else 1),
            ArgSpec("dst", "f16", ("M", "N"), True, dst_strides, multiple if strided else 1),
        ),
        constants=consts,
        static_symbols=(),
        grid=("(M + 3) // 4", "(N + 511) // 512", "1"),
        divisibility=(("N", 8),),
        alignment_bytes=16,
        source="k.py:1",
    )


def bind(meta: KernelMetadata, *tensors) -> dict[str, int]:
    return BindingPlan(meta, "cpu").bind(list(tensors))[0]


def test_dense_plan_asks_for_the_strided_variant() -> None:
    dense = copy_meta(False)
    big = torch.zeros(8, 96, dtype=torch.float16)
    with pytest.raises(StrideMiss) as info:
        bind(dense, big[:, :64], torch.zeros(8, 64, dtype=torch.float16))
    assert info.value.strided == {} and "non-contiguous" in str(info.value) and "'src'" in str(info.value)
    with pytest.raises(StrideMiss) as info:
        bind(dense, torch.zeros(64, 8, dtype=torch.float16).t(), torch.zeros(8, 64, dtype=torch.float16))
    assert info.value.strided == {"src": 0}  # innermost stride 8: read element by element
    flat = torch.zeros(8 * 64 + 1, dtype=torch.float16)
    with pytest.raises(StrideMiss, match="aligned to 16 bytes"):
        bind(dense, flat[1:].view(8, 64), torch.zeros(8, 64, dtype=torch.float16))
    assert isinstance(info.value, AlignmentMiss) and isinstance(info.value, ArgumentError)


def test_strides_are_launch_values() -> None:
    meta = copy_meta(True)
    big = torch.zeros(10, 96, dtype=torch.float16)
    out = torch.zeros(16, 200, dtype=torch.float16)
    values = bind(meta, big[2:, 8:72], out[::2, 16:80])
    assert values == {"M": 8, "N": 64, "src.stride0": 96, "dst.stride0": 400}
    assert bind(meta, big[:1, :64], out[:1, :64])["src.stride0"] == 0  # a size-1 dim's stride: its index is 0
    inner = copy_meta(True, inner=True)
    t = torch.zeros(64, 8, dtype=torch.float16).t()
    assert bind(inner, t, torch.zeros(8, 64, dtype=torch.float16)) == {
        "M": 8, "N": 64, "src.stride0": 1, "src.stride1": 8, "dst.stride0": 64,
    }  # fmt: skip


def test_launch_values_are_cached_per_shapes_and_strides() -> None:
    plan = BindingPlan(copy_meta(True), "cpu")
    big = torch.zeros(8, 128, dtype=torch.float16)
    out = torch.zeros(8, 64, dtype=torch.float16)
    v1 = plan.bind_launch([big[:, :64], out])[0]
    assert plan.bind_launch([big[:, 64:], out])[0] is v1  # same shapes and strides: the same values dict
    v2 = plan.bind_launch([torch.zeros(8, 96, dtype=torch.float16)[:, :64], out])[0]
    assert v2 is not v1 and v2["src.stride0"] == 96


def test_strided_plan_asks_for_caps() -> None:
    meta = copy_meta(True)
    out = torch.zeros(8, 64, dtype=torch.float16)
    with pytest.raises(StrideMiss) as info:  # row pitch 66: pairs only
        bind(meta, torch.zeros(8, 66, dtype=torch.float16)[:, :64], out)
    assert info.value.strided == {"src": 2} and "'src'" in str(info.value)
    with pytest.raises(StrideMiss) as info:  # base one element off: single elements
        bind(meta, torch.zeros(8, 96, dtype=torch.float16)[:, 1:65], out)
    assert info.value.strided == {"src": 1}
    with pytest.raises(StrideMiss) as info:  # innermost stride 8 where this variant reads rows contiguously
        bind(meta, torch.zeros(64, 8, dtype=torch.float16).t(), torch.zeros(8, 68, dtype=torch.float16)[:, :64])
    assert info.value.strided == {"src": 0, "dst": 4}  # every miss of the launch in one exception


@pytest.mark.parametrize(
    "src,dst,arg,words",
    [
        (torch.zeros(1, 64, dtype=torch.float16).expand(8, 64), None, "src", ["stride 0 of dimension 0", "zero"]),
        (None, torch.zeros(1, 64, dtype=torch.float16).expand(8, 64), "dst", ["stride 0", "zero"]),
        (None, torch.zeros(600, dtype=torch.float16).as_strided((8, 64), (8, 1)), "dst", ["share memory"]),
        (None, torch.zeros(2, 64, dtype=torch.float16).as_strided((8, 64), (0, 1))[:, :64], "dst", ["zero"]),
    ],
    ids=["zero_input", "zero_output", "self_overlap", "broadcast_output"],
)
def test_bad_strides_name_the_argument(src, dst, arg: str, words: list[str]) -> None:
    src = torch.zeros(8, 64, dtype=torch.float16) if src is None else src
    dst = torch.zeros(8, 64, dtype=torch.float16) if dst is None else dst
    with pytest.raises(ArgumentError) as info:
        bind(copy_meta(True), src, dst)
    msg = str(info.value)
    assert not isinstance(info.value, StrideMiss) and f"argument {arg!r}" in msg, msg
    for w in words:
        assert w in msg, (w, msg)


def test_negative_and_huge_strides_name_the_argument() -> None:
    """torch makes no negative strides: a tensor subclass reports one, as a foreign tensor could."""

    class Flipped(torch.Tensor):
        def stride(self, *args):  # noqa: ANN002, ANN202 - torch's signature
            return (-64, 1)

    src = torch.zeros(8, 64, dtype=torch.float16).as_subclass(Flipped)
    with pytest.raises(ArgumentError, match=r"argument 'src'.*stride -64 of dimension 0.*negative"):
        bind(copy_meta(True), src, torch.zeros(8, 64, dtype=torch.float16))

    class Huge(torch.Tensor):
        def stride(self, *args):  # noqa: ANN002, ANN202
            return (2**31, 1)

    src = torch.zeros(8, 64, dtype=torch.float16).as_subclass(Huge)
    with pytest.raises(ArgumentError, match=r"argument 'src'.*does not fit in int32"):
        bind(copy_meta(True), src, torch.zeros(8, 64, dtype=torch.float16))


def test_overlapping_strided_views_are_rejected() -> None:
    meta = copy_meta(True)
    buf = torch.zeros(8, 256, dtype=torch.float16)
    with pytest.raises(ArgumentError, match=r"argument 'dst'.*overlaps input 'src'"):
        bind(meta, buf[:, :64], buf[:, 128:192])  # interleaved rows: their spans overlap
    other = torch.zeros(8, 64, dtype=torch.float16)
    assert bind(meta, buf[:4, :64].repeat(2, 1), other)["N"] == 64


def test_span_elements() -> None:
    assert span_elements((8, 64), (96, 1)) == 7 * 96 + 64
    assert span_elements((0, 64), (96, 1)) == 0
    assert span_elements((3, 4), (1, 3)) == 12


def test_strided_metadata_round_trips_and_is_checked() -> None:
    meta = copy_meta(True, inner=True)
    art = Artifact(target="sm_80", format="ptx", binary=b"x", metadata=meta, mlir="")
    assert Artifact.from_bytes(art.to_bytes()).metadata == meta
    dst = copy_meta(True).args[1]
    for src, words in [
        (ArgSpec("src", "f16", ("M", "N"), False, ("src.stride0",), 8), "one entry per dimension"),
        (ArgSpec("src", "f16", ("M", "N"), False, ("src.stride0", 1), 6), "a power of two"),
        (ArgSpec("src", "f16", ("M", "N"), False, ("nope", 1), 8), "not launch constants"),
    ]:
        with pytest.raises(LaunchError, match=words):
            consts = ("M", "N", *(c for c in (*src.strides, "dst.stride0") if isinstance(c, str) and c != "nope"))
            BindingPlan(KernelMetadata(**{**_fields(copy_meta(True)), "args": (src, dst), "constants": consts}), "cpu")


def _fields(meta: KernelMetadata) -> dict:
    return {f: getattr(meta, f) for f in meta.__dataclass_fields__}
