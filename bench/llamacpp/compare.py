#!/usr/bin/env python3
"""longserve vs llama.cpp on the CPU, on the same GGUF files.

For each model, alternates runs of longserve's bench_generation and llama.cpp's llama-bench
(built by bench/llamacpp/build_llama_bench.sh), both at --threads, and reports medians of:
  - decode tok/s at each depth (llama-bench `-n N -d D`; bench_generation decode steps after a
    prefill of D tokens),
  - prefill tok/s of a 512-token chunk at each depth (llama-bench `-p 512 -d D`; bench_generation
    `--chunk 512` timed after D tokens),
and the same for longserve with `--attention lserve` (default head pattern, unless
--lserve-args says otherwise). The engine `longserve-base` runs another bench_generation binary
(--base-bench-generation, e.g. a build of an earlier commit) dense, alternated with the others in
the same repeats: a before/after of a longserve change measured under the same load. Both engines keep the KV cache in --kv-type (longserve
`--kv-cache-dtype`, llama-bench `-ctk/-ctv`).

Each repeat runs every (model, engine) once, in an order rotated by one per repeat, so that the
load of a shared machine falls on every engine alike; the tables give the median over repeats
and the spread (min-max).

  python3 bench/llamacpp/compare.py --llama-bench /tmp/llamacpp/build/bin/llama-bench \
      --bench-generation build/bench_generation --threads 2 --repeats 3 --kv-type bf16 \
      --model smollm2-q4_1=/path/SmolLM2.gguf:0,4096 --model bench30m-q8_0=/tmp/b30m-q8_0.gguf:0,4096,16384 \
      --out bench/results/cpu/llamacpp-raw.json

Prints markdown tables; raw per-run numbers go to --out.
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


def longserve(args, path: str, depths: list[int], attention: str = "dense",
              binary: str = "") -> dict:
    extra = args.lserve_args.split() if attention == "lserve" else []
    out = run([binary or args.bench_generation, "--model", path, "--threads", str(args.threads),
               "--contexts", ",".join(map(str, depths)), "--chunk", "512",
               "--decode-steps", str(args.decode_steps), "--repeats", "1", "--no-bandwidth",
               "--kv-cache-dtype", args.kv_type, "--attention", attention] + extra, args.timeout)
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
               "-ctk", args.kv_type, "-ctv", args.kv_type, "-o", "json"], args.timeout)
    rows: dict[int, dict] = {d: {} for d in depths}
    tests = json.loads(out)
    if tests:  # what llama-bench ran with (build, flash attention, types), once per file
        t = tests[0]
        args.llama_info[path] = {k: t.get(k) for k in (
            "build_commit", "build_number", "cpu_info", "model_type", "model_size", "n_threads",
            "type_k", "type_v", "flash_attn", "n_batch", "n_ubatch")}
    for t in tests:
        d = int(t.get("n_depth", 0))
        if t["n_prompt"] > 0 and t["n_gen"] == 0:
            rows[d]["pp512"] = float(t["avg_ts"])
        elif t["n_gen"] > 0 and t["n_prompt"] == 0:
            rows[d]["tg"] = float(t["avg_ts"])
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-bench", default="", help="required unless --from-raw")
    ap.add_argument("--bench-generation", default="build/bench_generation")
    ap.add_argument("--base-bench-generation", default="",
                    help="the bench_generation of engine longserve-base (before/after runs)")
    ap.add_argument("--model", action="append", default=[], help="LABEL=FILE.gguf:DEPTH,DEPTH")
    ap.add_argument("--from-raw", default="", help="print the tables of an earlier --out file")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--decode-steps", type=int, default=32)
    ap.add_argument("--kv-type", default="bf16", help="KV cache type of both engines")
    ap.add_argument("--engines", default="longserve,longserve-lserve,llama.cpp",
                    help="which of longserve, longserve-lserve, longserve-base, llama.cpp to run")
    ap.add_argument("--lserve-args", default="", help="extra bench_generation flags for lserve")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    models = []
    for spec in args.model:
        label, rest = spec.split("=", 1)
        path, depths = rest.rsplit(":", 1)
        models.append((label, path, [int(d) for d in depths.split(",")]))

    args.llama_info = {}
    engines = ["longserve", "longserve-lserve", "longserve-base", "llama.cpp"]
    jobs_engines = [e for e in engines if e in args.engines.split(",")]
    raw: dict = {"threads": args.threads, "decode_steps": args.decode_steps,
                 "kv_type": args.kv_type, "lserve_args": args.lserve_args, "runs": []}
    jobs = [(m, e) for m in models for e in jobs_engines]
    if args.from_raw:  # no runs: the tables of the runs an earlier --out file holds
        with open(args.from_raw) as f:
            raw = json.load(f)
        for r in raw["runs"]:
            r["rows"] = {int(d): v for d, v in r["rows"].items()}
        seen: dict = {}
        for r in raw["runs"]:
            seen.setdefault(r["model"], set()).update(r["rows"])
        models = [(label, "", sorted(ds)) for label, ds in seen.items()]
        args.threads, args.decode_steps = raw["threads"], raw["decode_steps"]
        args.kv_type = raw["kv_type"]
        args.repeats = 1 + max(r["rep"] for r in raw["runs"])
        jobs = []
    elif not models:
        ap.error("give --model (or --from-raw)")
    for rep in range(args.repeats if jobs else 0):
        # Rotate the order by one per repeat, so drift of the shared machine hits all alike.
        k = rep % len(jobs)
        for (label, path, depths), engine in jobs[k:] + jobs[:k]:
            t0 = time.time()
            if engine == "llama.cpp":
                rows = llama_bench(args, path, depths)
            elif engine == "longserve-base":
                if not args.base_bench_generation:
                    ap.error("engine longserve-base needs --base-bench-generation")
                rows = longserve(args, path, depths, binary=args.base_bench_generation)
            else:
                rows = longserve(args, path, depths,
                                 attention="lserve" if engine == "longserve-lserve" else "dense")
            raw["runs"].append({"rep": rep, "model": label, "engine": engine, "rows": rows,
                                "seconds": round(time.time() - t0, 1)})
            print(f"rep {rep} {label} {engine}: {rows}", file=sys.stderr, flush=True)
            raw["llama_bench"] = args.llama_info
            if args.out:
                with open(args.out, "w") as f:
                    json.dump(raw, f, indent=1)

    def vals(model, engine, depth, key):
        return [r["rows"][depth][key] for r in raw["runs"]
                if r["model"] == model and r["engine"] == engine and depth in r["rows"]
                and key in r["rows"][depth]]

    def med(model, engine, depth, key):
        v = vals(model, engine, depth, key)
        return statistics.median(v) if v else float("nan")

    def spread(model, engine, depth, key):
        v = vals(model, engine, depth, key)
        if not v:
            return "-"
        fmt = "{:.1f}" if key == "tg" else "{:.0f}"
        return f"{fmt.format(min(v))}-{fmt.format(max(v))}, n={len(v)}"

    shown = [e for e in engines if any(r["engine"] == e for r in raw["runs"])]
    names = {"longserve": "longserve dense", "longserve-lserve": "longserve lserve",
             "longserve-base": "longserve base", "llama.cpp": "llama.cpp"}
    ours = [e for e in shown if e != "llama.cpp"]
    for key, what in (("tg", f"decode tok/s ({args.decode_steps} steps)"), ("pp512", "prefill tok/s (pp512)")):
        f = "{:.1f}" if key == "tg" else "{:.0f}"
        print(f"\n{what}, {args.threads} threads, KV {args.kv_type}, median (min-max, runs)\n")
        vs_llama = ours if "llama.cpp" in shown else []
        vs_base = "longserve" in shown and "longserve-base" in shown
        print(("| model | depth | " + " | ".join(names[e] for e in shown) + " | " +
               "".join(f"{names[e].split()[-1]} / llama.cpp | " for e in vs_llama) +
               ("dense / base |" if vs_base else "")).rstrip())
        print("|---|---:|" + "---:|" * (len(shown) + len(vs_llama) + vs_base))
        for label, _, depths in models:
            for d in depths:
                cells = [f"{f.format(med(label, e, d, key))} ({spread(label, e, d, key)})" for e in shown]
                lc = med(label, "llama.cpp", d, key)
                ratios = [f"{med(label, e, d, key) / lc:.2f}×" for e in vs_llama]
                if vs_base:
                    base = med(label, "longserve-base", d, key)
                    ratios.append(f"{med(label, 'longserve', d, key) / base:.2f}×")
                print(f"| {label} | {d} | " + " | ".join(cells) + " | " + "".join(r + " | " for r in ratios).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
