"""Instruction mix of the main loop of mma.sync GEMM kernels: wavec's against Triton's (held to mma.sync).

    DISABLE_MMA_V3=1 python benchmarks/sass_mix.py --out DIR [--wavec 256x128x64x3x4x2:pf,...]
                                                   [--triton 128x128x64x4x4,...] [--run]

Dumps each kernel's cubin to DIR, disassembles it with ``cuobjdump -sass`` and counts the opcodes of the
loop with the most ``HMMA``s (the K loop): the per-iteration cost of everything that is not an mma is what
separates two kernels with the same tile and occupancy.  ``--run`` launches each kernel once at 4096^3
(f16) so that ``ncu`` wrapped around this script profiles them.  Triton's tile is BMxBNxBKxSTAGESxWARPS.
"""

import argparse
import collections
import os
import pathlib
import re
import shutil
import subprocess
import sys

import torch

INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")
LABEL = re.compile(r"^\s*(\.L_x_\d+):")
TARGET = re.compile(r"`\((\.L_x_\d+)\)|BRA\s+(0x[0-9a-f]+)")
GROUPS = {
    "HMMA": "HMMA",
    "LDSM": "LDSM",
    "LDGSTS": "LDGSTS",
    "BAR": "BAR",
    "DEPBAR": "DEPBAR",
    "LDGDEPBAR": "DEPBAR",
    "IMAD": "int",
    "IADD3": "int",
    "LEA": "int",
    "LOP3": "int",
    "SHF": "int",
    "ISETP": "int",
    "SEL": "int",
    "IMAD.MOV": "int",
    "MOV": "move",
    "BRA": "branch",
}


def loop_mix(sass: str) -> collections.Counter:
    """Opcode counts of the backward-branch loop with the most HMMA instructions."""
    insns, labels = [], {}
    pending = []
    for line in sass.splitlines():
        lab = LABEL.match(line)
        if lab:
            pending.append(lab.group(1))
            continue
        m = INSN.search(line)
        if m:
            idx = len(insns)
            for p in pending + [hex(int(m.group(1), 16))]:  # nvdisasm labels, cuobjdump addresses
                labels[p] = idx
            pending = []
            t = TARGET.search(line)
            target = None if t is None else t.group(1) or hex(int(t.group(2), 16))
            insns.append((m.group(2), target))
    best: collections.Counter = collections.Counter()
    for i, (op, target) in enumerate(insns):
        if op.startswith("BRA") and target in labels and labels[target] <= i:
            mix = collections.Counter(GROUPS.get(o.split(".")[0], "other") for o, _ in insns[labels[target] : i + 1])
            if mix["HMMA"] > best["HMMA"]:
                best = mix
    return best


def _sass(cubin: pathlib.Path) -> str:
    tool = ["nvdisasm", "-c"] if shutil.which("nvdisasm") else ["cuobjdump", "-sass"]
    return subprocess.run([*tool, str(cubin)], capture_output=True, text=True, check=True).stdout


def _wavec(spec: str, out: pathlib.Path, run: bool) -> tuple[str, pathlib.Path, int]:
    import wavec as wc
    from wavec.kernels import gemm as gm
    from wavec.tuning.plan import schedule

    cfg, _, flag = spec.partition(":")
    bm, bn, bk, st, w0, w1 = (int(x) for x in cfg.split("x"))
    subs = {gm.BLOCK_M: bm, gm.BLOCK_N: bn, gm.BLOCK_K: bk, gm.NUM_STAGES: st, gm.GROUP_M: 8}
    k = wc.compile(
        gm.make_gemm(wc.f16, waves=(w0, w1), out_dtype=wc.f16, sched=schedule(prefetch_fragments=flag == "pf")),
        subs,
        backend="cuda",
        cache=False,
    )
    path = out / f"wavec_{spec.replace(':', '_')}.cubin"
    path.write_bytes(k.artifact.binary)
    if run:
        a, b = (torch.randn(4096, 4096, device="cuda", dtype=torch.float16) for _ in range(2))
        k(a, b, torch.empty(4096, 4096, device="cuda", dtype=torch.float16))
    return f"wavec {spec}", path, k.metadata.registers


def _triton(spec: str, out: pathlib.Path, run: bool) -> tuple[str, pathlib.Path, int]:
    import triton
    from triton_matmul import _matmul_kernel

    bm, bn, bk, st, warps = (int(x) for x in spec.split("x"))
    n = 4096 if run else 1024
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.float16) for _ in range(2))
    c = torch.empty(n, n, device="cuda", dtype=torch.float16)
    h = _matmul_kernel.fn[(triton.cdiv(n, bm) * triton.cdiv(n, bn),)](
        a, b, c, n, n, n, n, 1, n, 1, n, 1, BM=bm, BN=bn, BK=bk, GROUP=8, num_warps=warps, num_stages=st
    )
    path = out / f"triton_{spec}.cubin"
    path.write_bytes(h.asm["cubin"])
    inst = "wgmma" if "wgmma" in h.asm["ptx"] else "mma.sync"
    return f"triton {spec} ({inst})", path, h.n_regs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--wavec", default="256x128x64x3x4x2,256x128x64x3x4x2:pf,128x128x64x3x2x2:pf")
    ap.add_argument("--triton", default="128x128x64x4x4,256x128x64x3x8")
    ap.add_argument("--run", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kernels = [_wavec(s, out, args.run) for s in args.wavec.split(",") if s]
    kernels += [_triton(s, out, args.run) for s in args.triton.split(",") if s]
    cols = ["HMMA", "LDSM", "LDGSTS", "BAR", "DEPBAR", "int", "move", "branch", "other"]
    print(f"{'kernel':40} {'regs':>4} " + " ".join(f"{c:>6}" for c in cols) + f" {'total':>6} {'non-HMMA/HMMA':>13}")
    for name, path, regs in kernels:
        mix = loop_mix(_sass(path))
        total = sum(mix.values())
        ratio = (total - mix["HMMA"]) / max(mix["HMMA"], 1)
        print(f"{name:40} {regs!s:>4} " + " ".join(f"{mix[c]:6d}" for c in cols) + f" {total:6d} {ratio:13.2f}")


if __name__ == "__main__":
    main()
