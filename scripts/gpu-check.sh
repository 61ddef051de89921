#!/usr/bin/env bash
# Every GPU test and benchmark of longserve in one run (docs/cuda.md says what each part does and
# what to read in its output).
#
#   scripts/gpu-check.sh --make-carry     # HERE (Debian, packages installed): pack the headers and
#                                         # libraries the GPU build needs into .carry/deps.tar.xz
#   scripts/gpu-check.sh [--quick] [--only a,b] [--skip a,b]
#                                         # ON THE GPU MACHINE, from the repository root
#
# Sections, in order (names for --only / --skip): env, build, tests, kernels, torch, e2e, hf.
# Each section has its own time limit and a failing section never stops the others; the whole run
# keeps within GPU_CHECK_BUDGET_S seconds (default 480). Logs and results go to $OUT (default
# ./gpu-out): gpu_check.log, build.log, ptxas.txt, tests.log, model.log, results.jsonl and
# gpu_results.md, whose table is printed last.
set -u -o pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

CARRY_PACKAGES="libfmt-dev libfmt9 libspdlog-dev libspdlog1.10 nlohmann-json3-dev libgtest-dev
libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libquadmath0"

make_carry() {
  mkdir -p .carry
  local list=.carry/files.txt
  : >"$list"
  for p in $CARRY_PACKAGES; do
    dpkg -L "$p" >/dev/null 2>&1 || { echo "make-carry: package $p is not installed" >&2; exit 1; }
    dpkg -L "$p" | while read -r f; do
      case "$f" in
        */liblapack* | */libblas* | */openblas-pthread/*.a) ;;  # not linked by the GPU build
        /usr/include/* | /usr/lib/* | /usr/share/cmake/*) [ -f "$f" ] || [ -L "$f" ] && echo "${f#/}" ;;
      esac
    done >>"$list"
  done
  # S: symlink targets stay relative (libfoo.so -> libfoo.so.9 in the same folder)
  XZ_OPT=-T0 tar -C / -cJf .carry/deps.tar.xz --transform 's,^,root/,S' -T "$list"
  rm -f "$list"
  echo "make-carry: .carry/deps.tar.xz ($(du -h .carry/deps.tar.xz | cut -f1)) from: $CARRY_PACKAGES"
}

if [ "${1:-}" = "--make-carry" ]; then
  make_carry
  exit 0
fi

QUICK=0
ONLY=""
SKIP=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --only) ONLY=",$2,"; shift ;;
    --skip) SKIP=",$2,"; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

# nvcc may live outside PATH on the GPU machine.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
export CUDACXX=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}

OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
LOG=$OUT/gpu_check.log
RESULTS=$OUT/results.jsonl
: >"$LOG"
: >"$RESULTS"
: >"$OUT/sections.tsv"
BUDGET=${GPU_CHECK_BUDGET_S:-480}
T0=$(date +%s)
BUILD=${GPU_CHECK_BUILD_DIR:-$ROOT/build-gpu}
BIN=$BUILD/bin
MODEL_DIR=${GPU_CHECK_MODEL_DIR:-/tmp/longserve-llama3-8b-shape}
JOBS=$(nproc 2>/dev/null || echo 8)
export PYTHONUNBUFFERED=1
export ROOT OUT RESULTS BUILD BIN MODEL_DIR JOBS QUICK

log() { echo "[gpu-check $(($(date +%s) - T0))s] $*" | tee -a "$LOG"; }
wanted() {
  [ -n "$ONLY" ] && [[ "$ONLY" != *",$1,"* ]] && return 1
  [[ "$SKIP" == *",$1,"* ]] && return 1
  return 0
}
# section NAME LIMIT_S FUNCTION: runs the (exported) shell function in a child bash with a time
# limit clipped to the remaining budget (keeping 15 s for the report), logs its output, records
# status and duration.
section() {
  local name=$1 limit=$2 fn=$3
  if ! wanted "$name"; then
    printf '%s\tskipped\t0\n' "$name" >>"$OUT/sections.tsv"
    return 0
  fi
  local left=$((BUDGET - ($(date +%s) - T0) - 15))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -le 5 ]; then
    log "$name: no time left in the budget, skipped"
    printf '%s\tno-time\t0\n' "$name" >>"$OUT/sections.tsv"
    return 0
  fi
  log "$name: start (limit ${limit}s)"
  local t=$(date +%s) rc
  timeout --signal=TERM --kill-after=10 "$limit" bash -c "$fn" 2>&1 | tee -a "$LOG"
  rc=${PIPESTATUS[0]}
  local dt=$(($(date +%s) - t)) status=ok
  [ "$rc" -eq 124 ] && status=timeout
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && status="failed(rc=$rc)"
  log "$name: $status after ${dt}s"
  printf '%s\t%s\t%s\n' "$name" "$status" "$dt" >>"$OUT/sections.tsv"
}

# ---- env ----
env_section() {
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv || true
  nvcc --version | tail -2 || true
  cmake --version | head -1 || true
  ninja --version || true
  ${CXX:-c++} --version | head -1 || true
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__, torch.cuda.get_device_name(0))" || true
  df -h /tmp | tail -1 || true
}
export -f env_section
section env 60 env_section

# ---- carried dependencies ----
if [ ! -d .carry/root ]; then
  if [ -f .carry/deps.tar.xz ]; then
    tar -C .carry -xJf .carry/deps.tar.xz && log "carry: unpacked .carry/deps.tar.xz"
  else
    log "carry: neither .carry/root nor .carry/deps.tar.xz: the build will miss fmt/spdlog/json/gtest/openblas (make it with scripts/gpu-check.sh --make-carry and carry .carry)"
  fi
fi
export LD_LIBRARY_PATH="$ROOT/.carry/root/usr/lib/x86_64-linux-gnu:$ROOT/.carry/root/usr/lib/x86_64-linux-gnu/openblas-pthread:${LD_LIBRARY_PATH:-}"

# ---- the 8B-shaped model, generated while we build (GPU draws, ~16 GB written) ----
MODEL_PID=""
if wanted e2e || wanted hf || [[ "$ONLY" == *",profile,"* ]]; then
  if [ -f "$MODEL_DIR/model.safetensors.index.json" ]; then
    log "model: reusing $MODEL_DIR"
  else
    log "model: generating $MODEL_DIR in the background"
    (timeout 300 python3 scripts/model/make_bundled_model.py --preset llama3-8b-shape --out "$MODEL_DIR" \
      >"$OUT/model.log" 2>&1; echo "exit $?" >>"$OUT/model.log") &
    MODEL_PID=$!
  fi
fi

# ---- build ----
build_section() {
  cmake -S bench/cuda/gpu_project -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DLONGSERVE_CARRY="$ROOT/.carry/root" >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; return 1; }
  cmake --build "$BUILD" -j "$JOBS" -- -k 0 >>"$OUT/build.log" 2>&1
  local rc=$?
  grep -E "error|FAILED" "$OUT/build.log" | grep -v "^ptxas" | head -40
  # Registers / spills of the attention kernels, and what their SASS is made of.
  {
    echo "# ptxas resource usage (attention, page_select, kv ops)"
    grep -A3 -E "Compiling entry function '.*(attention|wgmma|select|bounds|summary|kv_append)" "$OUT/build.log" |
      grep -E "Compiling entry|registers|spill" | sed 's/ptxas info    ://'
    if command -v cuobjdump >/dev/null; then
      for o in "$BUILD"/src/kernels/cuda/CMakeFiles/ls_kernels_cuda.dir/attention_*_d128.cu.o; do
        echo "# SASS instruction mix of $(basename "$o")"
        cuobjdump --dump-sass "$o" | grep -oE "HMMA[.A-Z0-9]*|HGMMA[.A-Z0-9]*|LDGSTS[.A-Z0-9]*|LDSM[.A-Z0-9]*|LDL|STL|MUFU.EX2" | sort | uniq -c
      done
    fi
  } >"$OUT/ptxas.txt" 2>&1
  ls -la "$BIN" 2>/dev/null
  return $rc
}
export -f build_section
section build 300 build_section

# ---- tests ----
tests_section() {
  # One process per test suite, so a kernel fault (which aborts the process) hides nothing else.
  local failed=0
  : >"$OUT/tests.log"
  for t in test_cuda_ops test_cuda_attention test_cuda_model; do
    if [ ! -x "$BIN/$t" ]; then
      echo "[  FAILED  ] $t (not built)" | tee -a "$OUT/tests.log"
      failed=1
      continue
    fi
    for suite in $("$BIN/$t" --gtest_list_tests | grep -E '^[^ ].*\.$' | sed 's/\.$//'); do
      local t0=$(date +%s) rc=0
      "$BIN/$t" --gtest_color=no --gtest_filter="$suite.*" >"$OUT/suite.log" 2>&1 || rc=$?
      cat "$OUT/suite.log" >>"$OUT/tests.log"
      local passed failed_n
      passed=$(grep -oE "^\[  PASSED  \] [0-9]+" "$OUT/suite.log" | grep -oE "[0-9]+$" || echo 0)
      failed_n=$(grep -cE "^\[  FAILED  \] .*\(" "$OUT/suite.log" || true)
      if [ "$rc" -ne 0 ] && [ "$failed_n" -eq 0 ]; then
        echo "[  FAILED  ] $suite.* CRASHED (exit $rc): $(tail -2 "$OUT/suite.log" | tr '\n' ' ')" | tee -a "$OUT/tests.log"
      fi
      [ "$rc" -ne 0 ] && failed=1
      echo "$t $suite: passed ${passed:-0}, failed $failed_n, exit $rc, $(($(date +%s) - t0))s"
      grep -E "^\[ model    \]" "$OUT/suite.log"
    done
  done
  rm -f "$OUT/suite.log"
  grep -E "^\[  FAILED  \] .*\(|CRASHED" "$OUT/tests.log" | sort -u | head -40
  return $failed
}
export -f tests_section
section tests 150 tests_section

wait_model() {
  if [ -n "$MODEL_PID" ]; then
    log "model: waiting for the generator"
    wait "$MODEL_PID"
    MODEL_PID=""
    tail -3 "$OUT/model.log" | tee -a "$LOG"
  fi
}

# ---- kernel benchmarks (after the model generator: nothing else on the GPU) ----
kernels_section() {
  local args=()
  [ "$QUICK" = 1 ] && args=(--prefill-tokens 8192,32768 --contexts 8192,32768,131072)
  "$BIN/bench_cuda_kernels" --out "$RESULTS" "${args[@]}"
  local rc=$?
  # The experimental warp-specialised wgmma prefill kernel, in its own process (a fault there
  # must not cost the numbers above).
  local pargs=()
  [ "$QUICK" = 1 ] && pargs=(--prefill-tokens 8192,32768)
  "$BIN/bench_cuda_kernels" --out "$RESULTS" --sections prefill --prefill-kernels wgmma-ws \
    "${pargs[@]}" || echo "bench_cuda_kernels --prefill-kernels wgmma-ws failed (exit $?)"
  return $rc
}
export -f kernels_section
if wanted kernels || wanted e2e || wanted hf; then wait_model; fi
section kernels 150 kernels_section

# ---- torch baselines ----
torch_section() {
  local args=()
  [ "$QUICK" = 1 ] && args=(--tokens 8192,32768)
  python3 scripts/gpu/bench_torch_attention.py --out "$RESULTS" "${args[@]}"
}
export -f torch_section
section torch 90 torch_section

# ---- end to end ----
e2e_section() {
  [ -f "$MODEL_DIR/model.safetensors.index.json" ] || { echo "no model in $MODEL_DIR"; return 1; }
  local args=()
  [ "$QUICK" = 1 ] && args=(--ttft 8192,32768 --tpot 32768)
  "$BIN/bench_cuda_e2e" --model "$MODEL_DIR" --out "$RESULTS" "${args[@]}"
}
export -f e2e_section
section e2e 200 e2e_section

# ---- profile (only with --only ...,profile): ncu per-kernel times of 4 decode steps, and the
# decode / prefill attention kernels' limiters. Files: ncu_step.csv, ncu_step.md, ncu_*.txt ----
profile_section() {
  local NCU=${NCU:-$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)}
  [ -n "$NCU" ] || { echo "profile: no ncu"; return 1; }
  local policy=${PROFILE_POLICY:-lserve} ctx=${PROFILE_CONTEXT:-131072}
  # PROFILE_PARTS: which of step (per-kernel times of decode steps), decode (the decode attention
  # kernel's limiters), select (page selection + lserve decode at batch 1 and 8, 128K) and prefill.
  local parts=",${PROFILE_PARTS:-step,decode,prefill},"
  if [[ "$parts" == *",step,"* ]] && [ -f "$MODEL_DIR/model.safetensors.index.json" ]; then
    "$NCU" --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv \
      --log-file "$OUT/ncu_step.csv" "$BIN/bench_cuda_e2e" --model "$MODEL_DIR" --policies "$policy" \
      --ttft= --tpot "$ctx" --steps 4 --profile-step 1 >"$OUT/ncu_step.log" 2>&1 || tail -5 "$OUT/ncu_step.log"
    python3 scripts/gpu/ncu_summary.py "$OUT/ncu_step.csv" --steps 4 | tee "$OUT/ncu_step.md"
  fi
  local sec="--section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats --section ComputeWorkloadAnalysis"
  local files=()
  if [[ "$parts" == *",decode,"* ]]; then
    "$NCU" --clock-control none -k regex:decode_attention --launch-count 1 $sec "$BIN/bench_cuda_kernels" \
      --sections decode --batches 8 --contexts 32768 --policies dense >"$OUT/ncu_decode_dense.txt" 2>&1
    "$NCU" --clock-control none -k regex:decode_attention --launch-count 1 $sec "$BIN/bench_cuda_kernels" \
      --sections decode --batches 8 --contexts 32768 --policies lserve >"$OUT/ncu_decode_lserve.txt" 2>&1
    files+=(ncu_decode_dense ncu_decode_lserve)
  fi
  if [[ "$parts" == *",select,"* ]]; then
    # One eager call of each kernel per batch size (the first replica's select + attention).
    for b in 1 8; do
      : >"$OUT/ncu_select_b$b.txt"
      for k in "bounds|choose" "decode_attention|decode_reduce"; do
        "$NCU" --clock-control none -k "regex:$k" --launch-count 2 $sec \
          "$BIN/bench_cuda_kernels" --sections decode --batches $b --contexts 131072 --policies lserve \
          >>"$OUT/ncu_select_b$b.txt" 2>&1
      done
      files+=(ncu_select_b$b)
    done
  fi
  if [[ "$parts" == *",prefill,"* ]]; then
    "$NCU" --clock-control none -k regex:prefill_attention --launch-count 1 $sec --section InstructionStats \
      "$BIN/bench_cuda_kernels" --sections prefill --prefill-tokens 32768 --policies dense >"$OUT/ncu_prefill.txt" 2>&1
    "$NCU" --clock-control none -k regex:prefill_wgmma --launch-count 1 $sec --section InstructionStats \
      "$BIN/bench_cuda_kernels" --sections prefill --prefill-tokens 32768 --policies dense >"$OUT/ncu_prefill_wgmma.txt" 2>&1
    files+=(ncu_prefill ncu_prefill_wgmma)
  fi
  for f in "${files[@]}"; do
    echo "== $f"
    grep -E "^  [a-z_]+.*\(|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Stall|Warp Cycles Per Issued|Issue Slots Busy|L2 Hit|L1/TEX Hit|Executed Ipc|Waves Per SM|Dynamic Shared|Grid Size" "$OUT/$f.txt" | head -${PROFILE_LINES:-40}
  done
}
export -f profile_section
if [[ "$ONLY" == *",profile,"* ]]; then wait_model; section profile 240 profile_section; fi

hf_section() {
  [ -f "$MODEL_DIR/model.safetensors.index.json" ] || { echo "no model in $MODEL_DIR"; return 1; }
  python3 scripts/gpu/bench_gpu_e2e.py --model "$MODEL_DIR" --out "$RESULTS"
}
export -f hf_section
section hf 120 hf_section

# ---- report ----
python3 - "$OUT" <<'PY' 2>&1 | tee -a "$LOG"
import json, os, re, sys
out = sys.argv[1]
rows = []
for line in open(os.path.join(out, "results.jsonl")):
    line = line.strip()
    if line.startswith("{"):
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass
def pick(bench, **kw):
    return [r for r in rows if r.get("bench") == bench and all(r.get(k) == v for k, v in kw.items())]
def first(bench, **kw):
    xs = pick(bench, **kw)
    return xs[0] if xs else None
def f(x, fmt="{:.1f}"):
    return "-" if x is None else fmt.format(x)
def k(n):
    return f"{n // 1024}K"
md = []
dev = first("device")
md.append(f"# longserve GPU check: {dev['name'] if dev else 'unknown GPU'}\n")
copy, gemm = first("copy"), first("gemm")
tcopy, tgemm = first("torch_copy"), first("torch_gemm")
md.append("## Ceilings (measured in this run)\n")
md.append("| | ours | torch |\n|---|---|---|")
md.append(f"| device-to-device copy, GB/s (read + write) | {f(copy and copy['gbps'])} | {f(tcopy and tcopy['gbps'])} |")
md.append(f"| bf16 GEMM 8192^3, TFLOP/s | {f(gemm and gemm['tflops'])} | {f(tgemm and tgemm['tflops'])} |\n")

md.append("## Prefill attention, Llama-3-8B shape (32 q / 8 kv heads, d 128), batch 1\n")
md.append("Best configuration of each kernel: mma.sync (tile rows) and wgmma (key block rows; ws: the experimental warp-specialised variant).\n")
md.append("| tokens | torch SDPA ms (backend) | mma dense ms (tile) | mma TFLOP/s | wgmma dense ms (key block) | wgmma TFLOP/s | best / torch speed | lserve ms (kernel) | lserve speed-up vs dense |")
md.append("|---|---|---|---|---|---|---|---|---|")
def best(xs):
    xs = [r for r in xs if r.get("ms") and r.get("ok", True)]
    return min(xs, key=lambda r: r["ms"]) if xs else None
for T in sorted({r["tokens"] for r in pick("prefill")} | {r["tokens"] for r in pick("torch_sdpa")}):
    tb = best(pick("torch_sdpa", tokens=T))
    dense = pick("prefill", tokens=T, policy="dense")
    dm = best([r for r in dense if r.get("kernel", "mma") == "mma"])
    dw = best([r for r in dense if r.get("kernel", "").startswith("wgmma")])
    d = best([x for x in (dm, dw) if x])
    l = best(pick("prefill", tokens=T, policy="lserve"))
    md.append(f"| {k(T)} | {f(tb and tb['ms'], '{:.2f}')} ({tb['backend'] if tb else '-'}) | "
              f"{f(dm and dm['ms'], '{:.2f}')} ({dm['warps'] * 16 if dm else '-'} rows) | {f(dm and dm['tflops'])} | "
              f"{f(dw and dw['ms'], '{:.2f}')} ({str(dw.get('key_block', '-')) + (' ws' if dw.get('kernel') == 'wgmma-ws' else '') if dw else '-'}) | {f(dw and dw['tflops'])} | "
              f"{f(tb and d and tb['ms'] / d['ms'], '{:.2f}x')} | "
              f"{f(l and l['ms'], '{:.2f}')} ({l.get('kernel', 'mma') if l else '-'}) | {f(d and l and d['ms'] / l['ms'], '{:.2f}x')} |")
md.append("\nTargets: ours/torch >= 0.6x (aim 1.0x); lserve vs dense >= 1.7x at 128K.\n")

md.append("## Decode attention (pages of 64; lserve: budget 4096 on 4 kv heads, 4 streaming heads)\n")
md.append("| policy | batch | context | us/call | bytes read | GB/s | % of copy BW | select us |")
md.append("|---|---|---|---|---|---|---|---|")
for r in pick("decode"):
    if "us" not in r:
        md.append(f"| {r['policy']} | {r['batch']} | {k(r['context'])} | {r.get('skipped', 'failed')} | | | | |")
        continue
    md.append(f"| {r['policy']} | {r['batch']} | {k(r['context'])} | {r['us']:.1f} | {r['bytes'] / 1e6:.1f} MB | "
              f"{r['gbps']:.0f} | {100 * r['copy_fraction']:.0f}% | {r['select_us'] if r['policy'] == 'lserve' else '-'} |")
md.append("\nTarget: >= 70% of the copy bandwidth at batch >= 8.\n")

md.append("## End to end, Llama-3-8B-shaped random bf16 model\n")
em = first("e2e_model")
if em:
    md.append(f"Weights {em['weights_gb']:.2f} GB, {em['bytes_per_token_gb']:.2f} GB read per token; copy BW "
              f"{em['copy_gbps']:.0f} GB/s -> weight-read floor {em['floor_ms']:.2f} ms/token; load {em['load_s']:.1f} s.\n")
md.append("| engine | TTFT 8K ms | TTFT 32K ms | TTFT 128K ms | TPOT 32K ms | TPOT 128K ms | TPOT 128K / floor |")
md.append("|---|---|---|---|---|---|---|")
for pol in ["dense", "streaming", "lserve"]:
    t = {r["tokens"]: r.get("ms") for r in pick("ttft", policy=pol)}
    p = {r["context"]: r for r in pick("tpot", policy=pol)}
    if not t and not p:
        continue
    p128 = p.get(131072)
    md.append(f"| longserve {pol} | {f(t.get(8192), '{:.0f}')} | {f(t.get(32768), '{:.0f}')} | {f(t.get(131072), '{:.0f}')} | "
              f"{f(p.get(32768, {}).get('mean_ms'), '{:.2f}')} | {f(p128 and p128.get('mean_ms'), '{:.2f}')} | "
              f"{f(p128 and p128.get('vs_floor'), '{:.2f}x')} |")
ht = {r["tokens"]: r.get("ms") for r in pick("hf_ttft")}
hp = {r["context"]: r.get("median_ms") for r in pick("hf_tpot")}
if ht or hp:
    md.append(f"| transformers sdpa bf16 | {f(ht.get(8192), '{:.0f}')} | {f(ht.get(32768), '{:.0f}')} | {f(ht.get(131072), '{:.0f}')} | "
              f"{f(hp.get(32768), '{:.2f}')} | {f(hp.get(131072), '{:.2f}')} | |")
errs = [r for r in rows if "error" in r]
if errs:
    md.append("\nErrors:\n")
    for r in errs:
        md.append(f"- {r}")
md.append("\nTarget: lserve TPOT at 128K within 1.3x of the floor.\n")

md.append("## Tests\n")
tl = os.path.join(out, "tests.log")
if os.path.exists(tl):
    text = open(tl).read()
    passed = sum(int(m.group(1)) for m in re.finditer(r"\[  PASSED  \] (\d+) tests?", text))
    md.append(f"- passed: {passed}")
    failed = sorted(set(re.findall(r"\[  FAILED  \] (\S+\.\S+)", text)))
    skipped = len(set(re.findall(r"\[  SKIPPED \] (\S+)", text)))
    md.append(f"- failed: {len(failed)} {' '.join(failed[:20])}")
    md.append(f"- skipped: {skipped}")
md.append("\n## Sections\n")
md.append("| section | status | seconds |\n|---|---|---|")
for line in open(os.path.join(out, "sections.tsv")):
    parts = line.rstrip("\n").split("\t")
    if len(parts) == 3:
        md.append(f"| {parts[0]} | {parts[1]} | {parts[2]} |")
text = "\n".join(md) + "\n"
open(os.path.join(out, "gpu_results.md"), "w").write(text)
print(text)
PY
log "done in $(($(date +%s) - T0))s; results in $OUT"
