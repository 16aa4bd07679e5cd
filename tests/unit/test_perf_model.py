"""``wavec.perf`` GPU table, occupancy and scheduling, features and the roofline (no compiler needed: the
decompositions here are built by hand)."""

from __future__ import annotations

import numpy as np
import pytest

from wavec.errors import OptionError, PerfError
from wavec.perf import GPUS, Decomposition, bottleneck, features, gpu, occupancy, roofline, schedule
from wavec.perf.features import row_alignment

# Datasheet dense FP16/BF16 tensor FLOP/s (see wavec/perf/gpus.py's sources) for the best kind on each GPU.
DATASHEET = {"h100": 989.4e12, "h200": 989.4e12, "a100": 312e12, "l40s": 362.05e12, "mi300x": 1307.4e12}
DATASHEET["b200"] = 2.25e15


@pytest.mark.parametrize("name", sorted(GPUS))
def test_gpu_rates_match_datasheets(name):
    spec = GPUS[name]
    best = max(r for (kind, dt), r in spec.tensor.items() if dt == "f16")
    assert best * spec.sms * spec.clock_hz == pytest.approx(DATASHEET[name], rel=0.02)
    v = spec.vector()
    assert v["sms"] == spec.sms and v["tensor_f16"] == best and v["fma_f32"] == spec.fma["f32"]


def test_gpu_lookup():
    assert gpu("h100") is GPUS["h100"] and gpu("NVIDIA H200") is GPUS["h200"]
    assert gpu("AMD Instinct MI300X").threads_per_warp == 64
    assert gpu("NVIDIA A100-SXM4-80GB").tensor_rate("mma.sync", "bf16") == 2048
    with pytest.raises(OptionError, match="unknown GPU 'v100'"):
        gpu("v100")
    with pytest.raises(OptionError, match="no wgmma rate"):
        GPUS["a100"].tensor_rate("wgmma", "f16")


def _decomp(per_task: dict[str, list[float]], threads=128, shared=16384, registers=96) -> Decomposition:
    tasks = len(next(iter(per_task.values())))
    return Decomposition(
        kernel="k",
        target="sm_90",
        grid=(tasks, 1, 1),
        block=(threads, 1, 1),
        wave=32,
        shared_bytes=shared,
        registers=registers,
        demand={k: np.asarray(v, dtype=float) for k, v in per_task.items()},
        trips={},
        footprint={"read": 0, "write": 0},
        symbols={},
    )


def test_occupancy_limits():
    h100 = GPUS["h100"]
    # 96 registers x 32 lanes = 3072 per warp; 4 warps = 12288; 65536 // 12288 = 5 workgroups.
    occ = occupancy(_decomp({"alu:int": [1.0]}), h100)
    assert (occ.blocks_per_sm, occ.limiter) == (5, "registers")
    # 100 KB of shared memory (+1 KB reserved) per workgroup: 2 fit in 228 KB.
    occ = occupancy(_decomp({"alu:int": [1.0]}, shared=100 << 10, registers=32), h100)
    assert (occ.blocks_per_sm, occ.limiter) == (2, "shared")
    occ = occupancy(_decomp({"alu:int": [1.0]}, threads=1024, shared=0, registers=None), h100)
    assert (occ.blocks_per_sm, occ.limiter) == (2, "threads")
    with pytest.raises(PerfError, match="shared memory"):
        occupancy(_decomp({"alu:int": [1.0]}, shared=200 << 10), GPUS["a100"])


def test_round_robin_and_greedy():
    h100 = GPUS["h100"]
    tasks = 2 * h100.sms + 4
    d = _decomp({"tensor:mma.sync:f16": [1e6] * tasks})
    s = schedule(d, h100)
    assert s.tasks_per_sm.tolist() == [3] * 4 + [2] * (h100.sms - 4)
    assert s.busiest("tensor") == (0, 3e6) and s.waves == 1
    # A triangle of unequal tasks, heaviest last: round-robin piles them on the first SMs, greedy evens out.
    costs = np.arange(1, 4 * h100.sms + 1, dtype=float) * 1e6
    d = _decomp({"tensor:mma.sync:f16": costs.tolist()}, registers=64, shared=0, threads=1024)
    rr, greedy = schedule(d, h100), schedule(d, h100, "greedy")
    assert greedy.busiest("tensor")[1] <= rr.busiest("tensor")[1]
    assert greedy.tasks_per_sm.sum() == rr.tasks_per_sm.sum() == len(costs)
    with pytest.raises(OptionError, match="policy"):
        schedule(d, h100, "random")


def test_features_and_roofline():
    h100 = GPUS["h100"]
    tasks = h100.sms + 1  # SM 0 runs two tasks
    flops = 2 * 128 * 128 * 4096
    d = _decomp(
        {
            "tensor:wgmma:f16": [flops] * tasks,
            "fma:f32": [1e5] * tasks,
            "xu:exp2": [2e5] * tasks,
            "global_read": [1 << 18] * tasks,
            "global_write": [1 << 16] * tasks,
            "shared_in": [1 << 20] * tasks,
        }
    )
    d.footprint = {"read": tasks << 17, "write": tasks << 16}  # half the reads hit L2
    f = features(d, schedule(d, h100))
    v = f.values
    assert v["tensor.gpu_ops"] == flops * tasks and v["tensor.sm_ops"] == 2 * flops
    assert v["tensor.sm_cycles"] == pytest.approx(2 * flops / 4096)
    assert v["tensor.gpu_cycles"] == pytest.approx(flops * tasks / 4096 / h100.sms)
    assert v["xu.sm_cycles"] == pytest.approx(4e5 / 16) and v["fma.sm_cycles"] == pytest.approx(2e5 / 128)
    assert v["global.gpu_bytes"] == tasks * ((1 << 17) + (1 << 16))
    assert v["l2.gpu_bytes"] == tasks * ((1 << 18) + (1 << 16))
    assert v["global.sm_bytes"] == pytest.approx(2 * ((1 << 17) + (1 << 16)))
    assert v["shared.sm_cycles"] == pytest.approx(2 * (1 << 20) / 128)
    assert (v["sm_tasks"], v["waves"]) == (2, 1)
    cycles = f.cycles()
    assert roofline(f) == pytest.approx(max(cycles.values()) / h100.clock_hz)
    assert bottleneck(f) == max(cycles, key=cycles.__getitem__) == "tensor.sm"
    assert roofline(f, launch_s=2e-6) == pytest.approx(roofline(f) + 2e-6)
    assert f.gpu["hbm_bytes_s"] == h100.hbm_bytes_s
    assert (v["align.read_bytes"], v["align.write_bytes"]) == (128.0, 128.0)  # no tensors: nothing misaligned
    d.tensors = [((100, 2568), "bf16", False), ((4096, 2568), "bf16", False), ((100, 4096), "f32", True)]
    v = features(d, schedule(d, h100)).values
    assert (v["align.read_bytes"], v["align.write_bytes"]) == (16.0, 128.0)


def test_row_alignment_by_hand():
    # 2568 x 2 B = 5136 = 16 x 321; 11072 x 2 B = 22144 = 128 x 173; 1000 x 2 B = 2000 = 16 x 125
    assert row_alignment([((2, 2568), "f16", False), ((11072, 2568), "f16", False), ((2, 11072), "f16", True)]) == (
        16.0,
        128.0,
    )
    assert row_alignment([((35, 1000), "bf16", False), ((1000,), "bf16", False), ((35, 1001), "f32", True)]) == (
        16.0,
        4.0,  # 1001 x 4 B: odd multiple of 4
    )
    # integer routing tensors and 1-D vectors have no rows; none at all: the cap
    assert row_alignment([((7, 3), "i32", False), ((9,), "f16", False)]) == (128.0, 128.0)
    assert row_alignment([((4, 8, 64), "f16", False), ((4, 8, 1024), "f16", True)]) == (128.0, 128.0)


def test_calibrated_rates():
    from wavec.perf.gpus import calibrated

    h100 = GPUS["h100"]
    spec = calibrated(h100, {"hbm_bytes_s": 3.0e12, "tensor:wgmma:f16": 800e12})
    assert spec.hbm_bytes_s == 3.0e12 and spec.l2_bytes_s == h100.l2_bytes_s
    assert spec.tensor_rate("wgmma", "f16") * spec.sms * spec.clock_hz == pytest.approx(800e12)
    assert spec.tensor_rate("mma.sync", "f16") == h100.tensor_rate("mma.sync", "f16")
    with pytest.raises(OptionError, match="unknown rate 'dram'"):
        calibrated(h100, {"dram": 1.0})
