#!/usr/bin/env python3
"""Accuracy of the K/V page formats (docs/kv-quantization.md): `longserve eval niah` on the bundled
model for each --kv-cache-dtype and attention policy, then one Markdown table (stdout) with the
RULER score per context length, its difference from bf16 in points, and the share of prompts
whose generated text is identical to bf16's.

Usage (from the repository root, after building `longserve`):

    python3 bench/results/accuracy/kv_formats.py [--build build] [--formats f32,bf16,fp8,int8,int4]
        [--policies dense,lserve] [--lengths 1024,2048] [--samples 4] [--depths 4]
        [--threads 2] [--force] [--table-only]

Each (policy, format) writes kv-<policy>-<format>.json / .log next to this script; an existing
JSON is reused unless --force (so an interrupted sweep resumes, and --table-only re-prints).
The grid is deliberately small (the sweep runs on a shared two-core machine): tasks niah_single
and niah_multikey, `--samples` prompts per task and length.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PATTERN = os.path.join(HERE, "full_attention_heads.tsv")  # longserve calibrate (docs/eval.md)

# Policy name -> longserve eval flags. lserve uses the calibrated streaming heads and a budget of
# 512 tokens, below the contexts, so its page selection (from exact key summaries) matters.
POLICIES = {
    "dense": ["--attention", "dense"],
    "lserve": ["--attention", "lserve", "--head-pattern", PATTERN, "--streaming-ratio", "0.5",
               "--token-budget", "512"],
    "quest": ["--attention", "quest", "--page-tokens", "64", "--token-budget", "512"],
    "streaming": ["--attention", "streaming"],
}


def label(n: int) -> str:
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


def run_one(args, policy: str, fmt: str) -> str:
    out = os.path.join(HERE, f"kv-{policy}-{fmt}.json")
    if os.path.exists(out) and not args.force:
        return out
    cmd = [os.path.join(args.build, "longserve"), "eval", "niah",
           "--lengths", args.lengths, "--tasks", "niah_single,niah_multikey",
           "--depths", str(args.depths), "--samples", str(args.samples), "--seed", "0",
           "--max-tokens", "24", "--threads", str(args.threads), "--kv-cache-dtype", fmt,
           *POLICIES[policy], "--json", out + ".tmp"]
    print(f"== {policy} {fmt}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    t0 = time.time()
    with open(os.path.join(HERE, f"kv-{policy}-{fmt}.log"), "w") as log:
        subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=True)
    os.replace(out + ".tmp", out)
    print(f"   {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    return out


def load(path: str):
    with open(path) as f:
        j = json.load(f)
    by_len: dict[int, list[float]] = {}
    for r in j["results"]:
        by_len.setdefault(r["context_tokens"], []).append(1.0 if r["contained"] else 0.0)
    preds = {r["id"]: r["prediction"] for r in j["results"]}
    return by_len, preds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--formats", default="bf16,fp8,int8,int4")
    ap.add_argument("--policies", default="dense,lserve")
    ap.add_argument("--lengths", default="1024,2048")
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--depths", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--table-only", action="store_true")
    args = ap.parse_args()
    formats = args.formats.split(",")
    policies = args.policies.split(",")
    if "bf16" not in formats:
        formats.insert(0, "bf16")  # the reference column
    for p in policies:
        if p not in POLICIES:
            print(f"unknown policy {p}; one of {', '.join(POLICIES)}", file=sys.stderr)
            return 2
    results = {}
    for p in policies:
        for f in formats:
            path = os.path.join(HERE, f"kv-{p}-{f}.json")
            if not args.table_only:
                path = run_one(args, p, f)
            if os.path.exists(path):
                results[(p, f)] = load(path)
    lengths = sorted({n for by_len, _ in results.values() for n in by_len})
    print("| attention | KV pages | " + " | ".join(label(n) for n in lengths) +
          " | mean | vs bf16 (points) | same text as bf16 |")
    print("|---|---|" + "---:|" * (len(lengths) + 3))
    for p in policies:
        if (p, "bf16") not in results:
            continue
        ref_len, ref_pred = results[(p, "bf16")]
        ref_mean = 100.0 * sum(sum(v) for v in ref_len.values()) / sum(len(v) for v in ref_len.values())
        for f in formats:
            if (p, f) not in results:
                continue
            by_len, preds = results[(p, f)]
            cells = [f"{100.0 * sum(by_len[n]) / len(by_len[n]):.1f} ({len(by_len[n])})"
                     if n in by_len else "-" for n in lengths]
            mean = 100.0 * sum(sum(v) for v in by_len.values()) / sum(len(v) for v in by_len.values())
            same = sum(preds.get(i) == t for i, t in ref_pred.items()) / max(1, len(ref_pred))
            print(f"| {p} | {f} | " + " | ".join(cells) +
                  f" | {mean:.1f} | {mean - ref_mean:+.1f} | {same:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
