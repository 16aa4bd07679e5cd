"""Where ``tune_gemm.py`` runs its kernels: the GPU, or (``--dry-run``) a synthetic device.

Both offer the same small interface: ``begin_shape``/``end_shape`` (inputs per shape), ``runner`` (one
launch of a compiled kernel), ``cublas`` (one ``torch.matmul``), ``timer(candidate, fn)`` (seconds per
launch over ``reps`` launches), ``probe``, ``check`` (correctness of a compiled kernel) and ``rates``.

GPU timing: CUDA events around ``reps`` back-to-back launches, ``reps`` chosen per shape so one
measurement holds ~200 µs of GPU work.  Before the start event a ``torch.cuda._sleep`` keeps the GPU busy
while the CPU enqueues the launches: a decode GEMM takes ~10 µs, as long as a Python launch, and without
the head start the events would time the CPU.  Inputs: as ``benchmarks/gemm.py``, several input sets
whose total exceeds twice the L2 are rotated, so a small problem never runs from L2.

The synthetic device (dry run) times nothing: a configuration's "time" is the analytical ceiling divided
by an efficiency that depends on its tiles, plus noise, and a virtual clock advances by what the
measurement would have cost.  It checks correctness on the CPU emulator on tiny shapes.
"""

from __future__ import annotations

import hashlib
import math
import random

from wavec.tuning.ceiling import device_rates, gemm_ceiling

MEASURE_S = 200e-6  # GPU time one measurement aims for (amortises event resolution and launch gaps)
MAX_REPS = 64


def reps_for(t: float) -> int:
    return max(1, min(MAX_REPS, math.ceil(MEASURE_S / max(t, 1e-7))))


def capture_graph(torch, work):
    """A callable replaying ``work()`` captured in a CUDA graph (warmed up on a side stream first, as
    ``torch.cuda.graph`` requires for cuBLAS), or None when capture fails (then the caller times
    ``work``'s calls one by one)."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            work()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            work()
    except RuntimeError as e:  # capture unsupported here: fall back to timing the calls
        print(f"   note: cuBLAS graph capture failed ({str(e).splitlines()[0][:120]}); timing plain calls")
        return None
    return graph.replay


class VirtualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _rel_err(out, ref) -> float:
    return float((out.float() - ref).norm() / ref.norm().clamp_min(1e-30))


class GpuDevice:
    """Times on the visible CUDA GPU."""

    backend = "cuda"

    def __init__(self) -> None:
        import torch

        self.torch = torch
        props = torch.cuda.get_device_properties(0)
        self.name = torch.cuda.get_device_name()
        self.sms = props.multi_processor_count
        self.l2_bytes = getattr(props, "L2_cache_size", 0) or 50 * 2**20
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        self.reps = 1
        self.launch_s = 20e-6  # replaced by measure_launch
        self.sets: list = []

    def rates(self) -> dict:
        from wavec.tuning.ceiling import measure_rates

        return measure_rates()

    def measure_launch(self, kernel) -> float:
        """CPU seconds per launch (the larger of a wavec launch and a torch.matmul) on tiny inputs."""
        import time

        torch = self.torch
        a = torch.randn(16, 64, device="cuda", dtype=torch.float16)
        b = torch.randn(64, 64, device="cuda", dtype=torch.float16)
        c = torch.empty(16, 64, device="cuda", dtype=torch.float32)
        out = []
        for fn in (lambda: kernel(a, b, c), lambda: torch.matmul(a, b.T)):
            for _ in range(20):
                fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(200):
                fn()
            out.append((time.perf_counter() - t0) / 200)
            torch.cuda.synchronize()
        self.launch_s = max(out)
        return self.launch_s

    def begin_shape(self, shape, dtype: str) -> None:
        torch = self.torch
        m, n, k = shape
        tdt = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
        per_set = (m * k + n * k) * 2 + m * n * (4 + 2)
        count = max(1, min(16, math.ceil(2 * self.l2_bytes / per_set)))
        self.sets = [
            (
                torch.randn(m, k, device="cuda", dtype=tdt),
                torch.randn(n, k, device="cuda", dtype=tdt),
                torch.empty(m, n, device="cuda", dtype=torch.float32),
            )
            for _ in range(count)
        ]

    def end_shape(self) -> None:
        self.sets = []

    def runner(self, kernel, cand=None):
        sets, state = self.sets, [0]

        def launch():
            i = state[0] = (state[0] + 1) % len(sets)
            kernel(*sets[i])

        return launch

    def cublas(self):
        """``torch.matmul(a, b.T)`` as ``benchmarks/gemm.py`` times it (not ``out=``: with a preallocated
        output torch measured 4096^3 f16 at 332 us on an H200 where the plain call takes ~181 us).

        Timed as a CUDA graph of ``reps`` calls over the rotating input sets (``batch``), replayed once
        between the events: the plain call costs ~15-50 µs of host time (dispatch, allocation of C), more
        than a small GEMM takes on the GPU, and the second H200 run timed that (128x4096x4096: 54 µs
        against 19 µs under ``do_bench``).  If capture fails, the calls are timed one by one as before."""
        torch, sets, state, mm = self.torch, self.sets, [0], self.torch.matmul

        def launch():
            i = state[0] = (state[0] + 1) % len(sets)
            a, b, _c = sets[i]
            mm(a, b.T)

        graphs: dict = {}

        def batch(reps: int):
            if reps not in graphs:
                graphs.clear()  # one graph per shape at a time: its outputs hold memory
                graphs[reps] = capture_graph(
                    torch, lambda: [mm(a, b.T) for a, b, _c in (sets[j % len(sets)] for j in range(reps))]
                )
            return graphs[reps]

        launch.batch = batch
        return launch

    def timer(self, cand, fn) -> float:
        torch, reps = self.torch, self.reps
        replay = fn.batch(reps) if hasattr(fn, "batch") else None
        # ~2 GHz SM clock; twice the CPU's launch time per launch keeps the GPU ahead of the CPU
        torch.cuda._sleep(int((1 if replay else reps) * self.launch_s * 2 * 2e9))
        self.start.record()
        if replay is not None:
            replay()
        else:
            for _ in range(reps):
                fn()
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end) * 1e-3 / reps

    def probe(self, fn) -> float:
        """Seconds of one launch (after one untimed), to choose ``reps``."""
        self.reps = 1
        fn()
        t = min(self.timer(None, fn) for _ in range(2))
        self.reps = reps_for(t)
        return t

    def check(self, kernel, dtype: str, cand=None) -> float | None:
        """Relative error of a launch against torch on a shape with partial tiles (None: not checked)."""
        torch = self.torch
        tdt = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
        g = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(80, 384, device="cuda", dtype=tdt, generator=g)
        b = torch.randn(512, 384, device="cuda", dtype=tdt, generator=g)
        c = torch.full((80, 512), float("nan"), device="cuda", dtype=torch.float32)
        kernel(a, b, c)
        return _rel_err(c, a.float() @ b.float().T)


class SyntheticDevice:
    """A made-up GPU for ``--dry-run``: plausible times, a virtual clock, emulator correctness checks."""

    backend = "emulator"

    def __init__(self, clock: VirtualClock, checks: int = 4, seed: int = 0) -> None:
        self.name = "synthetic H200 (dry run)"
        self.sms = 132
        self.l2_bytes = 50 * 2**20
        self.clock = clock
        self.reps = 1
        self.launch_s = 8e-6
        self.rng = random.Random(seed)
        self.shape = None
        self.dtype = "f16"
        self.checks_left = checks
        self.base = device_rates("H200")

    def rates(self) -> dict:
        self.clock.now += 1.0  # what measure_rates costs on the GPU
        return {"matrix_flops": 0.72 * self.base.matrix_flops, "hbm_bytes": 0.85 * self.base.hbm_bytes}

    def measure_launch(self, kernel) -> float:
        self.clock.now += 0.01
        return self.launch_s

    def begin_shape(self, shape, dtype: str) -> None:
        self.shape, self.dtype = shape, dtype

    def end_shape(self) -> None:
        self.shape = None

    def runner(self, kernel, cand=None):
        def launch():  # nothing to run: the synthetic timer only needs to know which configuration this is
            self.clock.now += self.seconds(cand, self.shape)

        launch.cand = cand
        return launch

    def cublas(self):
        return self.runner(None, None)

    def seconds(self, cand, shape) -> float:
        """The made-up time of one launch: each ceiling term divided by an efficiency that depends on the
        tiles, combined as a smooth maximum (real kernels overlap memory and math imperfectly), times a
        stable per-configuration quirk."""
        m, n, k = shape
        if cand is None:  # cuBLAS: 75 % of the ceiling of a 128x256 tile
            return gemm_ceiling(m, n, k, 128, 256, (2, 4), out_bytes=2, rates=self.base)["bound"] / 0.75
        s = cand.subs_dict
        bm, bn, bk, st = s["BLOCK_M"], s["BLOCK_N"], s["BLOCK_K"], s["NUM_STAGES"]
        waves = tuple(cand.kwargs_dict.get("waves", (2, 2)))
        ceil = gemm_ceiling(m, n, k, bm, bn, waves, rates=self.base)
        math_eff = 0.38 * min(1.0, (bm * bn / 16384) ** 0.35) * (1.0 if waves[0] * waves[1] >= 4 else 0.8)
        mem_eff = 0.5 + 0.3 * (bk / 128)
        pipe = (0.85 if bk == 32 else 1.0) * (0.9 if st == 2 else 1.0)
        parts = [ceil["mma"] / math_eff, ceil["hbm"] / mem_eff, ceil["l2"] / 0.6, ceil["shared"] / 0.7]
        t = sum(p**4 for p in parts) ** 0.25 / pipe + ceil["launch"]
        quirk = int(hashlib.sha1(cand.label.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        return t * (0.95 + 0.1 * quirk)

    def timer(self, cand, fn) -> float:
        cand = getattr(fn, "cand", None)
        t = self.seconds(cand, self.shape) * math.exp(self.rng.gauss(0.0, 0.01))
        self.clock.now += self.reps * (t + self.launch_s) + 40e-6
        return t

    def probe(self, fn) -> float:
        self.reps = 1
        t = self.timer(None, fn)
        self.reps = reps_for(t)
        return t

    def check(self, kernel, dtype: str, cand=None) -> float | None:
        """Emulator launch on a 20x256x256 problem for the first few configurations (it takes seconds each)."""
        if self.checks_left <= 0:
            return None
        self.checks_left -= 1
        import torch

        tdt = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
        g = torch.Generator().manual_seed(0)
        a = torch.randn(20, 256, dtype=tdt, generator=g)
        b = torch.randn(256, 256, dtype=tdt, generator=g)
        c = torch.full((20, 256), float("nan"), dtype=torch.float32)
        kernel(a, b, c)
        return _rel_err(c, a.float() @ b.float().T)
