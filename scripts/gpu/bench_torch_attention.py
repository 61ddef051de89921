#!/usr/bin/env python3
"""Torch baselines for the GPU benchmark, measured in the same run as longserve's kernels
(scripts/gpu-check.sh): causal bf16 attention through torch.nn.functional.scaled_dot_product_attention
at the Llama-3-8B shape (32 query heads, 8 kv heads, head_dim 128, batch 1) for each SDPA backend
that runs, an 8192^3 bf16 GEMM and a device-to-device copy (bytes read + written).

Timing: CUDA events, warm-up first, the median of repeats, random inputs. The kv heads are
expanded to the query heads before the call (what every SDPA backend takes; the expansion is not
timed). One JSON line per measurement is appended to --out:
  {"bench": "torch_sdpa", "tokens": T, "backend": "flash", "ms": ..., "tflops": ...}
  {"bench": "torch_gemm", "tflops": ...}   {"bench": "torch_copy", "gbps": ...}
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.nn.functional as F

Q_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128


def median_ms(fn, warmup: int, reps: int) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def emit(out, row: dict) -> None:
    line = json.dumps(row)
    print(line, flush=True)
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")


def sdpa_backends():
    """(name, context manager factory or None for torch's default choice)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    yield "default", None
    for name in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"):
        backend = getattr(SDPBackend, name, None)
        if backend is not None:
            yield name.split("_")[0].lower(), (lambda b=backend: sdpa_kernel([b]))


def bench_sdpa(tokens: int, out) -> None:
    g = torch.Generator(device="cuda").manual_seed(tokens)
    q = torch.randn(1, Q_HEADS, tokens, HEAD_DIM, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(1, KV_HEADS, tokens, HEAD_DIM, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(1, KV_HEADS, tokens, HEAD_DIM, device="cuda", dtype=torch.bfloat16, generator=g)
    rep = Q_HEADS // KV_HEADS
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    flops = 4.0 * HEAD_DIM * Q_HEADS * tokens * (tokens + 1) / 2
    reps = 10 if tokens <= 8192 else (5 if tokens <= 32768 else 3)
    for name, ctx in sdpa_backends():
        def run():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        try:
            if ctx is None:
                ms = median_ms(run, 2, reps)
            else:
                with ctx():
                    ms = median_ms(run, 2, reps)
            emit(out, {"bench": "torch_sdpa", "tokens": tokens, "backend": name, "ms": round(ms, 4),
                       "tflops": round(flops / (ms * 1e-3) / 1e12, 1)})
        except Exception as e:  # a backend that does not support the shape / GPU
            emit(out, {"bench": "torch_sdpa_unavailable", "tokens": tokens, "backend": name,
                       "error": str(e).splitlines()[0][:200] if str(e) else type(e).__name__})
        torch.cuda.empty_cache()
    del q, k, v
    torch.cuda.empty_cache()


def bench_ceilings(out) -> None:
    n = 8192
    g = torch.Generator(device="cuda").manual_seed(1)
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16, generator=g)
    ms = median_ms(lambda: a @ b, 3, 10)
    emit(out, {"bench": "torch_gemm", "m": n, "n": n, "k": n, "ms": round(ms, 3),
               "tflops": round(2.0 * n ** 3 / (ms * 1e-3) / 1e12, 1)})
    del a, b
    nbytes = 2 << 30
    src = torch.randint(0, 255, (nbytes,), device="cuda", dtype=torch.uint8)
    dst = torch.empty_like(src)
    ms = median_ms(lambda: dst.copy_(src), 3, 10)
    emit(out, {"bench": "torch_copy", "bytes": nbytes, "gbps": round(2 * nbytes / (ms * 1e-3) / 1e9, 1)})
    del src, dst
    torch.cuda.empty_cache()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="", help="append JSON lines here")
    ap.add_argument("--tokens", default="8192,32768,131072")
    ap.add_argument("--skip-ceilings", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("bench_torch_attention: no CUDA device", file=sys.stderr)
        return 2
    emit(args.out, {"bench": "torch_device", "name": torch.cuda.get_device_name(0),
                    "torch": torch.__version__})
    if not args.skip_ceilings:
        bench_ceilings(args.out)
    for t in [int(x) for x in args.tokens.split(",") if x]:
        bench_sdpa(t, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
