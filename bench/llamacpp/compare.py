#!/usr/bin/env python3
"""longserve vs llama.cpp on the CPU, on the same GGUF files.

For each model, alternates runs of longserve's bench_generation and llama.cpp's llama-bench
(built by bench/llamacpp/build_llama_bench.sh), both at --threads, and reports medians of:
  - decode tok/s at each depth (llama-bench `-n N -d D`; bench_generation decode steps after a
    prefill of D tokens),
  - prefill tok/s of a 512-token chunk at each depth (llama-bench `-p 512 -d D`; bench_generation
    `--chunk 512` timed after D tokens),
and the same for longserve with `--attention lserve` (--lserve-args for every model, and a
model's own head pattern from --pattern LABEL=FILE). The engine `longserve-base` runs another
bench_generation binary (--base-bench-generation, e.g. a build of an earlier commit) dense,
alternated with the others in the same repeats: a before/after of a longserve change measured
under the same load.

KV cache: longserve keeps it in --kv-type (`--kv-cache-dtype`; bf16, f32, ...; it has no f16),
llama.cpp in each of --llama-kv-types (`-ctk/-ctv`; default: --kv-type). llama.cpp's own default
and its tuned CPU path is f16, which has no bf16 counterpart there on AVX2, so
`--llama-kv-types f16,bf16` runs it both ways (engines `llama.cpp` and `llama.cpp-bf16`): f16 is
the same size as longserve's bf16 (2 bytes per element), bf16 is the same type.

Each repeat runs every (model, engine) once, in an order rotated by one per repeat, so that the
load of a shared machine falls on every engine alike; the table gives the median over repeats
and the spread (min-max), and the ratios of longserve's medians to the first llama.cpp engine's.

  python3 bench/llamacpp/compare.py --llama-bench /tmp/llamacpp/build/bin/llama-bench \
      --bench-generation build/bench_generation --threads 2 --repeats 3 --kv-type bf16 \
      --llama-kv-types f16 --model smollm2-q4_1=/path/SmolLM2.gguf:0,4096 \
      --model bench30m-q8_0=/tmp/b30m-q8_0.gguf:0,4096,16384 \
      --pattern smollm2-q4_1=bench/results/accuracy/smollm2/full_attention_heads.tsv \
      --out bench/results/cpu/llamacpp-raw.json

Prints one markdown table (decode and pp512 per depth); raw per-run numbers go to --out.
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
              binary: str = "", pattern: str = "") -> dict:
    extra = args.lserve_args.split() if attention == "lserve" else []
    if attention == "lserve" and pattern:
        extra += ["--head-pattern", pattern]
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


def llama_bench(args, path: str, depths: list[int], kv_type: str) -> dict:
    out = run([args.llama_bench, "-m", path, "-t", str(args.threads), "-p", "512",
               "-n", str(args.decode_steps), "-d", ",".join(map(str, depths)), "-r", "1",
               "-ctk", kv_type, "-ctv", kv_type, "-o", "json"], args.timeout)
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
    ap.add_argument("--kv-type", default="bf16", help="longserve's KV cache type")
    ap.add_argument("--llama-kv-types", default="",
                    help="llama.cpp's KV cache types, comma-separated (default: --kv-type); the "
                         "first is engine llama.cpp, the others llama.cpp-TYPE")
    ap.add_argument("--engines", default="longserve,longserve-lserve,llama.cpp",
                    help="which of longserve, longserve-lserve, longserve-base, llama.cpp to run")
    ap.add_argument("--lserve-args", default="", help="extra bench_generation flags for lserve")
    ap.add_argument("--pattern", action="append", default=[],
                    help="LABEL=FILE: lserve's --head-pattern for that model")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    models = []
    for spec in args.model:
        label, rest = spec.split("=", 1)
        path, depths = rest.rsplit(":", 1)
        models.append((label, path, [int(d) for d in depths.split(",")]))

    patterns = dict(p.split("=", 1) for p in args.pattern)
    llama_types = [t for t in (args.llama_kv_types or args.kv_type).split(",") if t]
    llama_engines = ["llama.cpp"] + [f"llama.cpp-{t}" for t in llama_types[1:]]
    llama_kv = dict(zip(llama_engines, llama_types))
    args.llama_info = {}
    engines = ["longserve", "longserve-lserve", "longserve-base"] + llama_engines
    wanted = args.engines.split(",")
    if "llama.cpp" in wanted:
        wanted += llama_engines
    jobs_engines = [e for e in engines if e in wanted]
    raw: dict = {"threads": args.threads, "decode_steps": args.decode_steps,
                 "kv_type": args.kv_type, "llama_kv": llama_kv, "lserve_args": args.lserve_args,
                 "patterns": patterns, "runs": []}
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
        llama_kv = raw.get("llama_kv", {"llama.cpp": raw["kv_type"]})
        engines = ["longserve", "longserve-lserve", "longserve-base"] + list(llama_kv)
        args.repeats = 1 + max(r["rep"] for r in raw["runs"])
        jobs = []
    elif not models:
        ap.error("give --model (or --from-raw)")
    for rep in range(args.repeats if jobs else 0):
        # Rotate the order by one per repeat, so drift of the shared machine hits all alike.
        k = rep % len(jobs)
        for (label, path, depths), engine in jobs[k:] + jobs[:k]:
            t0 = time.time()
            if engine in llama_kv:
                rows = llama_bench(args, path, depths, llama_kv[engine])
            elif engine == "longserve-base":
                if not args.base_bench_generation:
                    ap.error("engine longserve-base needs --base-bench-generation")
                rows = longserve(args, path, depths, binary=args.base_bench_generation)
            else:
                rows = longserve(args, path, depths,
                                 attention="lserve" if engine == "longserve-lserve" else "dense",
                                 pattern=patterns.get(label, ""))
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
             "longserve-base": "longserve base"}
    names.update({e: f"llama.cpp {t}" for e, t in llama_kv.items()})
    ours = [e for e in shown if e not in llama_kv]
    ref = "llama.cpp" if "llama.cpp" in shown else ""
    vs_base = "longserve" in shown and "longserve-base" in shown
    cols = []  # (header, key, engine or ratio)
    for key, what in (("tg", "decode"), ("pp512", "pp512")):
        cols += [(f"{what} {names[e]}", key, e) for e in shown]
        if ref:
            cols += [(f"{what} {names[e].split()[-1]} / llama.cpp", key, ("ratio", e, ref))
                     for e in ours]
        if vs_base:
            cols.append((f"{what} dense / base", key, ("ratio", "longserve", "longserve-base")))
    kv_note = ", ".join(names[e] for e in llama_kv if e in shown)
    print(f"\ndecode tok/s ({args.decode_steps} steps after `depth` tokens) and prefill tok/s of a "
          f"512-token chunk after `depth` tokens; {args.threads} threads; KV: longserve "
          f"{args.kv_type}" + (f", {kv_note}" if kv_note else "") +
          f"; median (min-max, runs); ratios of medians\n")
    print("| model | depth | " + " | ".join(c[0] for c in cols) + " |")
    print("|---|---:|" + "---:|" * len(cols))
    for label, _, depths in models:
        for d in depths:
            cells = []
            for _, key, what in cols:
                f = "{:.1f}" if key == "tg" else "{:.0f}"
                if isinstance(what, tuple):
                    cells.append(f"{med(label, what[1], d, key) / med(label, what[2], d, key):.2f}×")
                else:
                    cells.append(f"{f.format(med(label, what, d, key))} ({spread(label, what, d, key)})")
            print(f"| {label} | {d} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
