#!/usr/bin/env python3
"""Where ptxas put the softmax of the wgmma prefill kernels' main loop (no GPU needed).

Compiles one prefill translation unit (default: the warp-specialised head_dim 128 kernel) with
nvcc (sm_90a, -O3), disassembles it with cuobjdump -sass and prints, per kernel, the order of the
events that decide the overlap of softmax and tensor cores: S (an HGMMA of Q K^T), PV (an HGMMA
of P V; `!` marks the one that commits the group), WAITn (WARPGROUP.DEPBAR.LE gsb0, n: wait until
at most n groups are pending), ARR (an mbarrier arrive), BAR (a named barrier), eXpY (X
exponentials, MUFU.EX2, and Y conversions of P to bf16/f16, F2FP, in a row) and LOOP (a backward
branch). The softmax of S_j overlaps P_{j-1} V_{j-1} only where its exponentials sit between
WAIT1 and WAIT0; docs/cuda-prefill-wgmma.md says what was found and measured.

Usage (repository root): python3 scripts/gpu/prefill_sass_order.py
    [--source src/kernels/cuda/attention_prefill_wgmma_ws_d128.cu] [--match bfloat16]
nvcc from PATH or $NVCC; cuobjdump from PATH or $CUOBJDUMP (the CUDA toolkit's, or PyPI's
nvidia-cuda-cuobjdump).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile


def tool(name, env):
    path = os.environ.get(env) or shutil.which(name)
    if not path:
        sys.exit(f"{name} not found (PATH or ${env})")
    return path


def events(sass_of_kernel):
    ev = []
    for line in sass_of_kernel.split("\n"):
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if not m:
            continue
        addr, ins = int(m.group(1), 16), m.group(2)
        if "HGMMA" in ins:
            ev.append(("PV" if "tnspB" in ins else "S") + ("!" if "gsb0" in ins else ""))
        elif "WARPGROUP.DEPBAR" in ins:
            ev.append("WAIT" + ins[-1])
        elif "MUFU.EX2" in ins:
            ev.append("e")
        elif "F2FP" in ins:
            ev.append("p")
        elif "SYNCS.ARRIVE" in ins:
            ev.append("ARR")
        elif "BAR.SYNC" in ins or "BAR.ARV" in ins:
            ev.append("BAR")
        elif re.search(r"BRA 0x", ins) and int(ins.split("0x")[-1], 16) < addr:
            ev.append("LOOP")
    s = " ".join(ev) + " "
    s = re.sub(r"((?:e |p )+)", lambda m: "e%dp%d " % (m.group(1).count("e "), m.group(1).count("p ")), s)
    s = re.sub(r"(S )+", "S* ", s)
    s = re.sub(r"(PV )+", "PV* ", s)
    return re.sub(r"(LOOP )+", "LOOP ", s).strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", default="src/kernels/cuda/attention_prefill_wgmma_ws_d128.cu")
    ap.add_argument("--match", default="bfloat16", help="only kernels whose name contains this")
    a = ap.parse_args()
    nvcc, cuobjdump = tool("nvcc", "NVCC"), tool("cuobjdump", "CUOBJDUMP")
    with tempfile.TemporaryDirectory() as work:
        cubin = os.path.join(work, "k.cubin")
        r = subprocess.run([nvcc, "-std=c++20", "-arch=sm_90a", "-O3", "--expt-relaxed-constexpr",
                            "-cubin", "-Isrc", "-o", cubin, a.source], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(r.stderr)
        sass = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True,
                              check=True).stdout
    for f in re.split(r"\n\s*Function : ", sass)[1:]:
        name = f.split("\n", 1)[0]
        if a.match in name:
            print(name)
            print("   ", events(f))


if __name__ == "__main__":
    main()
