#!/usr/bin/env bash
# The README's test command: configure, build and run every test this machine can run (GPU
# tests skip themselves where no GPU is present). Extra arguments go to CMake's configure step;
# BUILD_DIR picks the build folder (default build).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${BUILD_DIR:-build}
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"
ctest --test-dir "$dir" --output-on-failure -j"$(nproc)"
