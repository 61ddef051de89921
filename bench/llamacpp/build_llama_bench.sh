#!/usr/bin/env bash
# Builds llama.cpp's llama-bench (CPU only) outside the repository, from the llama.cpp tree that
# the llama-cpp-python sdist vendors, so a fresh machine with PyPI access can rebuild exactly the
# same version. Usage: bench/llamacpp/build_llama_bench.sh [WORK_DIR]   (default /tmp/llamacpp)
# Prints the path of the llama-bench binary on its last line.
set -euo pipefail
VERSION=0.3.36
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
WORK=${1:-/tmp/llamacpp}
JOBS=${JOBS:-2}
mkdir -p "$WORK"
cd "$WORK"
SDIST=llama_cpp_python-$VERSION.tar.gz
if [ ! -f "$SDIST" ]; then
  python3 -m pip download "llama-cpp-python==$VERSION" --no-deps --no-binary :all: -d . >&2
fi
echo "$SHA256  $SDIST" | sha256sum -c - >&2
if [ ! -d "llama_cpp_python-$VERSION" ]; then
  tar xzf "$SDIST"
fi
SRC=$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp
BUILD=$WORK/build
# GGML_NATIVE: the same -march=native longserve's build uses; no BLAS, no GPU, no curl.
cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
  -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_BLAS=OFF -DGGML_OPENMP=ON -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DLLAMA_BUILD_TOOLS=ON -DBUILD_SHARED_LIBS=OFF >&2
cmake --build "$BUILD" --target llama-bench -j"$JOBS" >&2
echo "$BUILD/bin/llama-bench"
