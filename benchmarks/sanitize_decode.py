"""Run decode attention in one launch (dense and paged; 1, 7 and 33 splits, GQA, q_len 1 and 5) a few
times in a row and in a CUDA-graph replay, for compute-sanitizer: only wavec's kernels and copies run on
the GPU (the references are computed on the CPU), so the report is about the one-launch kernels
(``wc.arrive``'s shared broadcast word and barriers, the last workgroup's reads of the partials).

    compute-sanitizer --tool memcheck python -m benchmarks.sanitize_decode
    compute-sanitizer --tool racecheck python -m benchmarks.sanitize_decode
    compute-sanitizer --tool synccheck python -m benchmarks.sanitize_decode
    compute-sanitizer --tool racecheck python -m benchmarks.sanitize_decode --variants

(``--variants``: the opt-in split kernels of ``decode_variants`` in two launches instead: wgmma with K/V
by TMA, a launch bound, four ``cp.async`` stages, on small dense cases.)

(racecheck sees shared-memory hazards; the ordering of the partials in global memory is the fences' job,
checked by the results.)  Prints one line per case; exits 1 if any output is wrong or unwritten (NaN)
or a counter is not back at 0."""

from __future__ import annotations

import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 2)[0])

import wavec as wc  # noqa: E402
from tests import dyn_kernels as dk  # noqa: E402
from wavec.kernels import decode  # noqa: E402
from wavec.kernels import paged_attention as pa  # noqa: E402

CASES = [  # paged page (0: dense), seq_lens, q_len, heads, kv_heads, splits
    (0, [2048], 1, 32, 8, None),
    (0, [777, 5, 300], 5, 16, 4, 7),
    (0, [4000, 33], 1, 8, 8, 33),
    (16, [2047, 5, 64], 1, 32, 8, None),
    (32, [500, 97], 5, 16, 4, 33),
]


def _cpu(*ts):
    return tuple(t.cpu() for t in ts)


VARIANTS = [  # decode_attention keywords, config (wgmma: sm_90 only)
    ({"mma": "wgmma"}, None),
    ({"mma": "wgmma", "intra_wg_overlap": True}, (64, 1, 3)),
    ({"launch_bound": 6}, (16, 2, 4)),
    ({}, (16, 2, 4)),
]


def variants() -> int:
    """The opt-in split kernels on two small dense cases each (1 and 3 splits): the shared K/V stages'
    reuse across the pipeline (TMA's mbarriers, ``cp.async`` groups) is what racecheck looks at."""
    hopper = torch.cuda.get_device_capability() == (9, 0)
    bad = 0
    for options, config in VARIANTS:
        if options.get("mma") == "wgmma" and not hopper:
            continue
        for lens_list, splits in (([777, 5, 300], 3), ([1000, 64], 1)):
            q, k, v, lens = dk.dense_kv_inputs(lens_list, 1, 32, 8, 128, wc.bf16, 1024, "cuda")
            out = decode.decode_attention(q, k, v, seq_lens=lens, num_splits=splits, config=config, **options)
            got = out.float().cpu()
            err = (got - dk.reference_decode_attention(*_cpu(q, k, v, lens))).abs().max().item()
            ok = err < 1.6e-2 and not got.isnan().any()
            bad += not ok
            print(f"{options} {config} lens={lens_list} splits={splits}: max err {err:.1e} {'ok' if ok else 'WRONG'}")
    return 1 if bad else 0


def main() -> int:
    torch.manual_seed(0)
    if "--variants" in sys.argv[1:]:
        return variants()
    bad = 0
    for page, lens_list, q_len, heads, kv_heads, splits in CASES:
        for call in range(3):
            if page:
                q, kc, vc, bt, lens = dk.paged_kv_inputs(lens_list, q_len, heads, kv_heads, 128, page, wc.bf16, "cuda")
                out = pa.paged_attention(q, kc, vc, bt, lens, num_splits=splits, one_launch=True)
                want = dk.reference_paged_attention(*_cpu(q, kc, vc, bt, lens))
            else:
                q, k, v, lens = dk.dense_kv_inputs(
                    lens_list, q_len, heads, kv_heads, 128, wc.bf16, max(lens_list), "cuda"
                )
                out = decode.decode_attention(q, k, v, seq_lens=lens, num_splits=splits, one_launch=True)
                want = dk.reference_decode_attention(*_cpu(q, k, v, lens))
            got = out.float().cpu()
            err = (got - want).abs().max().item()
            ok = err < 1.6e-2 and not got.isnan().any()
            bad += not ok
            print(f"{'paged ' + str(page) if page else 'dense'} lens={lens_list} q_len={q_len} {heads}/{kv_heads} "
                  f"splits={splits} call {call}: max err {err:.1e} {'ok' if ok else 'WRONG'}", flush=True)  # fmt: skip
    q, k, v, lens = dk.dense_kv_inputs([3000, 40], 1, 32, 8, 128, wc.bf16, 3000, "cuda")
    decode.decode_attention(q, k, v, seq_lens=lens, one_launch=True)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = decode.decode_attention(q, k, v, seq_lens=lens, one_launch=True)
    want = dk.reference_decode_attention(*_cpu(q, k, v, lens))
    for replay in range(2):
        graph.replay()
        err = (out.float().cpu() - want).abs().max().item()
        bad += not err < 1.6e-2
        print(f"graph replay {replay}: max err {err:.1e} {'ok' if err < 1.6e-2 else 'WRONG'}", flush=True)
    dirty = [b for d in (decode._DISPATCH, pa._DISPATCH) for r in d.table.values() if r.counters is not None
             for b in r.counters.buffers.values() if (b != 0).any()]  # fmt: skip
    bad += len(dirty)
    print(f"counters back at 0: {'yes' if not dirty else f'NO ({len(dirty)} buffers)'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
