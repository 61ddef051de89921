#!/usr/bin/env python3
"""Static SASS per key of the decode attention kernel's main loop (no GPU needed).

Compiles only the decode kernel (attention_decode.cuh) for one head_dim, bf16 queries, untiered
and tiered, per KV page format, with nvcc (sm_90a, -O3, -Xptxas -v), disassembles the cubin with
cuobjdump -sass, and reports per kernel: the main loop's static instructions, the registers and
spills ptxas gives, and instructions per key.

Counting: the control-flow graph of the kernel's SASS (basic blocks split at branch targets and
after BRA / EXIT / RET); for every back edge (a branch to an earlier address) its natural loop
(the header plus every block that reaches the edge's source without passing the header); the main
loop is the one with the most HMMA (two iterations of the kernel's step, unrolled). Its
instructions are counted without NOPs and without the blocks reached only through BRA.DIV (the
warp shuffles' divergent fallbacks); per key = that count / (2 * keys per iteration). Cold paths
inside the loop (masks of partial blocks, the output's rescale, the table lookup's division for
page sizes that are not powers of two) are counted too: a static measure.

Usage (repository root): python3 scripts/gpu/decode_sass_per_key.py [--head-dim 128]
    [--formats bf16,fp8,int8,int4] [--quant-keys 128,64] [--work DIR]
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

ENUM = {"bf16": "kNone", "fp8": "kFp8", "int8": "kInt8", "int4": "kInt4"}


def tool(name, env):
    path = os.environ.get(env) or shutil.which(name)
    if not path:
        sys.exit(f"{name} not found (PATH or ${env})")
    return path


def compile_kernel(nvcc, work, d, fmt, keys):
    quant = ENUM[fmt]
    tiered = ["false"] if fmt == "bf16" else ["false", "true"]
    extra = "" if fmt == "bf16" else f", {keys}"
    lines = ['#include "kernels/cuda/attention_decode.cuh"', "namespace ls::kernels::cuda {"]
    for t in tiered:
        lines.append(f"template __global__ void decode_attention_kernel<{d}, __nv_bfloat16, false, "
                     f"{t}, KvQuant::{quant}{extra}>(const AttentionParams, const DecodeArgs);")
    lines.append("}")
    src = os.path.join(work, f"decode_{d}_{fmt}_{keys}.cu")
    with open(src, "w") as f:
        f.write("\n".join(lines) + "\n")
    cubin = src[:-3] + ".cubin"
    r = subprocess.run([nvcc, "-std=c++20", "-arch=sm_90a", "-O3", "--expt-relaxed-constexpr",
                        "-lineinfo", "-Xptxas=-v", "-cubin", "-Isrc", "-o", cubin, src],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(r.stderr)
    return cubin, r.stderr


def loops(cuobjdump, cubin):
    sass = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True,
                          check=True).stdout
    for f in re.split(r"\n\s*Function : ", sass)[1:]:
        name = f.split("\n", 1)[0].strip()
        ins = []
        for line in f.split("\n"):
            m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
            if m:
                ins.append((int(m.group(1), 16), m.group(2)))
        pos = {a: k for k, (a, _) in enumerate(ins)}

        def target(t):
            m = re.search(r"\b(BRA|BRX)\b.*?0x([0-9a-f]+)\s*$", t)
            return int(m.group(2), 16) if m else None

        leaders = {0}
        for k, (_, t) in enumerate(ins):
            tg = target(t)
            if tg is not None and tg in pos:
                leaders.add(pos[tg])
            if re.search(r"\b(BRA|EXIT|RET|BRX)\b", t) and k + 1 < len(ins):
                leaders.add(k + 1)
        starts = sorted(leaders)
        blocks, blk_of = [], {}
        for b, s in enumerate(starts):
            e = starts[b + 1] if b + 1 < len(starts) else len(ins)
            blocks.append((s, e))
            for k in range(s, e):
                blk_of[k] = b
        succ = {b: [] for b in range(len(blocks))}
        div = {b: set() for b in range(len(blocks))}
        for b, (s, e) in enumerate(blocks):
            last = ins[e - 1][1]
            tg = target(last)
            pred = last.startswith("@")
            if tg is not None and tg in pos:
                succ[b].append(blk_of[pos[tg]])
                if "BRA.DIV" in last:
                    div[b].add(blk_of[pos[tg]])
            ends = re.search(r"\b(EXIT|RET)\b", last) and not pred
            jumps = re.search(r"\bBRA\b", last) and not pred and ".DIV" not in last
            if not ends and not jumps and e < len(ins):
                succ[b].append(blk_of[e])
        preds = {b: [] for b in succ}
        for b, ss in succ.items():
            for x in ss:
                preds[x].append(b)
        best = None
        for b, ss in succ.items():
            for h in ss:
                if blocks[h][0] > blocks[b][0]:
                    continue
                loop, stack = {h}, [b]
                while stack:
                    x = stack.pop()
                    if x not in loop:
                        loop.add(x)
                        stack.extend(preds[x])
                hm = sum(1 for x in loop for k in range(*blocks[x]) if "HMMA" in ins[k][1])
                if best is None or hm > best[0]:
                    best = (hm, h, loop)
        hm, h, loop = best
        hot, stack = set(), [h]
        while stack:
            x = stack.pop()
            if x in hot or x not in loop:
                continue
            hot.add(x)
            stack.extend(y for y in succ[x] if y not in div[x])
        count = sum(1 for x in hot for k in range(*blocks[x]) if not ins[k][1].startswith("NOP"))
        spills = sum(1 for x in loop for k in range(*blocks[x])
                     if re.search(r"\b(LDL|STL)\b", ins[k][1]))
        yield name, count, hm, spills


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--formats", default="bf16,fp8,int8,int4")
    ap.add_argument("--quant-keys", default="128,64")
    ap.add_argument("--work", default="")
    args = ap.parse_args()
    nvcc, cuobjdump = tool("nvcc", "NVCC"), tool("cuobjdump", "CUOBJDUMP")
    work = args.work or tempfile.mkdtemp(prefix="decode_sass_")
    print("| format | keys / iteration | tiered | loop instructions | per key | HMMA | "
          "LDL/STL in loop | registers, spills (ptxas) |")
    print("|---|---|---|---|---|---|---|---|")
    for fmt in args.formats.split(","):
        for keys in ([64] if fmt == "bf16" else [int(k) for k in args.quant_keys.split(",")]):
            cubin, log = compile_kernel(nvcc, work, args.head_dim, fmt, keys)
            for name, count, hm, ls in sorted(loops(cuobjdump, cubin)):
                tiered = re.search(r"Lb0ELb(\d)E", name).group(1) == "1"
                # ptxas reports entries in its own order: match by mangled name.
                r = re.search(re.escape(name) + r".*?\n.*?(\d+) bytes spill stores, (\d+) bytes "
                              r"spill loads\n.*?Used (\d+) registers", log, re.S)
                rs = f"{r.group(3)}, {r.group(1)} / {r.group(2)} B" if r else "?"
                print(f"| {fmt} | {keys} | {'yes' if tiered else 'no'} | {count} | "
                      f"{count / (2 * keys):.2f} | {hm} | {ls} | {rs} |")


if __name__ == "__main__":
    main()
