"""The cost of one call of the launch function itself, ctypes against the C launcher (``WAVEC_LAUNCH_API``,
``wavec.runtime.c_launcher``), on any machine: both call the C launcher's empty function of cuLaunchKernel's
signature (``noop_address``) with the values a prepared launch passes (ctypes: ``c_void_p`` pointers and no
argtypes, as ``launcher._libcuda_launch``; C: ints), best of five rounds of 200000 calls, in microseconds.

    python benchmarks/launch_overhead.py
"""

from __future__ import annotations

import ctypes
import time

from wavec.runtime import c_launcher


def best_us(call, calls: int = 200_000, rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, (time.perf_counter() - t) / calls * 1e6)
    return best


def main() -> None:
    mod = c_launcher.module()
    mod.set_target(mod.noop_address())
    noop = ctypes.CFUNCTYPE(ctypes.c_int)(mod.noop_address())  # no argtypes: the library's ctypes call
    fn, stream, params = 0x7F12_3456_7000, 0x5555_AAAA_0010, 0x7F00_0000_1000
    c_fn, c_stream, c_params = ctypes.c_void_p(fn), ctypes.c_void_p(stream), ctypes.c_void_p(params)
    t_ctypes = best_us(lambda: noop(c_fn, 132, 1, 1, 128, 1, 1, 0, c_stream, c_params, None))
    t_c = best_us(lambda: mod.launch(fn, 132, 1, 1, 128, 1, 1, 0, stream, params, None))
    print(f"one launch call: ctypes {t_ctypes:.3f} us, C launcher {t_c:.3f} us ({t_ctypes - t_c:.3f} us saved)")


if __name__ == "__main__":
    main()
