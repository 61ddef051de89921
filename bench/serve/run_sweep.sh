#!/usr/bin/env bash
# `longserve bench serve` against `longserve serve` on the bundled model: throughput and latency
# percentiles against request rate, dense against lserve (calibrated heads, 1024-token budget).
# Usage (repository root): bench/serve/run_sweep.sh [BUILD_DIR] [OUT_DIR]
# Writes one vLLM-style results JSON per (policy, rate) and summary.md (the README table).
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-bench/results/serve}
PORT=${PORT:-8017}
RATES=${RATES:-"0.5 1 2 inf"}
PROMPTS=${PROMPTS:-24}
INPUT=${INPUT:-4096}
OUTPUT=${OUTPUT:-64}
mkdir -p "$OUT"
declare -A FLAGS=(
  [dense]="--attention dense"
  [lserve]="--attention lserve --head-pattern bench/results/accuracy/full_attention_heads.tsv --streaming-ratio 0.5 --token-budget 1024"
)
for policy in dense lserve; do
  # shellcheck disable=SC2086
  "$BUILD/longserve" serve --port "$PORT" --max-model-len 8192 ${FLAGS[$policy]} \
    >"$OUT/server-$policy.log" 2>&1 &
  server=$!
  trap 'kill $server 2>/dev/null || true' EXIT
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
    sleep 0.2
  done
  for rate in $RATES; do
    "$BUILD/longserve" bench serve --port "$PORT" --model models/tiny-longctx --served-model-name tiny-longctx \
      --random-input-len "$INPUT" --random-output-len "$OUTPUT" --num-prompts "$PROMPTS" \
      --request-rate "$rate" --seed 1 --disable-tqdm --percentile-metrics ttft,tpot,itl,e2el --save-result --result-dir "$OUT" \
      --result-filename "$policy-rate-$rate.json" --metadata "attention=$policy" \
      >"$OUT/$policy-rate-$rate.log" 2>&1
    echo "$policy rate $rate: done"
  done
  kill "$server"
  wait "$server" 2>/dev/null || true
  trap - EXIT
done
python3 - "$OUT" "$RATES" <<'PY'
import json, os, sys
out, rates = sys.argv[1], sys.argv[2].split()
rows = ["| attention | request rate (req/s) | throughput (req/s) | output tok/s | mean TTFT ms | p99 TTFT ms | mean TPOT ms | p99 TPOT ms | p99 ITL ms | mean E2EL ms |",
        "|---|---|---|---|---|---|---|---|---|---|"]
for policy in ["dense", "lserve"]:
    for rate in rates:
        p = os.path.join(out, f"{policy}-rate-{rate}.json")
        if not os.path.exists(p):
            continue
        r = json.load(open(p))
        rows.append(f"| {policy} | {rate} | {r['request_throughput']:.2f} | {r['output_throughput']:.0f} | "
                    f"{r['mean_ttft_ms']:.0f} | {r['p99_ttft_ms']:.0f} | {r['mean_tpot_ms']:.1f} | "
                    f"{r['p99_tpot_ms']:.1f} | {r['p99_itl_ms']:.1f} | {r['mean_e2el_ms']:.0f} |")
text = "\n".join(rows) + "\n"
open(os.path.join(out, "summary.md"), "w").write(text)
print(text)
PY
