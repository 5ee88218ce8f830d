#!/usr/bin/env bash
# The README's test command: configure, build and run every test that this machine can run
# (GPU tests skip themselves where no GPU is present).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
