#!/usr/bin/env bash
# One call on the GPU machine for decode attention (attention/decode_cuda.h): build with CUDA, run
# test_flash_cuda (the kernel against float64), test_backend_cuda (each op against the CPU
# backend) and tests/test_model_cuda.py (whole-model logits and greedy text), then the decode
# table of bench_flash_attn (us per call and GB/s of K/V, split-KV against the old pack + flash
# path). Full logs go to $OUT (or /tmp); summaries, failures and the table print.
#   bash bench/gpu_decode.sh
# From a checkout with .gpu-kit/ (../shared/gpu-kit/README.md) on a machine without the Debian
# packages; BURST_MODELS_DIR defaults to .gpu-kit/models, else ../shared/models.
set -o pipefail
cd "$(dirname "$0")/.."
source bench/gpu_build.sh || exit 1
fails=0
for t in test_flash_cuda test_backend_cuda; do
  ./build-gpu/tests/$t >"$out/$t.log" 2>&1
  rc=$?
  echo "$t rc=$rc"
  [ $rc -eq 0 ] || fails=$((fails + 1))
  grep -E "seed|^FAIL|^  |cases failed|failures$" "$out/$t.log" | head -30
done
# Decode cases in one line each: worst nmse of O and lse per (head_dim, nq) over all nk.
grep -E "^(ok  |FAIL) decode" "$out/test_flash_cuda.log" |
  awk '{split($0, a, "nmse="); split(a[2], b, " "); k=$4 " " $5 ($0 ~ / lse:/ ? " lse" : " O"); n[k]++;
       if (b[1]+0 > w[k]) w[k]=b[1]+0; if ($1=="FAIL") f[k]++}
       END {for (k in n) printf "decode %-20s cases %3d  fails %d  worst nmse %.2g\n", k, n[k], f[k], w[k]}' | sort -V
grep -E "^== backend|attention\(split-kv|attention\(flash" "$out/test_backend_cuda.log" | cut -c1-150
BURST_BIN=$PWD/build-gpu BURST_MODELS_DIR="$models" PYTHONUNBUFFERED=1 python3 tests/test_model_cuda.py 2>&1 |
  tee "$out/test_model_cuda.log"
rc=$?
echo "test_model_cuda rc=$rc"
[ $rc -eq 0 ] || fails=$((fails + 1))
./build-gpu/bench/bench_flash_attn decode 2>&1 | tee "$out/bench_decode.log"
echo "gpu_decode: $fails of 3 test programs failed"
exit $((fails > 0))
