#!/usr/bin/env bash
# This checkout against a base tree (an earlier commit) on the GPU machine, in three device calls
# (each under the 10-minute limit), or, without a base tree, in one (`all`). The machine keeps build-gpu/ only while it stays warm (30 s
# idle), so tests and bench first build what is missing. Stage the base beside .gpu-kit/ first,
# here:  rm -rf .gpu-kit/base && mkdir -p .gpu-kit/base && git archive BASE_COMMIT | tar -x -C .gpu-kit/base
#   BASE=.gpu-kit/base bash bench/gpu_compare.sh build   # build-gpu here (all) and in BASE (benchmarks)
#   bash bench/gpu_compare.sh tests                      # the gpu-labelled tests, here
#   BASE=.gpu-kit/base bash bench/gpu_compare.sh bench   # time to first token, decode, profiles
#   (without BASE, build and bench run this checkout alone: the same tables, no base column)
#   BASE_ENV="BURST_GROUPED_GEMM=0 BURST_SPLIT_K=0" bash bench/gpu_compare.sh bench
#                                                        # base: this checkout with those settings
#   bash bench/gpu_compare.sh sanitize                   # compute-sanitizer memcheck of the kernel tests
#   DEADLINE=560 BASE_ENV=... bash bench/gpu_compare.sh all  # tests, then bench: one call
# bench: bench_prefill (random LLaMA-7B shape, bf16 KV cache) at NS tokens (default
# 4096,16384,32768) with chunks of BATCHES (default 8192,32768), now and base one after the other,
# twice; then bench_decode (S sequences of 1024 tokens, one step each; now as it is and with
# BURST_CUDA_GRAPHS=1; base as it is); a BURST_PROFILE run of now's decode
# steps; then one BURST_PROFILE run of each at the largest N (GPU time per op). BASE_ENV (without
# BASE): the base runs are this checkout's, with these settings (VAR=value words) in their
# environment. Logs go to $OUT (or /tmp); the tables print. Each stage's line starts with the
# seconds since the script began, so that a session can plan its next lease. DEADLINE=S: every run
# gets at most what is left of S seconds, and one with under 30 s left is skipped (said so), so a
# device call with a timeout_s a little over S returns its logs and tables rather than being cut
# off; the tests come first, as they tell whether the timings mean anything.
set -o pipefail
cd "$(dirname "$0")/.."
root=$PWD
step=${1:?build, tests, bench, sanitize or all}
case $step in build | tests | bench | sanitize | all) ;; *) echo "gpu_compare.sh: '$step': want build, tests, bench, sanitize or all"; exit 1 ;; esac
case ${DEADLINE:-0} in *[!0-9]*) echo "DEADLINE=$DEADLINE: want whole seconds"; exit 1 ;; esac
ns=${NS:-4096,16384,32768}
batches=${BATCHES:-8192,32768}
[ -z "$BASE" ] || [ -d "$BASE" ] || { echo "BASE=$BASE: no such directory"; exit 1; }
[ -z "$BASE" ] || [ -z "$BASE_ENV" ] || { echo "BASE and BASE_ENV: give one"; exit 1; }
trees="$root${BASE:+ $BASE}"
name_of() { [ "$1" = "$root" ] && echo now || echo base; } # a tree's name in the logs and tables
# The runs to compare, name:tree: now, and base where BASE or BASE_ENV names one.
runs="now:$root${BASE:+ base:$BASE}${BASE_ENV:+ base:$root}"
env_of() { [ "$1" = base ] && echo "$BASE_ENV"; } # a run's settings (the env command's arguments)
exec 3>&1 # the script's output, for notes from inside pipelines
stage() { echo "== [$SECONDS s] $*" >&3; }
# Runs "$@" within what is left of DEADLINE (without one: as it is); with under 30 s left it runs
# nothing and says so, returning 124 as timeout does.
within() {
  [ "${DEADLINE:-0}" -gt 0 ] || { "$@"; return; }
  local left=$((DEADLINE - SECONDS))
  [ "$left" -ge 30 ] || { stage "skipped, $left s of DEADLINE left: $*"; return 124; }
  timeout "$left" "$@"
}
# Builds tree $1's build-gpu (always for `build`; else only when it lacks bench_decode, as on a
# fresh machine). A build-gpu configured elsewhere (a tree staged with one) goes first: CMake
# refuses a cache made for another source directory.
build_tree() {
  local tree=$1 cache=$1/build-gpu/CMakeCache.txt
  [ "$step" != build ] && [ -x "$tree/build-gpu/bench/bench_decode" ] && return 0
  [ -f "$cache" ] && ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$(cd "$tree" && pwd)" "$cache" && rm -rf "$tree/build-gpu"
  [ "$tree" = "$root" ] || ln -sfn "$root/.gpu-kit" "$tree/.gpu-kit" # its gpu_build.sh finds the libraries and models there
  (cd "$tree" && OUT=${OUT:-/tmp}/$(name_of "$tree") && mkdir -p "$OUT" && source bench/gpu_build.sh) || return 1
  stage "built $(name_of "$tree")"
}
out=${OUT:-/tmp}
mkdir -p "$out" || exit 1
tests() {
  build_tree "$root" || exit 1
  source .gpu-kit/prelude.sh >/dev/null
  local models=${BURST_MODELS_DIR:-$root/.gpu-kit/models}
  within ctest --test-dir build-gpu -L gpu -E test_model_cuda --output-on-failure >"$out/ctest_gpu.log" 2>&1
  stage "ctest -L gpu rc=$?"
  grep -E "tests passed|\(Failed\)|^FAIL| sec$" "$out/ctest_gpu.log" | head -40
  BURST_BIN=$root/build-gpu BURST_MODELS_DIR="$models" PYTHONUNBUFFERED=1 within python3 tests/test_model_cuda.py \
    >"$out/test_model_cuda.log" 2>&1
  stage "test_model_cuda rc=$?"
  tail -15 "$out/test_model_cuda.log"
}
bench() {
  for tree in $trees; do build_tree "$tree" || exit 1; done
  source .gpu-kit/prelude.sh >/dev/null
  local log=$out/compare.log
  : >"$log"
  for rep in 1 2; do
    for run in $runs; do
      name=${run%%:*} tree=${run#*:}
      stage "bench_prefill $name, round $rep"
      within env $(env_of "$name") "$tree/build-gpu/bench/bench_prefill" /tmp/llama7b "$ns" "$batches" 3 bf16 7b \
        2>"$out/prefill_${name}_$rep.err" | grep '^{' | sed "s/^{/{\"tree\": \"$name\", /" | tee -a "$log"
    done
  done
  for run in "now:$root" "now:$root BURST_CUDA_GRAPHS=1" \
             ${BASE:+"base:$BASE"} ${BASE_ENV:+"base:$root $BASE_ENV"}; do
    set -- $run
    name=${1%%:*} tree=${1#*:}
    shift
    stage "bench_decode $name${*:+, $*}"
    within env "$@" "$tree/build-gpu/bench/bench_decode" /tmp/llama7b 1,8,32,64 1024 20 cuda bf16 2>&1 | grep -E '^\||CUDA graphs'
  done
  # GPU time per op of the decode steps (rows n<=1 and n<=64; the prefills' rows are larger)
  # beside their wall time: what launch gaps and host work cost, against CUDA graphs' promise.
  stage "decode profile now, BURST_BATCHED_DECODE=1"
  BURST_PROFILE=1 BURST_BATCHED_DECODE=1 within "$root/build-gpu/bench/bench_decode" /tmp/llama7b 1,64 1024 20 cuda bf16 2>&1 |
    grep -E '^profile|^\|' | grep -vE 'n<=(128|256|512|1024|2048|4096|8192|16384|32768|65536) ' | head -60
  big=${ns##*,}
  for run in $runs; do
    name=${run%%:*} tree=${run#*:}
    stage "profile $name, N=$big"
    within env $(env_of "$name") BURST_PROFILE=1 "$tree/build-gpu/bench/bench_prefill" /tmp/llama7b "$big" "${batches##*,}" 1 \
      bf16 7b 2>&1 | grep '^profile' | head -25
  done
  python3 - "$log" <<'PY'
import json, sys
rows = []
for l in open(sys.argv[1]):
    try:
        rows.append(json.loads(l))
    except ValueError: # a nan or inf logit0 (%g) is no JSON: show the line, keep the rest
        print("unparsed:", l.strip())
print("\nLLaMA-7B shape, bf16 KV, one GPU: best time to first token s and decode ms a token, now against base (same call)")
print("(logit0: the first logit after the prefill, a check that both compute the same model)")
print(f"{'N':>6} {'chunk':>6} {'TTFT now':>9} {'TTFT base':>9} {'ratio':>6} {'decode now':>10} {'decode base':>11} {'logit0 now':>10} {'logit0 base':>11}")
best = lambda t, n, b, k: min((r[k] for r in rows if r["tree"] == t and r["N"] == n and r["max_batch"] == b and k in r), default=float("nan"))
for n, b in sorted({(r["N"], r["max_batch"]) for r in rows}):
    a, z = best("now", n, b, "ttft_s"), best("base", n, b, "ttft_s")
    l0 = {t: next((r["logit0"] for r in rows if r["tree"] == t and r["N"] == n and r["max_batch"] == b), float("nan")) for t in ("now", "base")}
    print(f"{n:>6} {b:>6} {a:>9.3f} {z:>9.3f} {z / a:>6.3f} {best('now', n, b, 'decode_ms'):>10.2f} {best('base', n, b, 'decode_ms'):>11.2f}"
          f" {l0['now']:>10.4g} {l0['base']:>11.4g}")
PY
}
sanitize() {
  # Out-of-bounds and misaligned accesses the tests' guard words cannot see (reads, writes past
  # device buffers into other allocations), where the machine's runtime lets compute-sanitizer
  # run (Firecracker, not gVisor: /work/.library/device/KINDS.md). Each test within 280 s.
  build_tree "$root" || exit 1
  source .gpu-kit/prelude.sh >/dev/null
  local cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for t in test_backend_cuda test_flash_cuda; do
    BURST_TEST_SEED=1 within timeout 280 "$cs" --tool memcheck --error-exitcode 9 \
      "build-gpu/tests/$t" >"$out/sanitize_$t.log" 2>&1
    stage "compute-sanitizer $t rc=$? (0 clean, 9 errors found, 124 out of time)"
    grep -E "ERROR SUMMARY|^=+ (Invalid|Misaligned|Address)|^FAIL" "$out/sanitize_$t.log" | head -12
  done
}
case $step in
build) for tree in $trees; do build_tree "$tree" || exit 1; done ;;
all) tests; bench ;; # the timings are worth having whatever the tests say
*) $step ;;
esac
