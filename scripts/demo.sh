#!/usr/bin/env bash
# The main job: generate with the bundled model. Usage: scripts/demo.sh [build_dir]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${1:-build}"
bin="$root/$build_dir/longserve"
"$bin" generate --prompt "The quick brown fox" --max-tokens 32
