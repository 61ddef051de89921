#!/usr/bin/env bash
# The whole project on the GPU machine in one run: build (the same CMake files as everywhere,
# with Debian's packages carried in), the whole ctest suite (CUDA tests included), the kernel and
# end-to-end benchmarks, torch / transformers baselines and a serving benchmark through
# `longserve serve --device cuda`. docs/cuda.md says what each part does and how to read it.
#
#   scripts/gpu-check.sh --make-carry     # HERE (Debian bookworm): download the Debian packages
#                                         # (.carry/debs) and Python wheels (.carry/wheels) the
#                                         # GPU machine lacks
#   scripts/gpu-check.sh [--quick] [--only a,b] [--skip a,b]
#                                         # ON THE GPU MACHINE, from the repository root, with
#                                         # .carry carried
#
# Sections, in order (names for --only / --skip): env, build, tests, kernels, transfers, torch,
# e2e, hf, serve; only when named in --only: prefix (prefix caching; prefix-multiturn: its
# multi-turn conversation mode), variants (kernel A/B comparisons), profile, tierk, tier32k, tier128k, tiercap (the host KV tier), kvformats (TPOT per KV format), cpuquant (CPU ISA variants),
# tp, tpserve (tensor parallelism on 2 or 4 GPUs), tp70b (a 70B-shaped model on 4 GPUs). Each section has its own time limit and a
# failing section never stops the others; the
# whole run keeps within GPU_CHECK_BUDGET_S seconds (default 540). Logs and results go to $OUT
# (default ./gpu-out): gpu_check.log, build.log, ptxas.txt, tests.log, results.jsonl,
# gpu_results.md (its table is printed last) and serve/.
set -u -o pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

# Debian packages the build links (the library part of scripts/apt-packages.txt with the
# dependencies an Ubuntu 24.04 CUDA image lacks), and pkgconf itself.
CARRY_PACKAGES="nlohmann-json3-dev libcpp-httplib-dev libcpp-httplib0.11 libbrotli-dev libbrotli1
libssl-dev libssl3 zlib1g-dev zlib1g libcli11-dev libfmt-dev libfmt9 libspdlog-dev libspdlog1.10
libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libutf8proc-dev libutf8proc2
libopenblas-dev libopenblas-pthread-dev libopenblas0 libopenblas0-pthread libgfortran5 libquadmath0
libgtest-dev libgmock-dev googletest libbenchmark-dev libbenchmark1debian pkgconf pkgconf-bin
libpkgconf3"

# The GPU machine gets them as .carry/deps.tar.xz: the packages unpacked (dpkg -x) into one
# prefix here, less what the build never reads (static libraries other than the test
# frameworks', LAPACK, documentation), compressed to fit the device call's 64 MiB. Carry
# .carry/deps.tar.xz and .carry/wheels.
make_carry() {
  local tmp
  tmp=$(mktemp -d)
  rm -rf .carry/root .carry/deps.tar.xz .carry/wheels
  mkdir -p "$tmp/debs" "$tmp/root" .carry/wheels
  (cd "$tmp/debs" && apt-get download $CARRY_PACKAGES) || { echo "make-carry: apt-get download failed" >&2; exit 1; }
  for d in "$tmp"/debs/*.deb; do dpkg -x "$d" "$tmp/root"; done
  (
    cd "$tmp/root" || exit 1
    find . -name "*.a" ! -name "libgtest*" ! -name "libgmock*" ! -name "libbenchmark*" -delete
    rm -rf usr/share/doc usr/share/man usr/share/lintian usr/share/bug usr/src \
      usr/lib/x86_64-linux-gnu/openblas-pthread/liblapack* usr/lib/x86_64-linux-gnu/openblas-pthread/libblas*
    # The tokenizer links the 8-bit PCRE2 only.
    rm -f usr/lib/x86_64-linux-gnu/libpcre2-{16,32,posix}* usr/lib/x86_64-linux-gnu/pkgconfig/libpcre2-{16,32,posix}.pc
  )
  # A device call takes at most 64 MiB of working tree and carried files together.
  XZ_OPT="-9e -T0" tar -C "$tmp/root" -cJf .carry/deps.tar.xz .
  # openai-python and jsonschema (the test suite's client tests) and gguf-py (the GGUF writer's
  # cross-check) for the GPU machine's Python
  # (3.12, no network there). The SmolLM2 tests' packages stay behind: the model's 100 MB GGUF cannot travel in a
  # device call, so those tests run in CI only (tests_section leaves them out).
  grep -E '^(openai|jsonschema|gguf)==' tests/requirements.txt >"$tmp/requirements-gpu.txt"
  python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .carry/wheels -r "$tmp/requirements-gpu.txt" || { echo "make-carry: pip download failed" >&2; exit 1; }
  # numpy comes with the GPU machine's PyTorch; a carried one would shadow it (and is 16 MB). The
  # image has these too (KINDS.md's package list), so they need not count against the 64 MiB.
  rm -f .carry/wheels/numpy-*.whl
  for w in anyio attrs h11 idna pyyaml tqdm typing_extensions; do rm -f .carry/wheels/"$w"-*.whl; done
  rm -rf "$tmp"
  echo "make-carry: .carry/deps.tar.xz ($(du -sh .carry/deps.tar.xz | cut -f1)) from $(echo $CARRY_PACKAGES | wc -w) packages, $(ls .carry/wheels | wc -l) wheels ($(du -sh .carry/wheels | cut -f1))"
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
BUDGET=${GPU_CHECK_BUDGET_S:-540}
T0=$(date +%s)
BUILD=${GPU_CHECK_BUILD_DIR:-$ROOT/build-gpu}
MODEL_DIR=${GPU_CHECK_MODEL_DIR:-/tmp/longserve-llama3-8b-shape}
JOBS=$(nproc 2>/dev/null || echo 8)
export PYTHONUNBUFFERED=1
export ROOT OUT RESULTS BUILD MODEL_DIR JOBS QUICK

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

# ---- carried dependencies: Debian's packages unpacked into a prefix, found through
# CMAKE_PREFIX_PATH and the carried pkgconf; the test suite's wheels into a Python path ----
CARRY=$ROOT/.carry/root
if [ ! -d "$CARRY/usr" ]; then
  if [ -f .carry/deps.tar.xz ]; then
    mkdir -p "$CARRY" && tar -C "$CARRY" -xJf .carry/deps.tar.xz && log "carry: unpacked .carry/deps.tar.xz into $CARRY"
  else
    log "carry: no .carry/deps.tar.xz (run scripts/gpu-check.sh --make-carry here first and carry .carry/deps.tar.xz and .carry/wheels)"
  fi
fi
CARRY_LIB=$CARRY/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH="$CARRY_LIB:$CARRY_LIB/openblas-pthread:${LD_LIBRARY_PATH:-}"
export PKG_CONFIG_SYSROOT_DIR=$CARRY
# openblas.pc is an update-alternatives link on Debian; dpkg -x leaves it in its own folder.
export PKG_CONFIG_LIBDIR=$CARRY_LIB/pkgconfig:$CARRY_LIB/openblas-pthread/pkgconfig:$CARRY/usr/share/pkgconfig
export CMAKE_PREFIX_PATH=$CARRY/usr
PY_SITE=/tmp/longserve-py-site
if [ ! -d "$PY_SITE" ] && ls .carry/wheels/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$PY_SITE" .carry/wheels/*.whl &&
    log "carry: installed $(ls .carry/wheels/*.whl | wc -l) wheels into $PY_SITE"
fi
# The interpreter the test suite runs Python tests with (LONGSERVE_PYTHON): the machine's
# python3 with the carried wheels on its path.
cat >/tmp/longserve-python <<PYEOF
#!/bin/sh
PYTHONPATH=$PY_SITE\${PYTHONPATH:+:\$PYTHONPATH} exec python3 "\$@"
PYEOF
chmod +x /tmp/longserve-python
export LONGSERVE_PYTHON=/tmp/longserve-python
export CARRY

# ---- the 8B-shaped model, generated while we build (GPU draws, ~16 GB written) ----
MODEL_PID=""
if wanted e2e || wanted hf || wanted serve || [[ "$ONLY" =~ ,(profile|tier32k|tier128k|tiercap|kvformats|prefill|prefix|prefix-multiturn|tp), ]]; then
  if [ -f "$MODEL_DIR/model.safetensors.index.json" ]; then
    log "model: reusing $MODEL_DIR"
  else
    log "model: generating $MODEL_DIR in the background"
    (timeout 300 python3 scripts/model/make_bundled_model.py --preset llama3-8b-shape --out "$MODEL_DIR" \
      >"$OUT/model.log" 2>&1; echo "exit $?" >>"$OUT/model.log") &
    MODEL_PID=$!
  fi
fi

# ---- build: the whole project (server, CLI, tests, benchmarks), the main CMake files ----
build_section() {
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLONGSERVE_CUDA=ON \
    -DLONGSERVE_CUDA_RESOURCE_USAGE=ON -DPKG_CONFIG_EXECUTABLE="$CARRY/usr/bin/pkgconf" \
    -DLONGSERVE_PYTHON=/tmp/longserve-python >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; return 1; }
  cmake --build "$BUILD" -j "$JOBS" -- -k 0 >>"$OUT/build.log" 2>&1
  local rc=$?
  grep -E "error|warning|FAILED" "$OUT/build.log" | grep -v "^ptxas" | head -60
  # Registers / spills of the attention kernels, and what their SASS is made of.
  {
    echo "# ptxas resource usage (attention, page_select, kv ops, residency)"
    grep -A3 -E "Compiling entry function '.*(attention|wgmma|select|bounds|summary|kv_append|page_copy|residency)" "$OUT/build.log" |
      grep -E "Compiling entry|registers|spill" | sed 's/ptxas info    ://'
    if command -v cuobjdump >/dev/null; then
      for o in "$BUILD"/src/kernels/cuda/CMakeFiles/ls_kernels_cuda.dir/attention_*_d128.cu.o; do
        echo "# SASS instruction mix of $(basename "$o")"
        cuobjdump --dump-sass "$o" | grep -oE "HMMA[.A-Z0-9]*|HGMMA[.A-Z0-9]*|LDGSTS[.A-Z0-9]*|LDSM[.A-Z0-9]*|LDL|STL|MUFU.EX2" | sort | uniq -c
      done
    fi
  } >"$OUT/ptxas.txt" 2>&1
  ls -la "$BUILD/longserve" "$BUILD/bench/cuda" 2>/dev/null | head -20
  return $rc
}
export -f build_section
section build 360 build_section

# ---- tests: the whole ctest suite; on a GPU machine no CUDA test may skip ----
tests_section() {
  # Everything but the SmolLM2 tests, whose model (a 100 MB GGUF from PyPI) cannot be carried here.
  # ctest stops itself before the section's limit, so the summary below is always printed (the
  # log itself may not come back: a device call returns at most 8 files).
  # GPU_CHECK_TESTS: a ctest -R pattern to run a subset (a follow-up call after a whole run).
  local filter=()
  [ -n "${GPU_CHECK_TESTS:-}" ] && filter=(-R "$GPU_CHECK_TESTS")
  timeout 400 ctest --test-dir "$BUILD" -j "$JOBS" --timeout 240 --output-on-failure --no-tests=error -E smollm2 \
    "${filter[@]}" --output-junit "$OUT/ctest.xml" >"$OUT/tests.log" 2>&1
  local rc=$?
  [ "$rc" -eq 124 ] && echo "ctest: stopped after 400 s; $(grep -c ' Passed' "$OUT/tests.log") passed by then"
  grep -E "tests passed|tests failed|\*\*\*Failed|\*\*\*Exception|Not Run|Timeout|Skipped" "$OUT/tests.log" | head -40
  grep -E "^\[ model    \]" "$OUT/tests.log" | head -20
  local skipped
  skipped=$(grep -cE "(Cuda|GpuServer).*\*\*\*Skipped" "$OUT/tests.log" || true)
  echo "CUDA tests skipped on the GPU machine: $skipped"
  [ "$skipped" -gt 0 ] && rc=1
  return $rc
}
export -f tests_section
section tests 430 tests_section

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
  "$BUILD/bench/cuda/bench_cuda_kernels" --out "$RESULTS" "${args[@]}"
  local rc=$?
  # The experimental warp-specialised wgmma prefill kernel, in its own process (a fault there
  # must not cost the numbers above).
  local pargs=()
  [ "$QUICK" = 1 ] && pargs=(--prefill-tokens 8192,32768)
  "$BUILD/bench/cuda/bench_cuda_kernels" --out "$RESULTS" --sections prefill --prefill-kernels wgmma-ws \
    "${pargs[@]}" || echo "bench_cuda_kernels --prefill-kernels wgmma-ws failed (exit $?)"
  # The opt-in ping-pong variant (2 and 3 stages), in a process of their own too.
  local pp=wgmma-pp,wgmma-pp3
  "$BUILD/bench/cuda/bench_cuda_kernels" --out "$RESULTS" --sections prefill --prefill-kernels "$pp" \
    "${pargs[@]}" || echo "bench_cuda_kernels --prefill-kernels $pp failed (exit $?)"
  return $rc
}
export -f kernels_section
if wanted kernels || wanted e2e || wanted hf; then wait_model; fi
section kernels 150 kernels_section

# ---- kernel variants side by side (only with --only variants): each A/B in its own process,
# the variants alternated inside it. VARIANT_PREFILL_TOKENS / VARIANT_CONTEXTS narrow the sweep.
variants_section() {
  local toks=${VARIANT_PREFILL_TOKENS:-8192,32768,131072} ctx=${VARIANT_CONTEXTS:-65536,131072} rc=0
  # Prefill: the warp-specialised kernel against its ping-pong form, each with its K/V producer
  # as chosen (TMA on long spans), cp.async only and TMA for every span.
  "$BUILD/bench/cuda/bench_cuda_kernels" --out "$RESULTS" --sections prefill --prefill-tokens "$toks" \
    --prefill-kernels wgmma-ws,wgmma-ws-cp,wgmma-ws-tma,wgmma-pp,wgmma-pp-cp,wgmma-pp-tma \
    || { echo "prefill variants failed (exit $?)"; rc=1; }
  # Prefill over quantized pages: the mma.sync kernel (4 and 8 warps) against the warp-specialised
  # one (kAuto's choice at head_dim 128), bf16 pages beside them.
  "$BUILD/bench/cuda/bench_cuda_kernels" --out "$RESULTS" --sections prefill --prefill-tokens 8192,32768 \
    --prefill-kernels mma,wgmma-ws --kv-formats bf16,fp8,int8,int4 \
    || { echo "quantized prefill variants failed (exit $?)"; rc=1; }
  # Decode over bf16 and quantized pages (prefetch off: the quantized kernel never prefetches).
  "$BUILD/bench/cuda/bench_cuda_kernels" --out "$RESULTS" --sections decode --kv-formats bf16,fp8,int8,int4 \
    --decode-l2-prefetch 0 --batches 1,8,32 --contexts "$ctx" \
    --policies dense,lserve --decode-rounds 2 || { echo "decode variants failed (exit $?)"; rc=1; }
  # FP8 weights against bf16; up to 8 rows both FP8 paths (the e4m3 GEMV and cuBLASLt's GEMM),
  # from 16 rows both GEMM forms (outer-vector scales, unscaled + epilogue).
  "$BUILD/bench/cuda/bench_cuda_kernels" --out "$RESULTS" --sections fp8 \
    --fp8-m 1,2,4,5,6,8,16,256,512,4096,16384 || { echo "fp8 variants failed (exit $?)"; rc=1; }
  # cuBLASLt's heuristic algorithms for bf16 and the e4m3 forms, and the FP8 passes alone.
  "$BUILD/bench/cuda/bench_cuda_kernels" --out "$RESULTS" --sections lt-algos \
    --lt-algos-m 4096,16384 --lt-algos-max 8 || { echo "lt-algos failed (exit $?)"; rc=1; }
  return $rc
}
export -f variants_section
if [[ "$ONLY" == *",variants,"* ]]; then wait_model; section variants 420 variants_section; fi

# ---- host <-> device page transfers (the host KV tier's data plane) ----
transfers_section() {
  local args=()
  [ "$QUICK" = 1 ] && args=(--sections h2d,d2h --rounds 3)
  "$BUILD/bench/cuda/bench_cuda_page_copy" --out "$RESULTS" "${args[@]}"
}
export -f transfers_section
section transfers 120 transfers_section

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
  "$BUILD/bench/cuda/bench_cuda_e2e" --model "$MODEL_DIR" --out "$RESULTS" "${args[@]}"
}
export -f e2e_section
section e2e 200 e2e_section

# ---- the host KV tier (only with --only ...: each fits one call's budget; docs/hierarchical-kv-gpu.md)
# tierk: where one tiered decode layer's time goes (bench_cuda_kv_tier: residency op, copies of
#   the misses, attention through slots vs without), batch 1 and 8, 32K and 128K.
# tier32k / tier128k: the 8B-shaped model decoding with lserve at buffer ratios 1..8 against
#   every page resident in the same process (TPOT, hit ratio, vs_resident), batch 1/8/32 at 32K
#   and 1/8 at 128K (32 x 128K of homes is 256 GB of host memory); TTFT with the tier and with
#   its write-through off (--kv-save 0) at the same length.
# tiercap: the most 128K-token sequences that decode at once, dense and lserve, tier off and on;
#   TIER_FORMATS (default auto) lists KV page formats (auto,int8,int4,fp8), TIER_CAP_CASES picks
#   "policy:tiers" pairs (default "dense:off,on lserve:off,on").
# kvformats: decode TPOT at 128K per KV page format (KV_FORMATS, default auto,fp8,int8,int4), dense
#   and lserve, all pages resident, batches KV_FORMAT_BATCHES (default 1,3: three dense 128K
#   sequences fit an H100 in bf16).
# cpuquant: the CPU's ISA variants of the quantized kernels (below).
tierk_section() {
  "$BUILD/bench/cuda/bench_cuda_kv_tier" --out "$RESULTS" --batches 1,8 --contexts 32768,131072
}
tier32k_section() {
  [ -f "$MODEL_DIR/model.safetensors.index.json" ] || { echo "no model in $MODEL_DIR"; return 1; }
  "$BUILD/bench/cuda/bench_cuda_e2e" --model "$MODEL_DIR" --out "$RESULTS" --policies lserve \
    --ttft 32768 --tpot 32768 --steps 16 --batches ${TIER_BATCHES:-1,8,32} --offload-ratios ${TIER_RATIOS:-0,1,2,4,5,8}
  "$BUILD/bench/cuda/bench_cuda_e2e" --model "$MODEL_DIR" --out "$RESULTS" --policies lserve \
    --ttft 32768 --tpot "" --batches 1 --offload-ratios 4 --kv-save 0
}
tier128k_section() {
  [ -f "$MODEL_DIR/model.safetensors.index.json" ] || { echo "no model in $MODEL_DIR"; return 1; }
  "$BUILD/bench/cuda/bench_cuda_e2e" --model "$MODEL_DIR" --out "$RESULTS" --policies lserve \
    --ttft 131072 --tpot 131072 --steps 12 --batches 1,8 --offload-ratios 0,1,2,4,5,8
  "$BUILD/bench/cuda/bench_cuda_e2e" --model "$MODEL_DIR" --out "$RESULTS" --policies lserve \
    --ttft 131072 --tpot "" --batches 1 --offload-ratios 4 --kv-save 0
}
tiercap_section() {
  [ -f "$MODEL_DIR/model.safetensors.index.json" ] || { echo "no model in $MODEL_DIR"; return 1; }
  local case rc=0
  for case in ${TIER_CAP_CASES:-dense:off,on lserve:off,on}; do
    [[ "$case" == *:* ]] || { echo "TIER_CAP_CASES entry '$case' is not policy:tiers"; rc=1; continue; }
    "$BUILD/bench/cuda/bench_cuda_e2e" --model "$MODEL_DIR" --out "$RESULTS" --policies "${case%%:*}" \
      --ttft "" --tpot "" --batches "" --capacity 131072 --capacity-ratio 4 --capacity-tiers "${case#*:}" \
      --kv-cache-dtype "${TIER_FORMATS:-auto}" || rc=1
  done
  return $rc
}
kvformats_section() {
  [ -f "$MODEL_DIR/model.safetensors.index.json" ] || { echo "no model in $MODEL_DIR"; return 1; }
  "$BUILD/bench/cuda/bench_cuda_e2e" --model "$MODEL_DIR" --out "$RESULTS" --policies dense,lserve \
    --ttft "" --tpot 131072 --steps 12 --batches "${KV_FORMAT_BATCHES:-1,3}" \
    --kv-cache-dtype "${KV_FORMATS:-auto,fp8,int8,int4}"
}
export -f tierk_section tier32k_section tier128k_section tiercap_section kvformats_section
if [[ "$ONLY" == *",tierk,"* ]]; then section tierk 150 tierk_section; fi
if [[ "$ONLY" == *",tier32k,"* ]]; then wait_model; section tier32k 420 tier32k_section; fi
if [[ "$ONLY" == *",tier128k,"* ]]; then wait_model; section tier128k 480 tier128k_section; fi
if [[ "$ONLY" == *",tiercap,"* ]]; then wait_model; section tiercap 420 tiercap_section; fi
if [[ "$ONLY" == *",kvformats,"* ]]; then wait_model; section kvformats 240 kvformats_section; fi

# ---- cpuquant (only with --only ...,cpuquant): the CPU kernels' ISA variants on this machine's
# CPU (AVX-512 / VNNI where it has them): AVX2 vs VNNI quantized-weight GEMV/GEMM per block type,
# fused vs dequantizing decode attention on quantized KV pages, alternated in one process
# (docs/cpu-quant-kernels.md). CPUQUANT_ARGS overrides the threads / repeats / context. ----
cpuquant_section() {
  grep -o -w -E 'avx512(f|bw|vl|dq|_vnni)|avx_vnni' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
  # shellcheck disable=SC2086
  "$BUILD/bench/kernels/bench_quant_variants" ${CPUQUANT_ARGS:---threads 1,16 --reps 5} | tee "$OUT/cpuquant.txt"
}
export -f cpuquant_section
if [[ "$ONLY" == *",cpuquant,"* ]]; then section cpuquant 90 cpuquant_section; fi

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
      --log-file "$OUT/ncu_step.csv" "$BUILD/bench/cuda/bench_cuda_e2e" --model "$MODEL_DIR" --policies "$policy" \
      --ttft= --tpot "$ctx" --steps 4 --profile-step 1 >"$OUT/ncu_step.log" 2>&1 || tail -5 "$OUT/ncu_step.log"
    python3 scripts/gpu/ncu_summary.py "$OUT/ncu_step.csv" --steps 4 | tee "$OUT/ncu_step.md"
  fi
  local sec="--section SpeedOfLight --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats --section ComputeWorkloadAnalysis"
  local files=()
  if [[ "$parts" == *",decode,"* ]]; then
    "$NCU" --clock-control none -k regex:decode_attention --launch-count 1 $sec "$BUILD/bench/cuda/bench_cuda_kernels" \
      --sections decode --batches 8 --contexts 32768 --policies dense >"$OUT/ncu_decode_dense.txt" 2>&1
    "$NCU" --clock-control none -k regex:decode_attention --launch-count 1 $sec "$BUILD/bench/cuda/bench_cuda_kernels" \
      --sections decode --batches 8 --contexts 32768 --policies lserve >"$OUT/ncu_decode_lserve.txt" 2>&1
    files+=(ncu_decode_dense ncu_decode_lserve)
  fi
  if [[ "$parts" == *",select,"* ]]; then
    # One eager call of each kernel per batch size (the first replica's select + attention).
    for b in 1 8; do
      : >"$OUT/ncu_select_b$b.txt"
      for k in "bounds|choose" "decode_attention|decode_reduce"; do
        "$NCU" --clock-control none -k "regex:$k" --launch-count 2 $sec \
          "$BUILD/bench/cuda/bench_cuda_kernels" --sections decode --batches $b --contexts 131072 --policies lserve \
          >>"$OUT/ncu_select_b$b.txt" 2>&1
      done
      files+=(ncu_select_b$b)
    done
  fi
  if [[ "$parts" == *",prefill,"* ]]; then
    "$NCU" --clock-control none -k regex:prefill_attention --launch-count 1 $sec --section InstructionStats \
      "$BUILD/bench/cuda/bench_cuda_kernels" --sections prefill --prefill-tokens 32768 --policies dense >"$OUT/ncu_prefill.txt" 2>&1
    "$NCU" --clock-control none -k regex:prefill_wgmma --launch-count 1 $sec --section InstructionStats \
      "$BUILD/bench/cuda/bench_cuda_kernels" --sections prefill --prefill-tokens 32768 --policies dense >"$OUT/ncu_prefill_wgmma.txt" 2>&1
    # The warp-specialised kernel: stall reasons, and its SASS-level counters split into the
    # producer's and the consumers' share (scripts/gpu/ncu_source_split.py).
    local ws=(--sections prefill --prefill-tokens 32768 --policies dense --prefill-kernels wgmma-ws)
    "$NCU" --clock-control none -k regex:prefill_wgmma_ws --launch-count 1 --section WarpStateStats \
      --section SchedulerStats --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
      "$BUILD/bench/cuda/bench_cuda_kernels" "${ws[@]}" >"$OUT/ncu_prefill_ws.txt" 2>&1
    "$NCU" --clock-control none -k regex:prefill_wgmma_ws --launch-count 1 --section SourceCounters \
      --page source --print-source sass --csv "$BUILD/bench/cuda/bench_cuda_kernels" "${ws[@]}" \
      >/tmp/ncu_prefill_ws_source.csv 2>&1 &&
      python3 scripts/gpu/ncu_source_split.py /tmp/ncu_prefill_ws_source.csv >>"$OUT/ncu_prefill_ws.txt" 2>&1
    files+=(ncu_prefill ncu_prefill_wgmma ncu_prefill_ws)
  fi
  for f in "${files[@]}"; do
    echo "== $f"
    grep -E "^  [a-z_]+.*\(|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Stall|Warp Cycles Per Issued|Issue Slots Busy|L2 Hit|L1/TEX Hit|Executed Ipc|Waves Per SM|Dynamic Shared|Grid Size" "$OUT/$f.txt" | head -${PROFILE_LINES:-40}
  done
}
export -f profile_section
if [[ "$ONLY" == *",profile,"* ]]; then wait_model; section profile 330 profile_section; fi

hf_section() {
  [ -f "$MODEL_DIR/model.safetensors.index.json" ] || { echo "no model in $MODEL_DIR"; return 1; }
  python3 scripts/gpu/bench_gpu_e2e.py --model "$MODEL_DIR" --out "$RESULTS"
}
export -f hf_section
section hf 120 hf_section

# start_server LOG PORT FLAGS...: `longserve serve --device cuda` on the 8B-shaped model in the
# background, its output in LOG; waits up to 300 s for /health. Returns 0 with SERVER_PID set, or
# 1 (the log's tail printed, the process gone) when it does not come up.
start_server() {
  local log=$1 port=$2
  shift 2
  "$BUILD/longserve" serve --device cuda --model "$MODEL_DIR" --served-model-name llama3-8b-shape \
    --port "$port" "$@" >"$log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    kill -0 $SERVER_PID 2>/dev/null || break
    sleep 0.5
  done
  tail -5 "$log"
  kill $SERVER_PID 2>/dev/null
  wait $SERVER_PID 2>/dev/null
  return 1
}
export -f start_server

# ---- serving: `longserve serve --device cuda` on the 8B-shaped model under `longserve bench
# serve`, dense and lserve. SERVE_WORKLOADS: "NAME:INPUT:OUTPUT:PROMPTS:CONCURRENCY[:RATE]"
# entries (CONCURRENCY 0 = no cap; RATE requests per second, default inf = all at once);
# SERVE_MAX_MODEL_LEN (default 65536); SERVE_POLICIES (dense, lserve, lserve+tier: the host KV tier
# on; +int8 / +int4 / +fp8: that KV page format); SERVE_EXTRA_FLAGS; SERVE_REQUEST_TIMEOUT_S caps
# one request. ----
serve_section() {
  [ -f "$MODEL_DIR/model.safetensors.index.json" ] || { echo "no model in $MODEL_DIR"; return 1; }
  local workloads=${SERVE_WORKLOADS:-"c16-16k:16384:128:32:16 burst-32k:32768:1024:40:0"}
  local policies=${SERVE_POLICIES:-"dense lserve"} port=8123 rc=0
  mkdir -p "$OUT/serve"
  for policy in $policies; do
    # A "+tier" suffix (e.g. lserve+tier) serves with the host KV tier on, "+int8" / "+int4" /
    # "+fp8" with that KV page format (e.g. lserve+tier+int8); SERVE_EXTRA_FLAGS (e.g.
    # "--working-set-admission off") go to every server.
    local base=${policy%%+*} fmtx
    local flags="--attention $base"
    [ "$base" = lserve ] && flags="$flags --streaming-ratio 0.5 --token-budget 4096"
    [[ "$policy" == *+tier* ]] && flags="$flags --kv-offload on"
    for fmtx in fp8 int8 int4; do [[ "$policy" == *+$fmtx* ]] && flags="$flags --kv-cache-dtype $fmtx"; done
    flags="$flags ${SERVE_EXTRA_FLAGS:-}"
    # shellcheck disable=SC2086
    start_server "$OUT/serve/server-$policy.log" $port --max-num-seqs 64 \
      --max-model-len "${SERVE_MAX_MODEL_LEN:-65536}" $flags || { echo "serve $policy: the server did not come up"; rc=1; continue; }
    local server=$SERVER_PID
    grep -m1 -E "KV cache" "$OUT/serve/server-$policy.log"
    for w in $workloads; do
      IFS=: read -r name input output prompts conc rate <<<"$w"
      rate=${rate:-inf}
      local cflag=(--max-concurrency "$conc")
      [ "$conc" = 0 ] && cflag=()
      # Requests running at once and KV use, sampled from the server's gauges during the run.
      (while sleep 1; do
        curl -sf "http://127.0.0.1:$port/metrics" | awk '/^vllm:num_requests_running/ {r=$2} /^vllm:kv_cache_usage_perc/ {k=$2} /^vllm:num_preemptions_total/ {p=$2} END {print r, k, p}'
      done) >"$OUT/serve/$policy-$name.gauges" 2>/dev/null &
      local poller=$!
      timeout "${SERVE_WORKLOAD_LIMIT_S:-240}" "$BUILD/longserve" bench serve --port $port \
        --model "$MODEL_DIR" --served-model-name llama3-8b-shape --random-input-len "$input" --random-output-len "$output" \
        --num-prompts "$prompts" --request-rate "$rate" "${cflag[@]}" --seed 1 --disable-tqdm \
        --request-timeout "${SERVE_REQUEST_TIMEOUT_S:-600}" --percentile-metrics ttft,tpot,itl,e2el \
        --save-result --result-dir "$OUT/serve" --result-filename "$policy-$name.json" \
        --metadata "attention=$policy" "workload=$name" >"$OUT/serve/$policy-$name.log" 2>&1
      local brc=$?
      kill $poller 2>/dev/null
      wait $poller 2>/dev/null
      echo "serve $policy $name: exit $brc"
      [ $brc -ne 0 ] && rc=1
      python3 - "$OUT/serve/$policy-$name.json" "$policy" "$name" "$input" "$output" "$prompts" "$conc" "$brc" "$rate" >>"$RESULTS" <<'PY'
import json, os, sys
path, policy, name, inp, outp, n, conc, rc, rate = sys.argv[1:]
row = {"bench": "serve", "policy": policy, "workload": name, "input": int(inp), "output": int(outp),
       "prompts": int(n), "concurrency": int(conc), "rate": rate, "exit": int(rc)}
gauges = [l.split() for l in open(path.replace(".json", ".gauges")) if len(l.split()) == 3] if os.path.exists(path.replace(".json", ".gauges")) else []
if gauges:
    row["max_running"] = max(float(g[0]) for g in gauges)
    row["max_kv_usage"] = max(float(g[1]) for g in gauges)
    row["preemptions"] = max(float(g[2]) for g in gauges)
if os.path.exists(path):
    r = json.load(open(path))
    for k in ["completed", "duration", "request_throughput", "output_throughput", "mean_ttft_ms",
              "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "p99_itl_ms", "mean_e2el_ms", "max_concurrent_requests"]:
        if k in r:
            row[k] = r[k]
print(json.dumps(row))
PY
    done
    kill $server 2>/dev/null
    wait $server 2>/dev/null
    grep -E "ERROR|error" "$OUT/serve/server-$policy.log" | head -5
  done
  return $rc
}
export -f serve_section
if wanted serve; then wait_model; section serve 480 serve_section; fi

# ---- tensor parallelism (only with --only tp / tpserve; docs/tensor-parallel.md). Needs 2 GPUs (4
# adds TP = 4). TP_MODEL_DIR (default the 8B-shaped model; e.g. the llama3-70b-shape preset of
# make_bundled_model.py, generated beforehand) and TP_SIZES (default 1,2 or 1,2,4 by the GPUs
# visible) choose what runs. Rows go to results.jsonl, the table to gpu_results.md; logs stay in
# /tmp/longserve-tp (their errors are printed).
# tp: bench_cuda_e2e --tensor-parallel-size, dense and lserve, TTFT and TPOT at TP_LENS (default
#   32K and 128K), and the collectives' share of a decode step (tp_collectives lines).
# tpserve: `longserve bench serve` throughput at 32K in / 1K out: one server with
#   --tensor-parallel-size 2 (GPUs 0, 1) against two TP = 1 servers (CUDA_VISIBLE_DEVICES=0 and
#   =1, two ports) sharing the same requests (TP_SERVE_PROMPTS, default 16, at concurrency
#   TP_SERVE_CONCURRENCY, default 8: one wave per server, a few minutes in all; each replica half
#   of both), throughputs summed. Without TP_MODEL_DIR the servers run the 8B shape with
#   --load-format dummy from a config-only directory (no model generated or read).
# tp70b: the Llama-3-70B shape (80 layers) with --load-format dummy (config-only directory, the
#   weights generated on each rank, ~35 GB per GPU) at TP = 4: bench_cuda_e2e TTFT and TPOT at
#   TP70B_LENS (default 32K and 128K), dense and lserve, the all-reduce's share of a decode step.
#   Rows in $OUT/tp70b.jsonl (and results.jsonl), a table in $OUT/tp70b.md. Needs 4 GPUs. ----
tp_gpus() { nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l; }
# config_only_model PRESET DIR: make_bundled_model.py --config-only (config.json + tokenizer, no
# weights) for --load-format dummy, unless DIR already has them.
config_only_model() {
  [ -f "$2/config.json" ] && [ -f "$2/tokenizer.json" ] && return 0
  mkdir -p "$(dirname "$2")"
  timeout 180 python3 scripts/model/make_bundled_model.py --preset "$1" --out "$2" --config-only \
    >"$2.log" 2>&1 || { echo "config-only $1: exit $?"; tail -5 "$2.log"; return 1; }
}
export -f tp_gpus config_only_model
tp_section() {
  local model=${TP_MODEL_DIR:-$MODEL_DIR} gpus sizes lens=${TP_LENS:-32768,131072}
  [ -f "$model/model.safetensors.index.json" ] || { echo "no model in $model"; return 1; }
  gpus=$(tp_gpus)
  [ "$gpus" -ge 2 ] || { echo "tp: needs 2 GPUs, $gpus visible"; return 1; }
  sizes=1,2
  [ "$gpus" -ge 4 ] && sizes=1,2,4
  sizes=${TP_SIZES:-$sizes}
  mkdir -p /tmp/longserve-tp
  echo "tp: $model on $gpus GPUs, sizes $sizes, lengths $lens"
  NCCL_NVLS_ENABLE=0 "$BUILD/bench/cuda/bench_cuda_e2e" --model "$model" --out "$RESULTS" \
    --tensor-parallel-size "$sizes" --policies dense,lserve --ttft "$lens" --tpot "$lens" \
    >/tmp/longserve-tp/bench.log 2>&1 || { echo "bench_cuda_e2e: exit $?"; tail -20 /tmp/longserve-tp/bench.log; return 1; }
  grep -E '"(tp_collectives|tpot|ttft)"' /tmp/longserve-tp/bench.log | grep -E '"tp"' | head -40
}
tpserve_section() {
  local model=${TP_MODEL_DIR:-/tmp/longserve-tp/llama3-8b-config} n=${TP_SERVE_PROMPTS:-16}
  local c=${TP_SERVE_CONCURRENCY:-8} rc=0
  [ "$(tp_gpus)" -ge 2 ] || { echo "tpserve: needs 2 GPUs"; return 1; }
  local dir=/tmp/longserve-tp
  mkdir -p "$dir"
  rm -f "$dir"/serve-*.json
  local common=(--max-model-len 36864 --attention dense)
  if [ -z "${TP_MODEL_DIR:-}" ]; then
    config_only_model llama3-8b-shape "$model" || return 1
    common+=(--load-format dummy)
  else
    [ -f "$model/model.safetensors.index.json" ] || { echo "no model in $model"; return 1; }
  fi
  # client NAME PORT PROMPTS CONCURRENCY SEED: one `bench serve` run, its result in $dir/serve-NAME.json
  client() {
    timeout "${TP_SERVE_LIMIT_S:-300}" "$BUILD/longserve" bench serve --port "$2" --model "$model" \
      --served-model-name llama3-8b-shape --random-input-len 32768 --random-output-len 1024 \
      --num-prompts "$3" --max-concurrency "$4" --request-rate inf --seed "$5" --disable-tqdm \
      --request-timeout 600 --save-result --result-dir "$dir" --result-filename "serve-$1.json" \
      >"$dir/client-$1.log" 2>&1 || { echo "tpserve client $1: exit $?"; tail -5 "$dir/client-$1.log"; }
  }
  # One TP = 2 server on GPUs 0 and 1.
  if MODEL_DIR=$model CUDA_VISIBLE_DEVICES=0,1 start_server "$dir/server-tp2.log" 8131 \
      --tensor-parallel-size 2 --max-num-seqs "$c" "${common[@]}"; then
    local s=$SERVER_PID
    client tp2 8131 "$n" "$c" 1
    kill $s 2>/dev/null
    wait $s 2>/dev/null
  else
    echo "tpserve: the TP = 2 server did not come up"; rc=1
  fi
  grep -E "ERROR|error" "$dir/server-tp2.log" | head -5
  # Two TP = 1 servers, one per GPU, each taking half of the requests at half the concurrency.
  local half=$((n / 2)) chalf=$(((c + 1) / 2)) s0="" s1=""
  MODEL_DIR=$model CUDA_VISIBLE_DEVICES=0 start_server "$dir/server-r0.log" 8132 \
    --max-num-seqs "$chalf" "${common[@]}" && s0=$SERVER_PID
  MODEL_DIR=$model CUDA_VISIBLE_DEVICES=1 start_server "$dir/server-r1.log" 8133 \
    --max-num-seqs "$chalf" "${common[@]}" && s1=$SERVER_PID
  if [ -n "$s0" ] && [ -n "$s1" ]; then
    client r0 8132 "$half" "$chalf" 1 &
    local c0=$!
    client r1 8133 "$((n - half))" "$chalf" 2 &
    local c1=$!
    wait $c0 $c1
  else
    echo "tpserve: a TP = 1 replica did not come up"; rc=1
  fi
  for p in $s0 $s1; do kill $p 2>/dev/null; wait $p 2>/dev/null; done
  grep -hE "ERROR|error" "$dir/server-r0.log" "$dir/server-r1.log" | head -5
  python3 - "$dir" "$n" "$c" >>"$RESULTS" <<'PY'
import json, os, sys
d, n, c = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def load(name):
    p = os.path.join(d, f"serve-{name}.json")
    return json.load(open(p)) if os.path.exists(p) else None
keys = ["completed", "duration", "request_throughput", "output_throughput", "total_token_throughput",
        "mean_ttft_ms", "mean_tpot_ms"]
rows = []
tp2 = load("tp2")
rows.append({"bench": "tp_serve", "config": "tp2", "prompts": n, "concurrency": c,
             **({k: tp2[k] for k in keys if k in tp2} if tp2 else {"error": "no result"})})
r0, r1 = load("r0"), load("r1")
row = {"bench": "tp_serve", "config": "2x tp1", "prompts": n, "concurrency": c}
if r0 and r1:
    for k in ["completed", "request_throughput", "output_throughput", "total_token_throughput"]:
        if k in r0 and k in r1:
            row[k] = r0[k] + r1[k]  # two replicas side by side: throughputs add
    row["duration"] = max(r0.get("duration", 0), r1.get("duration", 0))
    for k in ["mean_ttft_ms", "mean_tpot_ms"]:
        if k in r0 and k in r1:
            row[k] = (r0[k] + r1[k]) / 2
else:
    row["error"] = "no result"
rows.append(row)
for r in rows:
    print(json.dumps(r))
PY
  grep '"tp_serve"' "$RESULTS"
  return $rc
}
tp70b_section() {
  local model=${TP70B_MODEL_DIR:-/tmp/longserve-tp/llama3-70b-config} lens=${TP70B_LENS:-32768,131072}
  local res=$OUT/tp70b.jsonl
  [ "$(tp_gpus)" -ge 4 ] || { echo "tp70b: needs 4 GPUs, $(tp_gpus) visible"; return 1; }
  config_only_model llama3-70b-shape "$model" || return 1
  mkdir -p /tmp/longserve-tp
  local rc=0
  : >"$res"
  echo "tp70b: $model (dummy weights) at TP = 4, lengths $lens"
  NCCL_NVLS_ENABLE=0 "$BUILD/bench/cuda/bench_cuda_e2e" --model "$model" --load-format dummy \
    --out "$res" --tensor-parallel-size 4 --policies dense,lserve --ttft "$lens" --tpot "$lens" \
    >/tmp/longserve-tp/bench70b.log 2>&1 || { rc=$?; echo "bench_cuda_e2e: exit $rc"; tail -20 /tmp/longserve-tp/bench70b.log; }
  cat "$res" >>"$RESULTS"
  python3 - "$res" "$OUT/tp70b.md" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
out = ["| policy | context | TTFT (s) | TPOT median (ms) | all-reduce share of a decode step | note |",
       "|---|---|---|---|---|---|"]
cases = {}
for r in rows:
    if "error" in r:
        out.append(f"| {r.get('policy', '?')} | {r.get('tokens', r.get('context', ''))} | | | | "
                   f"{r.get('bench')}: {r['error']} |")
        continue
    if r.get("bench") == "ttft":
        cases.setdefault((r["policy"], r["tokens"]), {})["ttft"] = r["ms"] / 1e3
    elif r.get("bench") == "tpot":
        c = cases.setdefault((r["policy"], r["context"]), {})
        c["tpot"] = r["median_ms"]
        c["share"] = r.get("allreduce_share")
def f(v, spec):
    return spec.format(v) if v is not None else ""
for (pol, ctx), c in sorted(cases.items()):
    out.append(f"| {pol} | {ctx // 1024}K | {f(c.get('ttft'), '{:.2f}')} | "
               f"{f(c.get('tpot'), '{:.2f}')} | {f(c.get('share'), '{:.1%}')} | |")
out.append("")
out.append("Llama-3-70B shape (80 layers, random bf16 weights from --load-format dummy), TP = 4; "
           "dummy weights select nearly at random, so lserve's numbers reflect its work, not its "
           "selection quality. Raw rows: tp70b.jsonl.")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print("\n".join(out))
PY
  return $rc
}
export -f tp_section tpserve_section tp70b_section
if [[ "$ONLY" == *",tp,"* ]]; then wait_model; section tp 525 tp_section; fi
if [[ "$ONLY" == *",tpserve,"* ]]; then section tpserve 525 tpserve_section; fi
if [[ "$ONLY" == *",tp70b,"* ]]; then section tp70b 580 tp70b_section; fi

# ---- prefix caching (only with --only prefix): a long shared prefix (a document) with many short
# questions through `longserve serve --device cuda`, caching off vs on. One question at a time
# (--max-concurrency 1), so the first request misses and the others hit: the median TTFT is a
# hit's with caching on and a full prefill's with it off. PREFIX_LENS (default "32768 131072"),
# PREFIX_POLICIES (default "dense lserve"), PREFIX_PROMPTS (default 12). ----
prefix_section() {
  [ -f "$MODEL_DIR/model.safetensors.index.json" ] || { echo "no model in $MODEL_DIR"; return 1; }
  local port=8124 rc=0
  mkdir -p "$OUT/prefix"
  for len in ${PREFIX_LENS:-32768 131072}; do
    for policy in ${PREFIX_POLICIES:-dense lserve}; do
      for caching in off on; do
        local flags="--attention $policy"
        [ "$policy" = lserve ] && flags="$flags --streaming-ratio 0.5 --token-budget 4096"
        [ "$caching" = on ] && flags="$flags --enable-prefix-caching"
        [ "$caching" = off ] && flags="$flags --no-enable-prefix-caching"
        local tag="$policy-$len-$caching"
        # shellcheck disable=SC2086
        start_server "$OUT/prefix/server-$tag.log" $port --max-num-seqs 16 \
          --max-model-len $((len + 4096)) $flags || { echo "prefix $tag: the server did not come up"; rc=1; continue; }
        local server=$SERVER_PID
        "$BUILD/longserve" bench serve --port $port --model "$MODEL_DIR" --served-model-name llama3-8b-shape \
          --random-prefix-len "$len" --random-input-len 64 --random-output-len 32 \
          --num-prompts "${PREFIX_PROMPTS:-12}" --max-concurrency 1 --request-rate inf --seed 1 \
          --disable-tqdm --percentile-metrics ttft,tpot,e2el --save-result --result-dir "$OUT/prefix" \
          --result-filename "$tag.json" >"$OUT/prefix/$tag.log" 2>&1 || rc=1
        local cached
        cached=$(curl -sf "http://127.0.0.1:$port/metrics" | awk '/^vllm:prompt_tokens_cached_total/ {print $2}')
        kill $server 2>/dev/null
        wait $server 2>/dev/null
        python3 - "$OUT/prefix/$tag.json" "$policy" "$len" "$caching" "${cached:-0}" >>"$RESULTS" <<'PY'
import json, os, sys
path, policy, length, caching, cached = sys.argv[1:]
row = {"bench": "prefix_cache", "policy": policy, "prefix": int(length), "caching": caching,
       "prompt_tokens_cached": float(cached)}
if os.path.exists(path):
    r = json.load(open(path))
    for k in ["completed", "median_ttft_ms", "mean_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "duration"]:
        if k in r:
            row[k] = r[k]
print(json.dumps(row))
PY
        tail -1 "$RESULTS"
      done
    done
  done
  return $rc
}
export -f prefix_section
if [[ "$ONLY" == *",prefix,"* ]]; then wait_model; section prefix 540 prefix_section; fi

# ---- prefix caching, multi-turn mode (only with --only prefix-multiturn): conversations over a
# shared document (`bench serve --multi-turn`), each turn re-sending the history (earlier
# questions and the answers the server gave) plus a new question, caching off vs on. Reports the
# median TTFT per turn index and the cached prompt-token share (with dense attention the hit
# reaches through the previous answers; with lserve through the previous prompts, see
# docs/prefix-caching.md). PREFIX_MT_LEN (document, default 16384), PREFIX_MT_TURNS (default 4),
# PREFIX_MT_CONVERSATIONS (default 8), PREFIX_MT_CONCURRENCY (default 4), PREFIX_POLICIES
# (default "dense lserve"). ----
prefix_multiturn_section() {
  [ -f "$MODEL_DIR/model.safetensors.index.json" ] || { echo "no model in $MODEL_DIR"; return 1; }
  local port=8125 rc=0 len=${PREFIX_MT_LEN:-16384} turns=${PREFIX_MT_TURNS:-4}
  mkdir -p "$OUT/prefix"
  for policy in ${PREFIX_POLICIES:-dense lserve}; do
    for caching in off on; do
      local flags="--attention $policy"
      [ "$policy" = lserve ] && flags="$flags --streaming-ratio 0.5 --token-budget 4096"
      [ "$caching" = on ] && flags="$flags --enable-prefix-caching"
      [ "$caching" = off ] && flags="$flags --no-enable-prefix-caching"
      local tag="multiturn-$policy-$len-$caching"
      # shellcheck disable=SC2086
      start_server "$OUT/prefix/server-$tag.log" $port --max-num-seqs 16 \
        --max-model-len $((len + turns * 1024 + 1024)) $flags || { echo "prefix-multiturn $tag: the server did not come up"; rc=1; continue; }
      local server=$SERVER_PID
      "$BUILD/longserve" bench serve --port $port --model "$MODEL_DIR" --served-model-name llama3-8b-shape \
        --random-prefix-len "$len" --random-input-len 256 --random-output-len 128 \
        --multi-turn "$turns" --num-prompts "${PREFIX_MT_CONVERSATIONS:-8}" \
        --max-concurrency "${PREFIX_MT_CONCURRENCY:-4}" --request-rate inf --seed 1 \
        --disable-tqdm --percentile-metrics ttft,tpot,e2el --save-result --result-dir "$OUT/prefix" \
        --result-filename "$tag.json" >"$OUT/prefix/$tag.log" 2>&1 || rc=1
      kill $server 2>/dev/null
      wait $server 2>/dev/null
      python3 - "$OUT/prefix/$tag.json" "$policy" "$len" "$caching" >>"$RESULTS" <<'PY'
import json, os, sys
path, policy, length, caching = sys.argv[1:]
row = {"bench": "prefix_multiturn", "policy": policy, "prefix": int(length), "caching": caching}
if os.path.exists(path):
    r = json.load(open(path))
    for k in ["completed", "median_ttft_ms", "median_tpot_ms", "duration"]:
        if k in r:
            row[k] = r[k]
    m = r.get("multi_turn", {})
    row["cached_token_share"] = m.get("cached_token_share")
    row["turn_median_ttft_ms"] = [t["median_ttft_ms"] for t in m.get("per_turn", [])]
    row["turn_cached_share"] = [t["cached_token_share"] for t in m.get("per_turn", [])]
print(json.dumps(row))
PY
      tail -1 "$RESULTS"
      grep -A12 "Multi-turn" "$OUT/prefix/$tag.log"
    done
  done
  return $rc
}
export -f prefix_multiturn_section
if [[ "$ONLY" == *",prefix-multiturn,"* ]]; then
  wait_model
  section prefix-multiturn 540 prefix_multiturn_section
fi

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
import subprocess
gpu = dev["name"] if dev else (subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                              capture_output=True, text=True).stdout.strip().splitlines() or ["unknown GPU"])[0]
md.append(f"# longserve GPU check: {gpu}\n")
copy, gemm = first("copy"), first("gemm")
tcopy, tgemm = first("torch_copy"), first("torch_gemm")
md.append("## Ceilings (measured in this run)\n")
md.append("| | ours | torch |\n|---|---|---|")
md.append(f"| device-to-device copy, GB/s (read + write) | {f(copy and copy['gbps'])} | {f(tcopy and tcopy['gbps'])} |")
md.append(f"| bf16 GEMM 8192^3, TFLOP/s | {f(gemm and gemm['tflops'])} | {f(tgemm and tgemm['tflops'])} |\n")

md.append("## Prefill attention, Llama-3-8B shape (32 q / 8 kv heads, d 128), batch 1\n")
md.append("Best configuration of each kernel: mma.sync (tile rows) and wgmma (key block rows; ws: the warp-specialised variant; pp / pp3: its ping-pong variant with 2 / 3 stages).\n")
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
              f"{f(dw and dw['ms'], '{:.2f}')} ({str(dw.get('key_block', '-')) + (' ' + dw['kernel'][6:] if dw.get('kernel', 'wgmma') != 'wgmma' else '') if dw else '-'}) | {f(dw and dw['tflops'])} | "
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
em = next((r for r in pick("e2e_model") if "tp" not in r), None)
if em:
    md.append(f"Weights {em['weights_gb']:.2f} GB, {em['bytes_per_token_gb']:.2f} GB read per token; copy BW "
              f"{em['copy_gbps']:.0f} GB/s -> weight-read floor {em['floor_ms']:.2f} ms/token; load {em['load_s']:.1f} s.\n")
md.append("| engine | TTFT 8K ms | TTFT 32K ms | TTFT 128K ms | TPOT 32K ms | TPOT 128K ms | TPOT 128K / floor |")
md.append("|---|---|---|---|---|---|---|")
for pol in ["dense", "streaming", "lserve"]:
    t = {r["tokens"]: r.get("ms") for r in pick("ttft", policy=pol) if not r.get("offload_ratio") and r.get("batch", 1) == 1 and "tp" not in r}
    p = {r["context"]: r for r in pick("tpot", policy=pol) if not r.get("offload_ratio") and r.get("batch", 1) == 1 and "tp" not in r}
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

pc = pick("page_copy")
if pc:
    md.append("## Page transfers: scattered head-pages between pinned host memory and the GPU\n")
    md.append("Share of a bulk pinned copy of the same bytes measured in the same run (target: gather H2D >= 0.8 with <= 16 SMs).\n")
    md.append("| direction | method | SMs | page KB | pages | GB/s | bulk GB/s | of bulk |")
    md.append("|---|---|---|---|---|---|---|---|")
    for r in pc:
        md.append(f"| {r['direction']} | {r['method']} | {r['sms'] if r['sms'] > 0 else 'all'} | {r['page_bytes'] // 1024} | {r['pages']} | {r['gbps']:.1f} | {r['bulk_gbps']:.1f} | {r['of_bulk']:.2f} |")
    ps = pick("page_save") + pick("page_save_overlap")
    if ps:
        md.append("\n| save | method | page KB | GB/s | of bulk D2H | GEMM slowdown beside it |")
        md.append("|---|---|---|---|---|---|")
        for r in ps:
            md.append(f"| {r['bench']} | {r['method']} | {r['page_bytes'] // 1024} | {f(r.get('gbps') or r.get('save_gbps'))} | {f(r.get('of_bulk'), '{:.2f}')} | {f(r.get('slowdown'), '{:.3f}x')} |")
    md.append("")
sv = pick("serve")
if sv:
    md.append("## Serving: `longserve serve --device cuda` + `longserve bench serve`, 8B-shaped random model\n")
    md.append("Random weights select pages nearly at random (lserve's numbers do not reflect a real model's locality).\n")
    md.append("| workload | attention | completed | duration s | req/s | output tok/s | mean TTFT ms | p99 TTFT ms | mean TPOT ms | p99 ITL ms | max running | max KV use | preemptions |")
    md.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in sv:
        wl = f"{r['prompts']} x {r['input'] // 1024}K in / {r['output']} out, " + (f"concurrency {r['concurrency']}" if r['concurrency'] else "all at once")
        md.append(f"| {wl} | {r['policy']} | {r.get('completed', '-')}{'' if r['exit'] == 0 else ' (cut at the time limit)' if r['exit'] == 124 else ' (exit ' + str(r['exit']) + ')'} | "
                  f"{f(r.get('duration'))} | {f(r.get('request_throughput'), '{:.2f}')} | {f(r.get('output_throughput'), '{:.0f}')} | "
                  f"{f(r.get('mean_ttft_ms'), '{:.0f}')} | {f(r.get('p99_ttft_ms'), '{:.0f}')} | {f(r.get('mean_tpot_ms'), '{:.1f}')} | {f(r.get('p99_itl_ms'), '{:.1f}')} | "
                  f"{f(r.get('max_running'), '{:.0f}')} | {f(r.get('max_kv_usage') and 100 * r['max_kv_usage'], '{:.0f}%')} | {f(r.get('preemptions'), '{:.0f}')} |")
    md.append("")
tl = pick("tier_layer")
if tl:
    md.append("## Host KV tier: one decode layer, kernel by kernel (bench_cuda_kv_tier, lserve 8B shape)\n")
    md.append("| batch | context | ratio | slots/row | hit ratio | residency us | copy us | attention us (extra via slots) | extra per layer us | extra per 32-layer step ms |")
    md.append("|---|---|---|---|---|---|---|---|---|---|")
    for r in tl:
        md.append(f"| {r['batch']} | {k(r['context'])} | {r['ratio']} | {r['slots_per_row']} | {r['hit_ratio']:.2f} | "
                  f"{r['residency_us']:.1f} | {r['copy_us']:.1f} | {r['attention_us']:.1f} ({r['attention_extra_us']:+.1f}) | "
                  f"{r['layer_extra_us']:.1f} | {r['step_extra_ms']:.2f} |")
    md.append("")
tier_keys = {(r["policy"], r["context"]) for r in pick("tpot") if r.get("offload_ratio")}
tt = [r for r in pick("tpot") if (r.get("policy"), r.get("context")) in tier_keys and "median_ms" in r]
if tt:
    md.append("## Host KV tier: decode with the tier vs every page resident (same process), 8B-shaped random model\n")
    md.append("Random weights select pages nearly at random: the hit ratios say nothing about a real model's locality.\n")
    md.append("| policy | context | batch | buffer ratio | TPOT ms | vs resident | hit ratio |")
    md.append("|---|---|---|---|---|---|---|")
    for r in tt:
        md.append(f"| {r['policy']} | {k(r['context'])} | {r['batch']} | {r['offload_ratio'] or 'off'} | {r['median_ms']:.2f} | "
                  f"{r['vs_resident']:.2f} | {r['hit_ratio'] if r['hit_ratio'] >= 0 else '-'} |")
    md.append("")
ts = [r for r in pick("ttft") if r.get("offload_ratio") and "ms" in r]
if ts:
    md.append("## Host KV tier: prefill (TTFT) with the tier, saving on and off\n")
    md.append("| policy | tokens | buffer ratio | write-through | ms | vs resident |")
    md.append("|---|---|---|---|---|---|")
    for r in ts:
        base = [x for x in pick("ttft", policy=r["policy"], tokens=r["tokens"]) if not x.get("offload_ratio") and "ms" in x]
        md.append(f"| {r['policy']} | {k(r['tokens'])} | {r['offload_ratio']} | {'on' if r.get('kv_save', True) else 'off'} | {r['ms']:.0f} | "
                  f"{(r['ms'] / base[0]['ms']) if base else float('nan'):.2f} |")
    md.append("")
# Rows of one --kv-cache-dtype list: every format of a (policy, context, batch) all resident.
fmts = {r.get("kv_format") for r in pick("tpot") if not r.get("offload_ratio")}
kf = [r for r in pick("tpot") if len(fmts) > 1 and "vs_first_format" in r and not r.get("offload_ratio") and "median_ms" in r
      and len({x.get("kv_format") for x in pick("tpot", policy=r["policy"], context=r["context"], batch=r["batch"]) if not x.get("offload_ratio")}) > 1]
if kf:
    md.append("## Decode TPOT per KV page format, end to end, 8B-shaped random model (all pages resident)\n")
    md.append(f"Speed-up: the first format's ({kf[0]['kv_format']}; auto = bf16 on CUDA) step time / this one's, same policy, context and batch, same process. Random weights select pages nearly at random; lserve's selected bytes do not depend on it.\n")
    md.append("| policy | KV format | context | batch | TPOT ms | speed-up vs first format | vs weight floor |")
    md.append("|---|---|---|---|---|---|---|")
    for r in kf:
        md.append(f"| {r['policy']} | {r['kv_format']} | {k(r['context'])} | {r['batch']} | {r['median_ms']:.2f} | "
                  f"{f(1 / r['vs_first_format'] if r['vs_first_format'] > 0 else None, '{:.2f}x')} | {r['vs_floor']:.2f} |")
    md.append("")
cap = pick("capacity")
if cap:
    md.append("## Host KV tier: capacity, sequences decoding at once\n")
    base = {r["context"]: r["max_seqs"] for r in cap if r["policy"] == "dense" and not r["kv_offload"] and r.get("kv_format", "auto") in ("auto", "bf16") and r.get("max_seqs")}
    md.append("Random weights select pages nearly at random; capacity does not depend on it. vs dense: against dense, tier off, bf16 pages.\n")
    md.append("| policy | KV format | context | tier | sequences | vs dense | step ms | device GB / seq | host GB / seq | device bound | host bound |")
    md.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in cap:
        fmt_ = r.get("kv_format", "auto")
        if "max_seqs" not in r:
            md.append(f"| {r['policy']} | {fmt_} | {k(r['context'])} | {'on' if r['kv_offload'] else 'off'} | error: {r.get('error', '')} | | | | | | |")
            continue
        md.append(f"| {r['policy']} | {fmt_} | {k(r['context'])} | {'on (ratio %g)' % r['offload_ratio'] if r['kv_offload'] else 'off'} | "
                  f"{r['max_seqs']} | {f(r['max_seqs'] / base[r['context']] if r['context'] in base else None, '{:.1f}x')} | {r['step_ms']:.1f} | {r['device_gb_per_seq']:.2f} | {r['host_gb_per_seq']:.2f} | {r['by_device']} | {r['by_host']} |")
    md.append("")

tpr = [r for r in rows if "tp" in r and r.get("bench") in ("ttft", "tpot", "tp_collectives")]
if tpr:
    md.append("## Tensor parallelism (bench_cuda_e2e --tensor-parallel-size), batch 1\n")
    md.append("Speed-up: TP = 1 time / this time, same policy. Collectives: one decode step's all-reduces (2 per layer + embedding) timed alone; share of the median TPOT.\n")
    md.append("| policy | quantization | TP | TTFT 32K ms | TTFT 128K ms | TPOT 32K ms | TPOT 128K ms | TPOT 32K speed-up | TPOT 128K speed-up | all-reduce ms/step | share of TPOT 32K | share of TPOT 128K |")
    md.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for pol, quant, tp in sorted({(r["policy"], r.get("quantization", "auto"), r["tp"]) for r in tpr}):
        sel = lambda b: [r for r in pick(b, policy=pol, tp=tp) if r.get("quantization", "auto") == quant]
        t = {r["tokens"]: r.get("ms") for r in sel("ttft")}
        p = {r["context"]: r for r in sel("tpot")}
        base = {r["context"]: r.get("median_ms") for r in pick("tpot", policy=pol, tp=1) if r.get("quantization", "auto") == quant}
        cl = sel("tp_collectives")
        ar = cl[0].get("allreduce_ms") if cl else None
        def sp(ctx):
            m = p.get(ctx, {}).get("median_ms")
            return base.get(ctx) / m if m and base.get(ctx) else None
        md.append(f"| {pol} | {quant} | {tp} | {f(t.get(32768), '{:.0f}')} | {f(t.get(131072), '{:.0f}')} | "
                  f"{f(p.get(32768, {}).get('median_ms'), '{:.2f}')} | {f(p.get(131072, {}).get('median_ms'), '{:.2f}')} | "
                  f"{f(sp(32768), '{:.2f}x')} | {f(sp(131072), '{:.2f}x')} | {f(ar, '{:.3f}')} | "
                  f"{f(p.get(32768, {}).get('allreduce_share'), '{:.1%}')} | {f(p.get(131072, {}).get('allreduce_share'), '{:.1%}')} |")
    md.append("")
tps = pick("tp_serve")
if tps:
    md.append("## Tensor parallelism: serving throughput, 32K in / 1K out (dense)\n")
    md.append("| config | prompts | concurrency | completed | duration s | req/s | output tok/s | mean TTFT ms | mean TPOT ms |")
    md.append("|---|---|---|---|---|---|---|---|---|")
    for r in tps:
        md.append(f"| {r['config']} | {r['prompts']} | {r['concurrency']} | {r.get('completed', r.get('error', '-'))} | {f(r.get('duration'))} | "
                  f"{f(r.get('request_throughput'), '{:.3f}')} | {f(r.get('output_throughput'), '{:.0f}')} | "
                  f"{f(r.get('mean_ttft_ms'), '{:.0f}')} | {f(r.get('mean_tpot_ms'), '{:.1f}')} |")
    md.append("")
md.append("## Tests\n")
tl = os.path.join(out, "tests.log")
if os.path.exists(tl):
    text = open(tl).read()
    m = re.search(r"(\d+)% tests passed, (\d+) tests failed out of (\d+)", text)
    if m:
        md.append(f"- ctest: {int(m.group(3)) - int(m.group(2))} of {m.group(3)} passed")
    failed = sorted(set(re.findall(r"\d+ - (\S+) \((?:Failed|Timeout|Not Run|Exception)", text)))
    skipped = sorted(set(re.findall(r"\d+ - (\S+) \(Skipped\)", text)))
    md.append(f"- failed: {len(failed)} {' '.join(failed[:20])}")
    md.append(f"- skipped: {len(skipped)} {' '.join(skipped[:20])}")
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
