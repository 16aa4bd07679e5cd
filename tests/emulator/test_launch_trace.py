"""``wavec.runtime.trace_launches`` and ``wavec.perf.forward.predict_launches`` on the emulator: a tiny
transformers Llama routed through wavec (linears, RMSNorms, attention) launches exactly the kernels the
integration's report counts, in forward order, with the shapes the kernels see; every launch of a modelled
family gets a positive prediction from the shipped weights; traces do not nest and end on errors."""

from __future__ import annotations

import pytest
import torch

import wavec as wc
from wavec.runtime import trace as trace_mod
from wavec.runtime import trace_launches

pytest.importorskip("transformers", reason="transformers is not installed (pip install -e '.[test]')")

from tests import hf_models as hm  # noqa: E402
from wavec.integrations import transformers as wt  # noqa: E402

LAYERS = 2  # hf_models' tiny models


def test_direct_launches_are_traced_in_order_with_shapes():
    from wavec.kernels import elementwise as ew

    k = wc.compile(ew.make_copy(wc.f32), ew.DEFAULT_SUBS, backend="emulator", target="sm_80")
    a, b = torch.randn(5, 7), torch.randn(3, 9)
    with trace_launches() as launches:
        out_a = torch.empty_like(a)
        k(a, out_a)
        k(b, torch.empty_like(b))
    assert [x.kernel for x in launches] == [k.metadata.kernel] * 2
    assert [x.shapes for x in launches] == [((5, 7), (5, 7)), ((3, 9), (3, 9))]
    assert torch.equal(out_a, a)
    k(a, torch.empty_like(a))  # outside the trace: not noted
    assert len(launches) == 2


def test_traces_do_not_nest_and_end_on_error():
    with trace_launches():
        with pytest.raises(RuntimeError, match="already active"):
            with trace_launches():
                pass
    with pytest.raises(ValueError):
        with trace_launches():
            raise ValueError("boom")
    assert trace_mod.ACTIVE is None


def test_tiny_llama_trace_matches_the_report_and_is_predicted():
    from wavec.perf.forward import predict_launches

    ref = hm.build("llama")
    model = hm.lowered(ref, torch.bfloat16)
    report = wt.enable(model, linears=True)
    report.reset()
    ids = torch.randint(0, hm.VOCAB, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), trace_launches() as launches:
        model(ids, use_cache=False)
    kinds = [x.kernel for x in launches]
    assert kinds.count("gemm") == report.calls["linear"] == 7 * LAYERS + 1
    assert kinds.count("rms_norm_rows") == report.calls["rms_norm"] == 2 * LAYERS + 1
    assert kinds.count("attention") == report.calls["attention"] == LAYERS
    assert kinds[0] == "rms_norm_rows" and kinds[-2:] == ["rms_norm_rows", "gemm"]  # the final norm, the LM head
    hidden = model.config.hidden_size
    head = launches[-1]
    assert head.shapes[0] == (2 * 16, hidden) and head.shapes[1] == (hm.VOCAB, hidden)
    predicted = predict_launches(launches, "h100")
    assert [p.kernel for p in predicted] == kinds
    for p in predicted:
        assert p.family is not None and p.estimate is not None
        assert 0 < p.estimate.roofline_s <= p.estimate.time_s < 1.0
    families = {p.kernel: p.family for p in predicted}
    assert families == {"gemm": "gemm_mma_sync", "rms_norm_rows": "rows", "attention": "attention"}
    wt.disable(model)
