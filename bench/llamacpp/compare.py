#!/usr/bin/env python3
"""longserve vs llama.cpp on the CPU, on the same GGUF files.

For each model, alternates runs of longserve's bench_generation and llama.cpp's llama-bench
(built by bench/llamacpp/build_llama_bench.sh), both at --threads, and reports medians of:
  - decode tok/s at each depth (llama-bench `-n N -d D`; bench_generation decode steps after a
    prefill of D tokens),
  - prefill tok/s of a 512-token chunk at each depth (llama-bench `-p 512 -d D`; bench_generation
    `--chunk 512` timed after D tokens),
and, with --lserve-depth, longserve's decode with `--attention lserve` at that depth.

  python3 bench/llamacpp/compare.py --llama-bench /tmp/llamacpp/build/bin/llama-bench \
      --bench-generation build/bench_generation --threads 2 --repeats 3 \
      --model smollm2-q4_1=/path/SmolLM2.gguf:0,4096 --model bench30m-q8_0=/tmp/b30m-q8_0.gguf:0,4096,16384 \
      --lserve-depth 16384 --out bench/results/cpu/llamacpp-raw.json

Prints one markdown table; raw per-run numbers go to --out.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time


def run(cmd: list[str], timeout: float) -> str:
    print("+", " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return p.stdout


def longserve(args, path: str, depths: list[int], attention: str = "dense") -> dict:
    out = run([args.bench_generation, "--model", path, "--threads", str(args.threads),
               "--contexts", ",".join(map(str, depths)), "--chunk", "512",
               "--decode-steps", str(args.decode_steps), "--repeats", "1", "--no-bandwidth",
               "--attention", attention], args.timeout)
    rows = {}
    for line in out.splitlines():
        m = re.match(r"\|\s*(\d+)\s*\|\s*([\d.]+)\s*\|\s*([\d.]+)\s*\|", line)
        if m:
            rows[int(m.group(1))] = {"pp512": float(m.group(2)), "tg": float(m.group(3))}
    if set(rows) != set(depths):
        raise RuntimeError(f"bench_generation printed depths {sorted(rows)}:\n{out}")
    return rows


def llama_bench(args, path: str, depths: list[int]) -> dict:
    out = run([args.llama_bench, "-m", path, "-t", str(args.threads), "-p", "512",
               "-n", str(args.decode_steps), "-d", ",".join(map(str, depths)), "-r", "1",
               "-o", "json"], args.timeout)
    rows: dict[int, dict] = {d: {} for d in depths}
    for t in json.loads(out):
        d = int(t.get("n_depth", 0))
        if t["n_prompt"] > 0 and t["n_gen"] == 0:
            rows[d]["pp512"] = float(t["avg_ts"])
        elif t["n_gen"] > 0 and t["n_prompt"] == 0:
            rows[d]["tg"] = float(t["avg_ts"])
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--bench-generation", default="build/bench_generation")
    ap.add_argument("--model", action="append", required=True, help="LABEL=FILE.gguf:DEPTH,DEPTH")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--decode-steps", type=int, default=32)
    ap.add_argument("--lserve-depth", type=int, default=0)
    ap.add_argument("--lserve-model", default="", help="label of the model lserve runs on")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    models = []
    for spec in args.model:
        label, rest = spec.split("=", 1)
        path, depths = rest.rsplit(":", 1)
        models.append((label, path, [int(d) for d in depths.split(",")]))

    raw: dict = {"threads": args.threads, "decode_steps": args.decode_steps, "runs": []}
    for rep in range(args.repeats):
        for label, path, depths in models:
            # Alternate which engine goes first, so drift of the shared machine hits both alike.
            order = ["longserve", "llama.cpp"] if rep % 2 == 0 else ["llama.cpp", "longserve"]
            for engine in order:
                t0 = time.time()
                rows = longserve(args, path, depths) if engine == "longserve" else llama_bench(args, path, depths)
                raw["runs"].append({"rep": rep, "model": label, "engine": engine, "rows": rows,
                                    "seconds": time.time() - t0})
            if args.lserve_depth and label == (args.lserve_model or models[0][0]):
                rows = longserve(args, path, [args.lserve_depth], attention="lserve")
                raw["runs"].append({"rep": rep, "model": label, "engine": "longserve-lserve",
                                    "rows": rows})
        if args.out:
            with open(args.out, "w") as f:
                json.dump(raw, f, indent=1)

    def med(model, engine, depth, key):
        vals = [r["rows"][depth][key] for r in raw["runs"]
                if r["model"] == model and r["engine"] == engine and depth in r["rows"]
                and key in r["rows"][depth]]
        return (statistics.median(vals), len(vals)) if vals else (float("nan"), 0)

    print(f"| model | depth | longserve decode tok/s | llama.cpp decode tok/s | ratio | "
          f"longserve pp512 tok/s | llama.cpp pp512 tok/s | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, _, depths in models:
        for d in depths:
            ltg, n = med(label, "longserve", d, "tg")
            ctg, _ = med(label, "llama.cpp", d, "tg")
            lpp, _ = med(label, "longserve", d, "pp512")
            cpp, _ = med(label, "llama.cpp", d, "pp512")
            print(f"| {label} | {d} | {ltg:.1f} | {ctg:.1f} | {ltg / ctg:.2f}× | {lpp:.0f} | "
                  f"{cpp:.0f} | {lpp / cpp:.2f}× |")
        if args.lserve_depth and label == (args.lserve_model or models[0][0]):
            ltg, n = med(label, "longserve-lserve", args.lserve_depth, "tg")
            ctg, _ = med(label, "llama.cpp", args.lserve_depth, "tg")
            print(f"| {label} (lserve) | {args.lserve_depth} | {ltg:.1f} | {ctg:.1f} | "
                  f"{ltg / ctg:.2f}× | | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
