"""Does ptxas's L2 prefetch hint on wavec's cp.async copies cost bandwidth?  (H100 probe, issue 5.)

    python benchmarks/ltc_probe.py [--size 4096] [--configs 128x256x64x3x2x4,...]

ptxas 13.0 marks the ``LDGSTS`` of wavec's mma.sync GEMMs ``.LTC128B`` (an L2 128-byte fetch hint; Triton's
have none), and ncu showed wavec's copies moving ~1.5x Triton's L2 bytes.  This times each tile twice in
one run: as compiled, and with the hint cleared in the cubin (bit 8 of the high word of every LDGSTS,
opcode 0xfae; ``nvdisasm`` shows the same instructions without ``.LTC128B``), beside cuBLAS.  Result
(``results/mma_sync_h100/ltc128b_probe.log``): no difference beyond noise; the extra bytes came from the
padded shared rows (``passes/swizzle_shared.py``).
"""

import argparse
import sys

import torch
from triton.testing import do_bench

import wavec as wc
import wavec.codegen.ptxas as ptxas_mod
from wavec.kernels import gemm as gm

LDGSTS_OPCODE, LTC128B_BIT = 0xFAE, 8
_assemble = ptxas_mod.assemble
_strip = {"on": False}


def strip_ltc128b(cubin: bytes) -> tuple[bytes, int]:
    """The cubin with every LDGSTS's L2 prefetch hint cleared, and how many were cleared."""
    out, count = bytearray(cubin), 0
    for off in range(0, len(out) - 15, 16):
        lo = int.from_bytes(out[off : off + 8], "little")
        hi = int.from_bytes(out[off + 8 : off + 16], "little")
        if lo & 0xFFF == LDGSTS_OPCODE and hi >> LTC128B_BIT & 1:
            out[off + 8 : off + 16] = (hi & ~(1 << LTC128B_BIT)).to_bytes(8, "little")
            count += 1
    return bytes(out), count


def _assemble_maybe_stripped(ptx: str, arch: str):
    image, info = _assemble(ptx, arch)
    if _strip["on"]:
        image, count = strip_ltc128b(image)
        print(f"  cleared .LTC128B on {count} LDGSTS", file=sys.stderr)
    return image, info


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--configs", default="128x256x64x3x2x4,128x128x64x3x2x2,256x128x64x3x4x2")
    args = ap.parse_args()
    ptxas_mod.assemble = _assemble_maybe_stripped
    n, flops = args.size, 2 * args.size**3 / 1e9
    for dt, wdt, mma in (
        ("f16", wc.f16, wc.MMAType.NV_F32_16x8x16_F16),
        ("bf16", wc.bf16, wc.MMAType.NV_F32_16x8x16_BF16),
    ):
        tdt = torch.float16 if dt == "f16" else torch.bfloat16
        a, b = torch.randn(n, n, device="cuda", dtype=tdt), torch.randn(n, n, device="cuda", dtype=tdt)
        ref = a.float() @ b.float().T
        c = torch.empty(n, n, device="cuda", dtype=tdt)
        cublas = do_bench(lambda: torch.matmul(a, b.T), warmup=50, rep=300, return_mode="median")
        print(f"{dt} {n} cuBLAS {flops / cublas:.1f}", flush=True)
        for cfg in args.configs.split(","):
            bm, bn, bk, st, w0, w1 = map(int, cfg.split("x"))
            subs = {gm.BLOCK_M: bm, gm.BLOCK_N: bn, gm.BLOCK_K: bk, gm.NUM_STAGES: st, gm.GROUP_M: 8}
            for strip in (False, True):
                _strip["on"] = strip
                k = wc.compile(
                    gm.make_gemm(wdt, mma_type=mma, waves=(w0, w1), out_dtype=wdt), subs, backend="cuda", cache=False
                )
                c.fill_(float("nan"))
                k(a, b, c)
                err = float((c.float() - ref).norm() / ref.norm())
                ms = do_bench(lambda: k(a, b, c), warmup=50, rep=300, return_mode="median")
                print(
                    f"{dt} {n} {cfg} {'noLTC' if strip else 'LTC  '} {flops / ms:7.1f} TF  x{cublas / ms:.3f}  "
                    f"err {err:.1e}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
