#!/usr/bin/env bash
# One-command set-up for a fresh Debian bookworm machine (as root, or with sudo available).
#
#   scripts/setup.sh run    install what is missing, build, run the main job on the bundled model
#   scripts/setup.sh test   install what is missing, build, run the whole test suite
#   scripts/setup.sh build  install what is missing and build only
#
# Debian packages come from scripts/apt-packages.txt (only the missing ones are installed);
# Python packages for the tests come from tests/requirements.txt (pinned) into build/venv.
# Environment: JOBS (build parallelism, default: all cores), BUILD_DIR (default: build),
# UNITY (1: unity build of the GCC and fuzz trees, the default; 0: one object per file).
set -euo pipefail

mode="${1:-run}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build_dir="${BUILD_DIR:-build}"
jobs="${JOBS:-$(nproc)}"

# Each line carries the seconds since the start, so a slow CI run shows which step took the time.
log() { printf '\033[1m== [%5ss] %s\033[0m\n' "$SECONDS" "$*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

install_packages() {
  local missing=()
  while read -r pkg; do
    [ -z "$pkg" ] && continue
    case "$pkg" in \#*) continue ;; esac
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$pkg")
    fi
  done < scripts/apt-packages.txt
  if [ "${#missing[@]}" -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}"
  else
    log "Debian packages: all present"
  fi
}

# ccache (from apt-packages.txt) lets the clang build below reuse the CUDA objects nvcc made for
# the GCC build (nvcc compiles them the same way in both) and speeds up rebuilds.
launchers=()
if command -v ccache >/dev/null 2>&1; then
  launchers=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
             -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi

# A unity build (cmake/LongserveUnity.cmake) compiles each target's files in batches, so the
# heavy headers' templates are instantiated and optimised once per batch: the GCC -O3 tree builds
# in a fraction of the CPU time. The clang tree stays one object per file, so there every file
# still has to include what it uses.
unity=(-DLONGSERVE_UNITY=OFF)
if [ "${UNITY:-1}" = 1 ]; then
  unity=(-DLONGSERVE_UNITY=ON)
fi

build() {
  log "configuring ($build_dir)"
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${launchers[@]}" "${unity[@]}" \
    ${CMAKE_ARGS:-}
  log "building with $jobs jobs"
  cmake --build "$build_dir" -j "$jobs"
}

# The whole tree (tests, benchmarks, the CUDA backend's C++) with clang, warnings as errors, so
# it keeps building with every compiler a user has. -O0: the warnings are the point, not speed,
# and clang's warnings come from its front end, so they do not depend on the optimisation level
# (-O0 compiles about 1.6x faster than -O1 here, which keeps CI within its time).
clang_build() {
  log "building the whole tree with clang ($build_dir-clang)"
  CC=clang CXX=clang++ cmake -S . -B "$build_dir-clang" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_FLAGS_RELEASE="-O0 -DNDEBUG" -DCMAKE_C_FLAGS_RELEASE="-O0 -DNDEBUG" "${launchers[@]}" \
    -DLONGSERVE_UNITY=OFF
  cmake --build "$build_dir-clang" -j "$jobs"
}

python_env() {
  if [ ! -x "$build_dir/venv/bin/python" ]; then
    log "creating $build_dir/venv"
    python3 -m venv "$build_dir/venv"
  fi
  "$build_dir/venv/bin/python" -m pip install -q --disable-pip-version-check -r tests/requirements.txt
  "$build_dir/venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
    -r tests/requirements-nodeps.txt
}

fuzz_build() {
  log "building the libFuzzer targets with clang ($build_dir-fuzz)"
  # -O1 with line tables: enough speed for a short fuzz run and symbolised stack traces, at a
  # fraction of the compile time of -O2 -g.
  CC=clang CXX=clang++ cmake -S . -B "$build_dir-fuzz" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -DNDEBUG" \
    -DLONGSERVE_FUZZ=ON -DLONGSERVE_CUDA=OFF -DLONGSERVE_BENCH=OFF "${unity[@]}"
  local targets
  targets=$(cmake --build "$build_dir-fuzz" --target help | sed -n 's/^\(fuzz_[a-z_]*\):.*/\1/p' | sort -u)
  if [ -n "$targets" ]; then
    # shellcheck disable=SC2086
    cmake --build "$build_dir-fuzz" -j "$jobs" --target $targets
  fi
}

main_job() {
  log "main job: the bundled model answers through the OpenAI-compatible server"
  "$root/scripts/demo.sh" "$build_dir"
}

# The venv downloads while the compilers run (pip waits on the network, the builds on the CPU);
# its log is printed if it fails.
python_env_start() {
  mkdir -p "$build_dir"
  python_env >"$build_dir/python-env.log" 2>&1 &
  python_env_pid=$!
}
python_env_wait() {
  if ! wait "$python_env_pid"; then
    cat "$build_dir/python-env.log" >&2
    log "creating the Python environment failed"
    exit 1
  fi
}

install_packages
case "$mode" in
  build)
    build
    ;;
  run)
    python_env_start
    build
    python_env_wait
    main_job
    ;;
  test)
    python_env_start
    build
    clang_build
    fuzz_build
    python_env_wait
    log "running the test suite"
    LONGSERVE_PYTHON="$root/$build_dir/venv/bin/python" \
      ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" --timeout 900
    log "running the fuzzers briefly"
    ctest --test-dir "$build_dir-fuzz" -L fuzz --output-on-failure -j "$jobs"
    log "test suite done"
    ;;
  *)
    echo "usage: scripts/setup.sh run|test|build" >&2
    exit 2
    ;;
esac
