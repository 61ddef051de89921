#!/usr/bin/env bash
# The main job: start the OpenAI-compatible server on the bundled model, ask it a retrieval
# question with curl (completions and chat) and with openai-python, then stop it.
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
