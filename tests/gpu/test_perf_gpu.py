"""GPU tier: the performance model's GPU constants against the driver, and its roofline against measured times
of wavec's library kernels (the same plans and configs the model decomposes): a measured time may not beat
the roofline by more than the published rates' error, nor exceed it by a factor no kernel here shows."""

import pytest
import torch

from wavec.kernels import attention as A
from wavec.kernels import gemm as gm
from wavec.kernels import rows as R
from wavec.perf import decompose, features, roofline, schedule
from wavec.perf.gpus import from_torch, gpu
from wavec.perf.library import library_launch
from wavec.tuning.timing import cuda_event_timer

pytestmark = pytest.mark.gpu


def test_from_torch_matches_the_table() -> None:
    props = torch.cuda.get_device_properties(0)
    spec = from_torch()
    table = gpu(props.name)
    assert spec.sms == props.multi_processor_count == table.sms, (props.name, spec.sms, table.sms)
    assert spec.shared_per_sm == table.shared_per_sm, (spec.shared_per_sm, table.shared_per_sm)
    assert spec.registers_per_sm == table.registers_per_sm
    assert spec.max_threads_per_sm == table.max_threads_per_sm


def _run(kernel: str, sizes: tuple, mma: str, causal: bool):
    x = lambda *s: torch.randn(*s, device="cuda", dtype=torch.float16)  # noqa: E731
    if kernel == "gemm":
        m, n, k = sizes
        a, b = x(m, k), x(n, k)
        return lambda: gm.matmul(a, b, mma=mma, split=1)
    if kernel == "attention":
        bsz, h, s, d = sizes
        q, kk, v = x(bsz, h, s, d), x(bsz, h, s, d), x(bsz, h, s, d)
        return lambda: A.attention(q, kk, v, causal=causal, mma=mma)
    m, n = sizes
    t = x(m, n)
    if kernel == "softmax":
        return lambda: R.softmax(t)
    w = x(n)
    return lambda: R.rms_norm(t, w)


CASES = [
    ("gemm", (4096, 4096, 4096), "mma_sync", False),
    ("gemm", (4096, 4096, 4096), "wgmma", False),
    ("gemm", (8192, 1024, 8192), "wgmma", False),
    ("attention", (4, 16, 4096, 128), "wgmma", True),
    ("attention", (4, 16, 2048, 128), "mma_sync", False),
    ("softmax", (16384, 4096), "mma_sync", False),
    ("rms_norm", (16384, 8192), "mma_sync", False),
]


@pytest.mark.parametrize("kernel,sizes,mma,causal", CASES, ids=lambda v: str(v))
def test_roofline_bounds_measured_time(kernel, sizes, mma, causal) -> None:
    spec = from_torch()
    launch = library_launch(kernel, sizes, spec, "f16", mma, causal)
    decomp = decompose(launch.compiled, *launch.shapes, gpu=spec, views=launch.views, **launch.scalars)
    bound = roofline(features(decomp, schedule(decomp, spec)))
    fn = _run(kernel, sizes, mma, causal)
    fn()
    torch.cuda.synchronize()
    measured = min(cuda_event_timer(None, fn, reps=10) for _ in range(5))
    ratio = measured / bound
    print(
        f"{kernel} {sizes} {mma} causal={causal}: measured {measured * 1e6:.1f} us, roofline "
        f"{bound * 1e6:.1f} us, {100 / ratio:.0f}% of the roofline"
    )
    # 0.8: published clocks and rates (1.83 GHz tensor clock vs up to 1.98 GHz; estimated L2 bandwidth).
    assert 0.8 <= ratio <= 8.0, (kernel, sizes, mma, measured, bound)
    assert not [n for n in decomp.notes if n.startswith("ops not counted")], decomp.notes


def test_measured_rates_are_near_the_published_ones() -> None:
    from wavec.perf.gpus import measure_rates

    table = from_torch()
    spec = measure_rates(table)
    kind = max((k for k in table.tensor if k[1] == "f16"), key=table.tensor.__getitem__)
    ratio = spec.tensor[kind] / table.tensor[kind]
    hbm = spec.hbm_bytes_s / table.hbm_bytes_s
    print(f"{table.name}: measured {kind} at {ratio:.2f} and HBM at {hbm:.2f} of the published rates")
    assert 0.5 <= ratio <= 1.15 and 0.6 <= hbm <= 1.05, (ratio, hbm)
