"""The wgmma GEMM and cuBLAS under sustained load, with the GPU's SM clock, power and throttle reasons
(issue #25: session 11 saw wavec's repeats climb 295 -> 376 us where cuBLAS's climbed 293 -> 308).

    python benchmarks/gemm_sustained.py [--shapes 4096x6144x4096,8192x8192x8192] [--seconds 3]

Per shape and dtype, wavec and cuBLAS each run back to back for ``--seconds`` (alternated: wavec, cuBLAS,
wavec, cuBLAS, with ``--rest`` seconds idle before each so that both start from the same temperature),
timed by CUDA events over windows of launches.  ``nvidia-smi -lms`` samples the clocks and power in a
second process; each window gets the median of the samples inside it.  Prints one row per window (time a
launch, TFLOP/s, SM MHz, W, joules a GEMM, throttle-reason bits) and a summary per run: first and last
quarter's time, clock and power, so a slowdown can be told apart as clocks (power or thermal) or not.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import threading
import time

import torch
import torch.nn.functional as F

from wavec.kernels.gemm import matmul

QUERY = "timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active"


class Sampler:
    """SM clock, power, temperature and throttle reasons every ``ms`` milliseconds, stamped on arrival
    (``perf_counter``): NVML through ``pynvml`` where installed, else ``nvidia-smi -lms`` line-buffered."""

    def __init__(self, ms: int = 10) -> None:
        self.rows: list[tuple[float, float, float, float, str]] = []
        self.done = threading.Event()
        try:
            import pynvml

            pynvml.nvmlInit()
            h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
            self.thread = threading.Thread(target=self._nvml, args=(pynvml, h, ms / 1000), daemon=True)
            self.proc = None
        except Exception:
            cmd = ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", f"-lms={ms}"]
            if shutil.which("stdbuf"):
                cmd = ["stdbuf", "-oL", *cmd]
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, bufsize=1)
            self.thread = threading.Thread(target=self._smi, daemon=True)
        self.thread.start()

    def _nvml(self, nv, h, dt: float) -> None:
        while not self.done.is_set():
            mhz = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
            w = nv.nvmlDeviceGetPowerUsage(h) / 1000
            c = nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
            why = hex(nv.nvmlDeviceGetCurrentClocksThrottleReasons(h))
            self.rows.append((time.perf_counter(), float(mhz), float(w), float(c), why))
            time.sleep(dt)

    def _smi(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for ln in self.proc.stdout:
            f = [x.strip() for x in ln.split(",")]
            try:
                self.rows.append((time.perf_counter(), float(f[1]), float(f[2]), float(f[3]), f[4]))
            except (ValueError, IndexError):
                continue

    def stop(self) -> None:
        self.done.set()
        if self.proc is not None:
            self.proc.terminate()
        self.thread.join(timeout=5)

    def window(self, a: float, b: float) -> tuple[float, float, float, str]:
        inside = [r for r in self.rows if a <= r[0] <= b]
        if not inside:
            inside = [min(self.rows, key=lambda r: abs(r[0] - (a + b) / 2))] if self.rows else [(0, 0, 0, 0, "-")]
        return (
            statistics.median(r[1] for r in inside),
            statistics.median(r[2] for r in inside),
            statistics.median(r[3] for r in inside),
            statistics.mode(r[4] for r in inside),
        )


def run(fn, seconds: float, per_window: int) -> list[tuple[float, float, float]]:
    """(host start, host end, seconds a launch) per window of ``per_window`` launches."""
    out = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        h0 = time.perf_counter()
        a.record()
        for _ in range(per_window):
            fn()
        b.record()
        b.synchronize()
        out.append((h0, time.perf_counter(), a.elapsed_time(b) / 1000 / per_window))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="4096x6144x4096,8192x8192x8192")
    ap.add_argument("--dtypes", default="bf16,f16")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rest", type=float, default=3.0)
    ap.add_argument("--window-ms", type=float, default=50.0)
    args = ap.parse_args()
    dts = {"bf16": torch.bfloat16, "f16": torch.float16}
    summary = []
    for shape in args.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        for dn in args.dtypes.split(","):
            dt = dts[dn]
            a, b = torch.randn(m, k, device="cuda", dtype=dt), torch.randn(n, k, device="cuda", dtype=dt)
            fns = {
                "wavec": lambda a=a, b=b, dt=dt: matmul(a, b, mma="wgmma", out_dtype=dt),
                "cuBLAS": lambda a=a, b=b: F.linear(a, b),
            }
            torch.testing.assert_close(fns["wavec"]().float(), fns["cuBLAS"]().float(), atol=1.0, rtol=2e-2)
            for name in ("wavec", "cuBLAS", "wavec", "cuBLAS"):
                fn = fns[name]
                fn()
                torch.cuda.synchronize()
                dur = run(fn, 0.05, 1)[0][2]
                per = max(1, int(args.window_ms / 1000 / dur))
                time.sleep(args.rest)
                smp = Sampler()
                time.sleep(0.3)  # nvidia-smi's start-up, so the first window has samples
                t0 = time.perf_counter()
                wins = run(fn, args.seconds, per)
                smp.stop()
                flops = 2 * m * n * k
                print(f"-- {shape} {dn} {name}: {per} launches a window", flush=True)
                rows = []
                for h0, h1, s in wins:
                    mhz, w, c, why = smp.window(h0, h1)
                    rows.append((s, mhz, w))
                    print(
                        f"  {(h0 - t0):6.2f}s {1e6 * s:8.1f} us {flops / s / 1e12:6.0f} TF/s {mhz:6.0f} MHz "
                        f"{w:6.0f} W {c:4.0f} C {w * s:7.3f} J/GEMM reasons {why}",
                        flush=True,
                    )
                q = max(1, len(rows) // 4)
                first, last = rows[:q], rows[-q:]

                def med(rs, i):
                    return statistics.median(r[i] for r in rs)

                summary.append(
                    f"| {shape} | {dn} | {name} | {1e6 * med(first, 0):.1f} -> {1e6 * med(last, 0):.1f} | "
                    f"{med(first, 1):.0f} -> {med(last, 1):.0f} | {med(first, 2):.0f} -> {med(last, 2):.0f} | "
                    f"{med(last, 2) * med(last, 0):.3f} |"
                )
    print("\n| shape | dtype | kernel | us first -> last quarter | SM MHz | W | J a GEMM (last) |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
