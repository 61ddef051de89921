#!/usr/bin/env bash
# Reproduces the accuracy table of the top-level README.md (docs/eval.md explains it).
# Usage: bench/results/accuracy/run_sweep.sh [BUILD_DIR] [CONFIG...]   (from the repository root)
# Each configuration writes <name>.json (every result), <name>.md (the table), <name>.svg
# (the niah_single heatmap) and <name>.log here. CPU only; about 2-6 minutes per configuration on
# two quiet cores (dense longest), most of it the 16K prompts.
set -euo pipefail
BUILD=${1:-build}
shift || true
OUT=bench/results/accuracy
LS="nice -n 19 $BUILD/longserve eval niah --lengths 2048,4096,8192,16384 --tasks niah_single,niah_multikey --depths 8 --samples 8 --seed 0 --max-tokens 24"
PATTERN=$OUT/full_attention_heads.tsv  # from: longserve calibrate --out $PATTERN (see README.md)

declare -A FLAGS=(
  [dense]="--attention dense"
  [lserve-4096]="--attention lserve --head-pattern $PATTERN --streaming-ratio 0.5 --token-budget 4096"
  [streaming]="--attention streaming"
  [lserve-4096-default-pattern]="--attention lserve --streaming-ratio 0.5 --token-budget 4096"
  [quest-p64-2048]="--attention quest --page-tokens 64 --token-budget 2048"
  [lserve-2048]="--attention lserve --head-pattern $PATTERN --streaming-ratio 0.5 --token-budget 2048"
  [lserve-1024]="--attention lserve --head-pattern $PATTERN --streaming-ratio 0.5 --token-budget 1024"
  [lserve-512]="--attention lserve --head-pattern $PATTERN --streaming-ratio 0.5 --token-budget 512"
)
ORDER=(dense lserve-4096 streaming lserve-1024 quest-p64-2048 lserve-2048 lserve-512 lserve-4096-default-pattern)
if [ $# -gt 0 ]; then ORDER=("$@"); fi
for name in "${ORDER[@]}"; do
  echo "== $name: $LS ${FLAGS[$name]}"
  $LS ${FLAGS[$name]} --json $OUT/$name.json --markdown $OUT/$name.md --heatmap $OUT/$name.svg \
    > $OUT/$name.log 2>&1
  tail -n 8 $OUT/$name.log
done
