"""The performance model's footprint of a kernel that reads one buffer through several views: the odd-row
kernels take x as 16-byte chunks and flat (``rows_odd``).  A traced launch records which tensors share a
storage (``trace.storage_groups``) and ``decompose(views=)`` counts such inputs once, as the largest view;
without it the roofline's DRAM bytes counted x twice (1.5x the bytes of one read and one write)."""

from __future__ import annotations

import math

import torch

from wavec.kernels import rms_norm, rows_odd
from wavec.perf import decompose
from wavec.runtime import trace_launches
from wavec.runtime.trace import storage_groups


def test_odd_rows_read_x_once_in_the_footprint() -> None:
    m, n = 5, 1031
    x, w = torch.randn(m, n), torch.randn(n)
    assert rows_odd.odd_config(rows_odd.f32, n, "rms_norm", n) is not None
    with trace_launches() as launches:
        got = rms_norm(x, w, 1e-6, backend="emulator")
    want = torch.nn.functional.rms_norm(x.double(), (n,), w.double(), 1e-6)
    torch.testing.assert_close(got.double(), want, rtol=2e-6, atol=2e-6)  # (f32: tests/emulator/test_rows.py's)
    (launch,) = launches
    names = [a.name for a in launch.artifact.metadata.args]
    assert names[:2] == ["x", "xf"] and launch.views is not None
    assert launch.views[:2] == (0, 0) and len(set(launch.views)) == len(names) - 1  # only x's two views share
    scalars = {k: v for k, v in launch.scalars.items() if isinstance(v, int)}
    once = decompose(launch.artifact, *launch.shapes, views=launch.views, **scalars).footprint
    twice = decompose(launch.artifact, *launch.shapes, **scalars).footprint
    sizes = [math.prod(s) * 4 if name != "inner" else math.prod(s) for s, name in zip(launch.shapes, names)]
    assert twice["read"] - once["read"] == min(sizes[0], sizes[1])  # the smaller of x's views, counted again
    assert once["write"] == twice["write"] == sizes[-1]


def test_storage_groups() -> None:
    a = torch.zeros(16)
    b = torch.zeros(4)
    assert storage_groups([a, b, a.view(4, 4), a[3:], b]) == (0, 1, 0, 0, 1)
    assert storage_groups([a, 1234]) is None  # a raw pointer: unknown


def test_library_launch_takes_the_odd_kernel_the_library_takes() -> None:
    """``perf.library.library_launch`` for an odd row length gives ``rows_odd``'s kernel (the library's), its
    integer scalars and x's views, so ``wavec perf`` decomposes what ``rms_norm`` launches: x read once."""
    from wavec.perf.gpus import GPUS
    from wavec.perf.library import library_launch

    m, n = 64, 4097
    launch = library_launch("rms_norm", (m, n), GPUS["h200"], "bf16")
    assert launch.compiled.artifact.metadata.kernel == "rms_norm_odd"
    assert launch.scalars == {"n": n, "gap": 0} and launch.views is not None and launch.views[:2] == (0, 0)
    d = decompose(launch.compiled, *launch.shapes, views=launch.views, **launch.scalars)
    x_bytes = m * n * 2
    assert x_bytes <= d.footprint["read"] < x_bytes + 64 * 1024  # (+ starts, inner and the weight)
    aligned = library_launch("rms_norm", (m, 4096), GPUS["h200"], "bf16")
    assert aligned.compiled.artifact.metadata.kernel != "rms_norm_odd" and aligned.views is None


def test_layer_norm_weight_and_bias_count_apart() -> None:
    """The odd LayerNorm's launch from ``library_launch``: x's views share one group, the weight and the bias
    (and their tables) each their own; meta tensors, which have no addresses, too."""
    from wavec.perf.gpus import GPUS
    from wavec.perf.library import library_launch

    launch = library_launch("layer_norm", (8192, 4097), GPUS["h200"], "bf16")  # (64 MB: through tables)
    names = [a.name for a in launch.compiled.artifact.metadata.args]
    assert launch.views is not None
    groups = dict(zip(names, launch.views))
    assert groups["x"] == groups["xf"] == groups.get("xr", groups["x"])
    others = [g for name, g in groups.items() if name not in ("x", "xf", "xr")]
    assert len(set(others)) == len(others)  # w, b, ws, bs, starts, inner, out: all apart
    assert storage_groups([torch.empty(3, device="meta"), torch.empty(3, device="meta")]) == (0, 1)
