#!/usr/bin/env bash
# burst against llama.cpp on this machine's CPU, on the same weights: the time to first token of
# N-token prompts, and the time of a decode step of S sequences at a context of D tokens each.
#
#   LLAMA_CPP=DIR bash bench/cpu_compare.sh MODEL_DIR
# DIR is a llama.cpp checkout with build/bin/llama-bench and llama-batched-bench built (cmake -S
# DIR -B DIR/build -DGGML_NATIVE=ON && cmake --build DIR/build --target llama-bench
# llama-batched-bench) and its gguf-py; MODEL_DIR's weights go into a GGUF file first
# (bench/hf_to_gguf.py; GGUF=PATH, default /tmp/NAME.gguf, kept for the next run). NS (default
# 512,2048,8192), DEPTHS (default 512,4096) and SEQS (default 1,8) are the sizes, REPS (default 2)
# how many times each runs, alternating between the two programs (this machine's memory bandwidth
# moves between minutes), THREADS (default: all cores) the threads of both. QUANT=q8 (or q4)
# compares 8-bit (4-bit) weights instead: burst with --quantize q8 (q4), llama.cpp on the GGUF
# quantized to Q8_0 (Q4_0) by its llama-quantize, built beside the others; kept as
# /tmp/NAME-q8_0.gguf (q4_0).
#
# burst: `burst generate` (prompt of N tokens, its "first token after" time: tokenizing, prefill
# and the first token's sampling) on cpu-bf16 (bf16 KV cache) and cpu (float32 matmul inputs and KV
# cache), and bench_decode's step with logits to the host (one sequence prefilled, copied to the
# others). llama.cpp: llama-bench's pp N (prefill alone) and llama-batched-bench's 16 steps after a
# shared prompt of D tokens (-pps; logits, no sampling), f16 KV cache, flash attention off and on.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: LLAMA_CPP=DIR bash bench/cpu_compare.sh MODEL_DIR}
lcpp=${LLAMA_CPP:?LLAMA_CPP=DIR: a llama.cpp checkout with build/bin/llama-bench}
ns=${NS:-512,2048,8192} depths=${DEPTHS:-512,4096} seqs=${SEQS:-1,8} reps=${REPS:-2} threads=${THREADS:-$(nproc)}
gguf=${GGUF:-/tmp/$(basename "$model").gguf}
build=${BUILD_DIR:-build}
quant=${QUANT:-none} quantize=() quant_arg=none
for f in "$build/burst" "$build/bench/bench_decode" "$lcpp/build/bin/llama-bench" "$lcpp/build/bin/llama-batched-bench"; do
    [ -x "$f" ] || { echo "cpu_compare.sh: $f: not built"; exit 1; }
done
[ -f "$gguf" ] || GGUF_PY=$lcpp/gguf-py /usr/bin/python3 bench/hf_to_gguf.py "$model" "$gguf"
case $quant in
none) ;;
q8 | q4)
    quantize=(--quantize "$quant") quant_arg=$quant
    quant_gguf=/tmp/$(basename "$model")-${quant}_0.gguf
    [ -x "$lcpp/build/bin/llama-quantize" ] || { echo "cpu_compare.sh: $lcpp/build/bin/llama-quantize: not built"; exit 1; }
    if [ ! -f "$quant_gguf" ]; then
        "$lcpp/build/bin/llama-quantize" "$gguf" "$quant_gguf.part" "${quant^^}_0" "$threads" >/dev/null 2>&1 ||
            { echo "cpu_compare.sh: llama-quantize $gguf failed"; exit 1; }
        mv "$quant_gguf.part" "$quant_gguf"
    fi
    gguf=$quant_gguf
    ;;
*) echo "cpu_compare.sh: QUANT=$quant: want q8, q4 or none"; exit 1 ;;
esac
results=$(mktemp) prompt=$(mktemp)
trap 'rm -f "$results" "$prompt"' EXIT
# Result lines: "PROGRAM VARIANT prefill N seconds" and "PROGRAM VARIANT decode D:S seconds".
llama_prefill() { # N
    "$lcpp/build/bin/llama-bench" -m "$gguf" -t "$threads" -r 1 -fa 0,1 -p "$1" -n 0 -o jsonl 2>/dev/null |
        python3 -c 'import json, sys
for r in map(json.loads, sys.stdin):
    print("llama.cpp fa%d prefill %d %.6f" % (r["flash_attn"], r["n_prompt"], r["avg_ns"] / 1e9))' >>"$results"
}
llama_decode() { # D
    for fa in 0 1; do
        "$lcpp/build/bin/llama-batched-bench" -m "$gguf" -t "$threads" -c $(((${seqs##*,} + 1) * ($1 + 16))) \
            -npp "$1" -ntg 16 -npl "$seqs" -pps -fa $fa --output-format jsonl 2>/dev/null |
            python3 -c 'import json, sys
for r in map(json.loads, filter(lambda l: l.startswith("{"), sys.stdin)):
    print("llama.cpp fa%d decode %d:%d %.6f" % (r["flash_attn"], r["pp"], r["pl"], r["t_tg"] / r["tg"]))' >>"$results"
    done
}
"$build/burst" --version
echo "llama.cpp $(git -C "$lcpp" log -1 --format='%h %cs' 2>/dev/null || echo '?'), $threads threads; model $model; weights $gguf"
for rep in $(seq "$reps"); do
    for n in ${ns//,/ }; do
        # "the" is one token, so the prompt is N tokens with the BOS
        python3 -c "import sys; sys.stdout.write('the' + ' the' * ($n - 2))" >"$prompt"
        for backend in cpu-bf16 cpu; do
            line=$("$build/burst" generate --model "$model" --prompt-file "$prompt" --max-tokens 1 \
                --backend "$backend" --threads "$threads" "${quantize[@]}" 2>&1 >/dev/null | tail -1)
            [[ $line == *"prompt $n tokens"* ]] || { echo "cpu_compare.sh: burst $backend at $n: $line"; exit 1; }
            echo "burst $backend prefill $n $(sed 's/.*first token after \([0-9.]*\) s.*/\1/' <<<"$line")" >>"$results"
        done
        llama_prefill "$n"
    done
    for d in ${depths//,/ }; do
        for backend in cpu-bf16:bf16 cpu:f32; do
            "$build/bench/bench_decode" "$model" "$seqs" "$d" 16 "${backend%:*}" "${backend#*:}" "$threads" 1 "$quant_arg" 2>/dev/null |
                awk -F'|' -v b="${backend%:*}" -v d="$d" '$2 ~ /^ [0-9]+ $/ {printf "burst %s decode %d:%d %.6f\n", b, d, $2, $3 / 1000}' >>"$results"
        done
        llama_decode "$d"
    done
done
python3 - "$results" <<'EOF'
import collections, sys
runs = collections.defaultdict(list)
for l in open(sys.argv[1]):
    prog, variant, what, n, s = l.split()
    runs[what, f"{prog} {variant}", tuple(map(int, n.split(":")))].append(float(s))
cols = ["burst cpu-bf16", "burst cpu", "llama.cpp fa0", "llama.cpp fa1"]
for what, head, unit in (("prefill", "prompt tokens", "s to first token (tok/s)"),
                         ("decode", "context x sequences", "ms per step (tok/s)")):
    sizes = sorted({n for w, _, n in runs if w == what})
    print(f"\n{what}: {unit}, each run\n| {head} | " + " | ".join(cols) + " |\n" + "|---" * (len(cols) + 1) + "|")
    for n in sizes:
        cells = []
        for c in cols:
            t = sorted(runs[what, c, n])
            tokens = n[0] if what == "prefill" else n[1]  # a prompt's, or a step's
            cells.append("-".join(f"{x:.3f}" if what == "prefill" else f"{1e3 * x:.1f}" for x in t) +
                         (f" ({tokens / t[0]:.{0 if tokens / t[0] >= 100 else 1}f})" if t else "none"))
        print(f"| {' x '.join(map(str, n))} | " + " | ".join(cells) + " |")
EOF
