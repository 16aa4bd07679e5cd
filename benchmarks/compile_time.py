"""Cold compile time of the library GEMM and kernels, each in a fresh Python process (cache disabled).

Runs anywhere (no GPU needed): the time covers import, tracing, the pass pipeline, MLIR emission, the
in-process IREE compile and ptxas.  ``python benchmarks/compile_time.py``
"""

import json
import subprocess
import sys

CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import wavec as wc
from wavec.kernels.gemm import make_gemm
from wavec.tuning.plan import DEFAULT_SUBS, gemm_config, schedule
from wavec.kernels.elementwise import DEFAULT_SUBS as EW, make_scale_shift
t_import = time.perf_counter() - t0
name = sys.argv[1]
if name == "gemm_default":
    kern, subs = make_gemm(), DEFAULT_SUBS
elif name == "gemm_heuristic_4096":
    subs, waves = gemm_config(4096, 4096, 4096)
    kern = make_gemm(waves=waves)
elif name == "gemm_wgmma_4096":
    from wavec.tuning.plan import WGMMA_FOR_DTYPE, wgmma_config
    subs, waves = wgmma_config(4096, 4096, 4096)
    kern = make_gemm(mma_type=WGMMA_FOR_DTYPE["f16"], waves=waves)
elif name == "gemm_wgmma_ws_256x128":
    from wavec.kernels.gemm import BLOCK_M, BLOCK_N
    from wavec.tuning.plan import WGMMA_FOR_DTYPE, wgmma_config
    subs, waves = wgmma_config(4096, 4096, 4096)
    subs = {**subs, BLOCK_M: 256, BLOCK_N: 128}
    sched = schedule(prefetch_fragments=True, warp_specialize=True)
    kern = make_gemm(mma_type=WGMMA_FOR_DTYPE["f16"], waves=waves, sched=sched)
elif name.startswith("attention_d128"):
    from wavec.kernels.attention import SPLIT_EPILOGUE, attention_config, make_attention
    mma = "wgmma" if name.endswith("wgmma") else "mma_sync"
    subs, waves = attention_config(128, mma=mma)
    kern = make_attention(waves=waves, mma=mma, split_epilogue=SPLIT_EPILOGUE[mma])  # as attention() runs it
else:
    kern, subs = make_scale_shift(), EW
target = "sm_90a" if "wgmma" in name else "sm_90"
t1 = time.perf_counter()
k = wc.compile(kern, subs, target=target, backend="cuda", cache=False)
t2 = time.perf_counter()
print(json.dumps({"kernel": name, "import_s": t_import, "compile_s": t2 - t1, "total_s": t2 - t0,
                  "format": k.artifact.format, "registers": k.metadata.registers}))
"""


def main() -> None:
    rows = []
    for name in (
        "scale_shift",
        "gemm_default",
        "gemm_heuristic_4096",
        "gemm_wgmma_4096",
        "gemm_wgmma_ws_256x128",
        "attention_d128",
        "attention_d128_wgmma",
    ):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, name],
            capture_output=True,
            text=True,
            check=True,
            env={"WAVEC_CACHE_DISABLE": "1", **__import__("os").environ},
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{'kernel':22} {'import s':>9} {'compile s':>10} {'total s':>8} {'format':>7}")
    for r in rows:
        print(f"{r['kernel']:22} {r['import_s']:9.2f} {r['compile_s']:10.2f} {r['total_s']:8.2f} {r['format']:>7}")


if __name__ == "__main__":
    main()
