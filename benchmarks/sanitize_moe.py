"""Run each MoE kernel form once, small, for compute-sanitizer: the static rule's choice, split-K on both
combines (ragged slices), swap-AB unsplit and split and the wgmma token blocks (sm_90a only), the router
weight on the input, an ``expert_map`` with skipped experts.  The pytest files take 420 s under racecheck
for 29 of their 337 cases; this covers every kernel form in a few launches each.  References in f32 on the
device (torch's own kernels: not wavec's, so the report is about wavec's); every output element checked.

    compute-sanitizer --tool racecheck python -m benchmarks.sanitize_moe
    compute-sanitizer --tool memcheck --report-api-errors no python -m benchmarks.sanitize_moe

Prints one line per case; exits 1 if any output is wrong or unwritten (NaN)."""

from __future__ import annotations

import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 2)[0])

from tests import moe_gpu  # noqa: E402  (its tolerances and check)
from wavec.kernels import fused_moe as fm  # noqa: E402
from wavec.kernels.fused_moe import MoeConfig  # noqa: E402

# (label, config or None for the static rule, deterministic, tokens, h, i, experts, k, on_input, mapped)
CASES = [
    ("static T=3", None, True, 3, 256, 512, 8, 2, False, False),
    ("split x3 atomic", MoeConfig(16, 64, 128, 64, 3, split_k=3), False, 5, 256, 712, 8, 2, False, False),
    ("split x4 deterministic", MoeConfig(16, 64, 256, 64, 4, split_k=4), True, 1, 256, 712, 8, 2, True, False),
    ("split x2 mapped", MoeConfig(16, 32, 64, 64, 3, split_k=2), True, 9, 128, 520, 8, 2, False, True),
    ("m32 unsplit", MoeConfig(32, 64, 128, 64, 3), True, 40, 256, 512, 16, 4, False, False),
]
HOPPER_CASES = [
    ("swap-AB", MoeConfig(8, 64, 128, 128, 3, swap=True), True, 4, 256, 512, 8, 2, False, False),
    ("swap-AB split x2", MoeConfig(16, 64, 128, 64, 3, swap=True, split_k=2), False, 2, 256, 712, 8, 2, False, False),
    ("wgmma m64", MoeConfig(64, 64, 128, 64, 4, wgmma=True), True, 100, 256, 520, 4, 2, False, False),
    ("wgmma m128 atomic", MoeConfig(128, 128, 256, 64, 3, wgmma=True), False, 300, 264, 512, 4, 2, True, False),
]


def inputs(t: int, h: int, i: int, e: int, k: int, seed: int, device: str) -> tuple:
    """hidden, w1, w2, top-k weights and int32 ids (bf16; ``moe_gpu.inputs``' distribution, any device)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, h, generator=g)
    w1, w2 = torch.randn(e, 2 * i, h, generator=g) / h**0.5, torch.randn(e, h, i, generator=g) / i**0.5
    weights, ids = torch.topk(torch.softmax(torch.randn(t, e, generator=g), -1), k)
    bf = [a.to(device=device, dtype=torch.bfloat16) for a in (x, w1, w2)]
    return (*bf, (weights * 1.7).to(device), ids.int().to(device))


def run_case(case: tuple, seed: int, device: str = "cuda") -> float:
    """The max error of one case against the f32 reference (raises if an element is unwritten)."""
    _label, cfg, det, t, h, i, e, k, on_input, mapped = case
    x, w1, w2, wts, ids = inputs(t, h, i, e, k, seed, device)
    expert_map, kw = None, {}
    if mapped:  # experts 1 and 5 live elsewhere: -1, skipped; the rest renumbered
        keep = torch.tensor([j not in (1, 5) for j in range(e)], device=device)
        expert_map = torch.where(keep, torch.cumsum(keep.int(), 0) - 1, -1).int()
        w1, w2, kw = w1[keep], w2[keep], {"global_num_experts": e}
    out = torch.full_like(x, float("nan"))
    fm.fused_experts(
        x, w1, w2, wts, ids, config=cfg, deterministic=det, out=out, expert_map=expert_map,
        apply_router_weight_on_input=on_input, **kw,
    )  # fmt: skip
    want = fm.reference(x, w1, w2, wts, ids, expert_map=expert_map, apply_router_weight_on_input=on_input)
    moe_gpu.check(out, want, x.dtype)
    return float((out.float() - want).abs().max())


def main() -> int:
    device = "cuda" if torch.cuda.is_available() else "cpu"  # (cpu: the emulator, a check of this script)
    hopper = device == "cuda" and torch.cuda.get_device_capability() == (9, 0)
    cases = CASES + (HOPPER_CASES if hopper else [])
    bad = 0
    for seed, case in enumerate(cases):
        try:
            err = run_case(case, seed, device)
            print(f"{case[0]:<24} max err {err:.2e} ok", flush=True)
        except AssertionError as e:
            bad += 1
            print(f"{case[0]:<24} WRONG: {str(e).splitlines()[0]}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
