"""GPU tier: every launch API (``WAVEC_LAUNCH_API``: libcuda through ctypes or the C launcher, cuda.bindings)
runs kernels through the full and the prepared paths, on the current stream, with the same results."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from wavec.kernels import rows

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("api", ["ctypes", "c", "cuda-python"])
def test_both_launch_apis(monkeypatch, api: str) -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    monkeypatch.setenv("WAVEC_LAUNCH_API", api)
    block_n, loop, vec, waves = rows.config_for(wc.f16, 1000)
    definition = rows.make_softmax_rows(wc.f16, loop=loop, vec=vec, waves_per_row=waves)
    kernel = wc.compile(definition, {rows.BLOCK_N: block_n})
    x = torch.randn(37, 1000, device="cuda", dtype=torch.float16)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())  # x is written on the default stream
    with torch.cuda.stream(stream):
        outs = [torch.full_like(x, float("nan")) for _ in range(3)]
        for out in outs:  # the first call prepares, the others take the prepared launch
            kernel(x, out)
    stream.synchronize()
    assert (kernel._impl._c_launch is None) == (api == "cuda-python")
    want = torch.softmax(x.float(), -1)
    for out in outs:
        torch.testing.assert_close(out.float(), want, atol=2e-3, rtol=2e-3)
