#!/usr/bin/env python3
"""Hugging Face transformers on the same Llama-3-8B-shaped model as longserve's end-to-end GPU
benchmark (scripts/gpu-check.sh): bf16 weights, attn_implementation="sdpa", batch 1.

  TTFT(T): a prompt of T random token ids, one forward with a KV cache and logits of the last
           position only (logits_to_keep=1), wall time until the logits are on the host;
  TPOT(C): greedy decode steps after that prompt (context C), each step synchronised, median.

One JSON line per measurement is appended to --out:
  {"bench": "hf_ttft", "tokens": T, "ms": ...}   {"bench": "hf_tpot", "context": C, "median_ms": ...}
Contexts that do not fit in GPU memory are reported as errors and skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch


def emit(out, row: dict) -> None:
    line = json.dumps(row)
    print(line, flush=True)
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")


def run_context(model, vocab: int, tokens: int, steps: int, measure_tpot: bool, out) -> None:
    g = torch.Generator(device="cuda").manual_seed(tokens)
    ids = torch.randint(0, vocab, (1, tokens), device="cuda", generator=g)
    with torch.inference_mode():
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        res = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        last = res.logits[:, -1].float().cpu()
        ttft = time.perf_counter() - t0
        emit(out, {"bench": "hf_ttft", "tokens": tokens, "ms": round(ttft * 1e3, 1)})
        if not measure_tpot:
            return
        cache = res.past_key_values
        nxt = last.argmax(-1).view(1, 1).cuda()
        times = []
        for i in range(steps + 3):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            res = model(input_ids=nxt, past_key_values=cache, use_cache=True, logits_to_keep=1)
            nxt = res.logits[:, -1].argmax(-1).view(1, 1)
            nxt.cpu()
            if i >= 3:
                times.append(time.perf_counter() - t0)
            cache = res.past_key_values
        times.sort()
        emit(out, {"bench": "hf_tpot", "context": tokens,
                   "median_ms": round(times[len(times) // 2] * 1e3, 3),
                   "mean_ms": round(sum(times) / len(times) * 1e3, 3)})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", default="")
    ap.add_argument("--ttft", default="8192,32768")
    ap.add_argument("--tpot", default="8192,32768")
    ap.add_argument("--steps", type=int, default=16)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_gpu_e2e: no CUDA device", file=sys.stderr)
        return 2
    from transformers import AutoModelForCausalLM

    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16,
                                                 attn_implementation="sdpa", device_map="cuda")
    model.eval()
    emit(args.out, {"bench": "hf_load", "s": round(time.perf_counter() - t0, 1),
                    "transformers": __import__("transformers").__version__})
    vocab = model.config.vocab_size
    run_context(model, vocab, 512, 2, True, "")  # warm-up (kernels, allocator), not reported
    tpot = {int(x) for x in args.tpot.split(",") if x}
    for t in sorted({int(x) for x in args.ttft.split(",") if x} | tpot):
        try:
            run_context(model, vocab, t, args.steps, t in tpot, args.out)
        except torch.OutOfMemoryError as e:
            emit(args.out, {"bench": "hf_ttft", "tokens": t, "error": "out of memory: " + str(e)[:120]})
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
