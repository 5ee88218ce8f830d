#!/usr/bin/env bash
# One call on the GPU machine: build with CUDA, run every test (GPU ones included), then the
# benchmark and the torch anchor on the same shapes. Full logs go to $OUT (or /tmp); the tables
# print last.   bash bench/gpu_run.sh [max_n]
set -o pipefail
cd "$(dirname "$0")/.."
max_n=${1:-131072}
source bench/gpu_build.sh || exit 1
ctest --test-dir build-gpu -j4 >"$out/ctest.log" 2>&1
echo "ctest rc=$?"; grep -E "Passed|Failed|Skipped|tests passed" "$out/ctest.log"
./build-gpu/tests/test_flash_cuda >"$out/test_flash_cuda.log" 2>&1
echo "test_flash_cuda rc=$?"; grep -E "^FAIL|cases failed" "$out/test_flash_cuda.log" | head -20
./build-gpu/bench/bench_flash_attn "$max_n" 2>&1 | tee "$out/bench.log"
PYTHONUNBUFFERED=1 python3 bench/torch_attention_anchor.py "$max_n" 2>&1 | tee "$out/torch.log"
