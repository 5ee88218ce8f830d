#!/usr/bin/env bash
# One call on the GPU machine for the CUDA backend: build with CUDA, run the gpu-labelled tests,
# then bench_prefill (LLaMA-7B shape, time to first token) and, with "anchor", the Hugging Face
# prefill anchor (.gpu-kit/torch_prefill.py without its attention sweep, which
# bench/gpu_run.sh covers) in the same call. Full logs go to $OUT (or /tmp); the tables print last.
# The prefill runs once per KV cache dtype in KVS (default "f32 bf16"), on the LLaMA shape SHAPE
# (7b, the default, or 13b; the anchor then runs the same shape and lengths). Then decode steps of
# 1 and 16 sequences without and with BURST_CUDA_GRAPHS=1 (bench_decode). With
# "anchor" the decode table sets bench_prefill's decode_ms beside bench/torch_decode_anchor.py.
#   bash bench/gpu_prefill.sh [NS] [BATCHES] [anchor]      (lists comma-separated)
set -o pipefail
cd "$(dirname "$0")/.."
ns=${1:-4096,16384,32768,65536}
batches=${2:-4096,16384}
shape=${SHAPE:-7b}
source bench/gpu_build.sh || exit 1
ctest --test-dir build-gpu -L gpu -E test_model_cuda -V >"$out/ctest_gpu.log" 2>&1
echo "ctest -L gpu rc=$?"; grep -E "tests passed|Passed|Failed|Skipped" "$out/ctest_gpu.log" | grep -v "^[0-9]*: " | head
# One line per op family and mode: cases, worst nmse; every FAIL line in full.
awk '{sub(/^[0-9]+: /, "")} /^== backend/ {mode=$3} mode != "" && /^(ok  |FAIL) / {op=$2; if (op ~ /^attention/) op=substr(op,1,index(op,"(")-1) ($0 ~ /flash/ ? "(flash)" : "(split-kv)");
     if ($0 ~ / lse:/) op=op "/lse"; split($0, a, "nmse="); split(a[2], b, " "); k=mode " " op; n[k]++;
     if (b[1]+0 > w[k]) w[k]=b[1]+0; if ($1=="FAIL") f[k]++}
     END {for (k in n) printf "%-34s cases %3d  fails %d  worst nmse %.2g\n", k, n[k], f[k], w[k]}' \
  "$out/ctest_gpu.log" | sort
grep -E "^[0-9]+: FAIL" "$out/ctest_gpu.log" | head -20
BURST_BIN=$PWD/build-gpu BURST_MODELS_DIR="$models" python3 tests/test_model_cuda.py 2>&1 | tee "$out/test_model_cuda.log"
echo "test_model_cuda rc=$?"
: >"$out/bench_prefill.log"
for kv in ${KVS:-f32 bf16}; do
  ./build-gpu/bench/bench_prefill "/tmp/llama$shape" "$ns" "$batches" 3 "$kv" "$shape" 2>&1 | tee -a "$out/bench_prefill.log"
done
for graphs in 0 1; do # the model bench_prefill wrote, from the page cache: ~10 s a run
  echo "== bench_decode, BURST_CUDA_GRAPHS=$graphs"
  BURST_CUDA_GRAPHS=$graphs ./build-gpu/bench/bench_decode "/tmp/llama$shape" 1,16 1024 20 cuda bf16 2>&1 | grep -E '^\||CUDA graphs'
done
if [ "$3" = anchor ]; then
  sed -e 's/for N in \[4096, 16384, 65536, 131072\]:/for N in []:/' \
      -e "s/for size, Ns in \[(\"7b\", \[4096, 16384, 32768, 65536\])\]:/for size, Ns in [(\"$shape\", [$ns])]:/" \
      .gpu-kit/torch_prefill.py >/tmp/torch_prefill_only.py
  grep -q "for size, Ns in \[(\"$shape\"" /tmp/torch_prefill_only.py || { echo "anchor: cannot set shape $shape"; exit 1; }
  PYTHONUNBUFFERED=1 python3 /tmp/torch_prefill_only.py 2>&1 | grep -v Warning | tee "$out/torch.log"
  PYTHONUNBUFFERED=1 python3 bench/torch_decode_anchor.py "$ns" "$shape" 2>&1 | grep -v Warning | tee -a "$out/torch.log"
  python3 - "$out/bench_prefill.log" "$out/torch.log" <<'PY'
import json, sys
ours = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
hf = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{") and '"ttft_s"' in l]
hf_dec = {r["N"]: r["hf_decode_ms"] for r in (json.loads(l) for l in open(sys.argv[2]) if '"hf_decode_ms"' in l)}
kvs = sorted({r["kv"] for r in ours})
print(f"\nLLaMA-{ours[0]['model'] if ours else '?'} shape, bf16, one GPU, time to first token s [TFLOP/s], same call;")
print("burst's 'first': its first prompt of that length (new attention shapes), the rest median of later ones")
print(f"{'N':>6}" + "".join(f"  {'burst KV ' + kv + ' (batch) first':>34}" for kv in kvs) + f"  {'HF cache=False':>18}  {'HF cache=True':>18}")
cell = lambda r: f"{r['ttft_s']:.3f} [{r['tflops']:.0f}]" if r and "ttft_s" in r else "-"
for n in sorted({r["N"] for r in ours} | {r["N"] for r in hf}):
    row = f"{n:>6}"
    for kv in kvs:
        o = min((r for r in ours if r["N"] == n and r["kv"] == kv), key=lambda r: r["ttft_s"], default=None)
        row += f"  {cell(o) + (' (' + str(o['max_batch']) + ') ' + format(o.get('first_s', 0), '.3f') if o else ''):>34}"
    h = {r["use_cache"]: r for r in hf if r["N"] == n}
    print(row + f"  {cell(h.get(False)):>18}  {cell(h.get(True)):>18}")
print(f"\nThen decode, ms per generated token at context N (32 steps, logits to the host), same call")
print(f"{'N':>6}" + "".join(f"  {'burst KV ' + kv:>14}" for kv in kvs) + f"  {'HF DynamicCache':>16}")
for n in sorted({r["N"] for r in ours} | set(hf_dec)):
    row = f"{n:>6}"
    for kv in kvs:
        ms = [r["decode_ms"] for r in ours if r["N"] == n and r["kv"] == kv and "decode_ms" in r]
        row += f"  {min(ms) if ms else float('nan'):>14.2f}"
    print(row + f"  {hf_dec.get(n, float('nan')):>16.2f}")
PY
fi
