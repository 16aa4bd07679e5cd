"""How fast can ``mma.sync`` go on this GPU, and at what clock does each GEMM run?

    python benchmarks/mma_sync_peak.py [--size 4096] [--dtypes f16,bf16] [--seconds 1.5]

Issue 5 asks for a ratio to cuBLAS, which uses wgmma on Hopper.  Two facts bound what any mma.sync GEMM
can reach and neither comes from a GEMM:

1. the instruction's own ceiling: a CUDA kernel (compiled with NVRTC through cupy) in which every warp
   issues independent ``mma.sync.m16n8k16`` on a 64x64 warp tile (32 accumulators, as in wavec's GEMM)
   with operands in registers ("regs"), or reloaded each k16 step by ``ldmatrix.x4`` from shared memory
   in the GEMM's ratio of 8 ldmatrix per 32 mma ("ldsm").  Warps per SM 8 (one CTA of 8 or two of 4)
   and 16 (64x32 warp tiles, since the register file then allows only ~128 per thread);
2. the SM clock and board power while each kernel runs: ``nvidia-smi`` samples every 20 ms during a
   loop of back-to-back launches lasting ``--seconds``, for the peak kernels, cuBLAS and wavec's
   mma.sync GEMM at size^3.

Operands are random normal values (the tensor cores' power depends on the bits).  Prints one table.
"""

import argparse
import statistics
import subprocess
import time

import cupy
import torch

SRC = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#define STR2(x) #x
#define STR(x) STR2(x)
extern "C" __global__ void __launch_bounds__(WARPS * 32) peak(float* out, const unsigned* operands, int iters) {
  __shared__ __align__(16) unsigned smem[8 * 32 * 4 * 2];
  const int lane = threadIdx.x & 31, tid = threadIdx.x + blockIdx.x * blockDim.x;
  unsigned a[MT][4], b[NT][2];
  float acc[MT][NT][4];
  #pragma unroll
  for (int i = 0; i < MT; ++i)
    #pragma unroll
    for (int r = 0; r < 4; ++r) a[i][r] = operands[(i * 4 + r) * 32 + lane];
  #pragma unroll
  for (int j = 0; j < NT; ++j)
    #pragma unroll
    for (int r = 0; r < 2; ++r) b[j][r] = operands[512 + (j * 2 + r) * 32 + lane];
  #pragma unroll
  for (int i = 0; i < MT; ++i)
    #pragma unroll
    for (int j = 0; j < NT; ++j)
      #pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;
  for (int x = threadIdx.x; x < 8 * 32 * 4 * 2; x += blockDim.x) smem[x] = operands[x % 1024];
  __syncthreads();
  // Rows of 16 bytes, lane l of each 8-lane phase reads row l: conflict-free, like the swizzled tiles.
  const unsigned base = (unsigned)__cvta_generic_to_shared(smem) + ((threadIdx.x >> 5) & 1) * 4096 + lane * 16;
  for (int it = 0; it < iters; ++it) {
    #pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (LDSM) {
        #pragma unroll
        for (int i = 0; i < MT; i += 1)
          asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                       : "=r"(a[i][0]), "=r"(a[i][1]), "=r"(a[i][2]), "=r"(a[i][3]) : "r"(base + i * 512));
        #pragma unroll
        for (int j = 0; j < NT; j += 2)
          asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                       : "=r"(b[j][0]), "=r"(b[j][1]), "=r"(b[j + 1][0]), "=r"(b[j + 1][1])
                       : "r"(base + 2048 + j * 256));
      }
      #pragma unroll
      for (int i = 0; i < MT; ++i)
        #pragma unroll
        for (int j = 0; j < NT; ++j)
          asm("mma.sync.aligned.m16n8k16.row.col.f32." STR(DT) "." STR(DT) ".f32 {%0,%1,%2,%3}, "
              "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
              : "+f"(acc[i][j][0]), "+f"(acc[i][j][1]), "+f"(acc[i][j][2]), "+f"(acc[i][j][3])
              : "r"(a[i][0]), "r"(a[i][1]), "r"(a[i][2]), "r"(a[i][3]), "r"(b[j][0]), "r"(b[j][1]));
    }
  }
  float s = 0.f;
  #pragma unroll
  for (int i = 0; i < MT; ++i)
    #pragma unroll
    for (int j = 0; j < NT; ++j)
      #pragma unroll
      for (int r = 0; r < 4; ++r) s += acc[i][j][r];
  out[tid] = s;
}
"""

# name: (warps per CTA, CTAs per SM, MT, NT, ldmatrix)
VARIANTS = {
    "regs 8w x1": (8, 1, 4, 8, 0),
    "regs 4w x2": (4, 2, 4, 8, 0),
    "regs 16w x1": (16, 1, 4, 4, 0),
    "ldsm 8w x1": (8, 1, 4, 8, 1),
    "ldsm 4w x2": (4, 2, 4, 8, 1),
}


class Clocks:
    """``nvidia-smi`` sampling the SM clock (MHz) and board power (W) while the block runs."""

    def __enter__(self) -> "Clocks":
        self.proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits", "-lms", "20"],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(0.3)
        return self

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        rows = [line.split(",") for line in self.proc.communicate()[0].splitlines() if "," in line]
        rows = rows[len(rows) // 4 :]  # the ramp-up before the loop's clocks settle
        self.mhz = statistics.median(float(r[0]) for r in rows) if rows else float("nan")
        self.watts = statistics.median(float(r[1]) for r in rows) if rows else float("nan")


def _loop(fn, seconds: float) -> tuple[float, float, float]:
    """Median ms of back-to-back calls for ``seconds``, with the median clock and power meanwhile."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    with Clocks() as clk:
        t_end = time.perf_counter() + seconds
        while time.perf_counter() < t_end:
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
    return statistics.median(times), clk.mhz, clk.watts


def _peak_rows(dtype: str, seconds: float) -> list:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    ops = cupy.asarray(
        torch.randn(2048, dtype=torch.float16 if dtype == "f16" else torch.bfloat16)
        .view(torch.int32)
        .numpy()
        .view("uint32")
    )
    rows = []
    for name, (warps, per_sm, mt, nt, ldsm) in VARIANTS.items():
        opts = (
            "-arch=sm_90",
            f"-DWARPS={warps}",
            f"-DMT={mt}",
            f"-DNT={nt}",
            f"-DLDSM={ldsm}",
            f"-DDT={dtype}",
            "-std=c++17",
        )
        kern = cupy.RawKernel(SRC, "peak", options=opts)
        grid, iters = sms * per_sm, 2000
        out = cupy.empty(grid * warps * 32, dtype=cupy.float32)
        ms, mhz, watts = _loop(lambda: kern((grid,), (warps * 32,), (out, ops, cupy.int32(iters))), seconds)
        flops = 2.0 * 16 * 8 * 16 * mt * nt * 4 * iters * grid * warps
        rows.append((f"mma.sync peak {name}", flops / ms / 1e9, mhz, watts, kern.num_regs))
    return rows


def _gemm_rows(dtype: str, n: int, seconds: float) -> list:
    import wavec as wc
    from wavec.kernels import gemm as gm
    from wavec.tuning.plan import gemm_config

    tdt = torch.float16 if dtype == "f16" else torch.bfloat16
    a, b = torch.randn(n, n, device="cuda", dtype=tdt), torch.randn(n, n, device="cuda", dtype=tdt)
    c = torch.empty(n, n, device="cuda", dtype=tdt)
    subs, waves = gemm_config(n, n, n)
    wdt, mma = {"f16": (wc.f16, wc.MMAType.NV_F32_16x8x16_F16), "bf16": (wc.bf16, wc.MMAType.NV_F32_16x8x16_BF16)}[
        dtype
    ]
    kern = wc.compile(gm.make_gemm(wdt, mma_type=mma, waves=waves, out_dtype=wdt), subs, backend="cuda")
    flops = 2.0 * n**3
    rows = []
    for name, fn in (("cuBLAS", lambda: torch.matmul(a, b.T)), ("wavec mma.sync", lambda: kern(a, b, c))):
        ms, mhz, watts = _loop(fn, seconds)
        rows.append((f"{name} {n}^3", flops / ms / 1e9, mhz, watts, None))
    ref = a.float() @ b.float().T
    err = float((c.float() - ref).norm() / ref.norm())
    assert err < 1e-2, f"wavec GEMM wrong: relative error {err}"
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--dtypes", default="f16,bf16")
    ap.add_argument("--seconds", type=float, default=1.5)
    args = ap.parse_args()
    print(f"{'dtype':5} {'kernel':32} {'TFLOP/s':>8} {'SM MHz':>7} {'W':>6} {'regs':>5}")
    for dtype in args.dtypes.split(","):
        for name, tf, mhz, watts, regs in _peak_rows(dtype, args.seconds) + _gemm_rows(dtype, args.size, args.seconds):
            print(f"{dtype:5} {name:32} {tf:8.1f} {mhz:7.0f} {watts:6.0f} {regs if regs else '':>5}", flush=True)


if __name__ == "__main__":
    main()
