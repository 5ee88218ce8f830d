#!/usr/bin/env bash
# burstd against llama.cpp's llama-server under the same load, on the same weights and CPU threads:
# `burst load` (streaming completions of P-token prompts, each generating M tokens) against each
# server in turn, started fresh for every run (no prompt cached from the last), alternating.
#
#   LLAMA_CPP=DIR bash bench/server_compare.sh MODEL_DIR
# DIR is a llama.cpp checkout with build/bin/llama-server built (cmake -S DIR -B DIR/build
# -DGGML_NATIVE=ON -DLLAMA_BUILD_SERVER=ON && cmake --build DIR/build --target llama-server); the
# GGUF file is bench/cpu_compare.sh's (GGUF=PATH, default /tmp/NAME.gguf, written if missing).
# SLOTS (default 4: burstd's --slots, llama-server's --parallel, each slot CTX tokens, default
# 1024), LOADS (default "1:8 4:16": concurrency:requests pairs), PROMPT (default 512), TOKENS
# (default 32), REPS (default 2), THREADS (default: all cores), BURSTD_ARGS (more flags for
# burstd: 8-bit weights against llama.cpp's are BURSTD_ARGS="--quantize q8" with GGUF= the Q8_0 file
# bench/cpu_compare.sh's QUANT=q8 writes). Both servers run with their defaults otherwise (burstd: the
# backend its default picks; llama-server: flash attention auto).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: LLAMA_CPP=DIR bash bench/server_compare.sh MODEL_DIR}
lcpp=${LLAMA_CPP:?LLAMA_CPP=DIR: a llama.cpp checkout with build/bin/llama-server}
slots=${SLOTS:-4} ctx=${CTX:-1024} loads=${LOADS:-1:8 4:16} prompt=${PROMPT:-512} tokens=${TOKENS:-32}
reps=${REPS:-2} threads=${THREADS:-$(nproc)} build=${BUILD_DIR:-build}
read -ra burstd_args <<<"${BURSTD_ARGS:-}"
gguf=${GGUF:-/tmp/$(basename "$model").gguf}
for f in "$build/burstd" "$build/burst" "$lcpp/build/bin/llama-server"; do
    [ -x "$f" ] || { echo "server_compare.sh: $f: not built"; exit 1; }
done
[ -f "$gguf" ] || GGUF_PY=$lcpp/gguf-py /usr/bin/python3 bench/hf_to_gguf.py "$model" "$gguf"
work=$(mktemp -d) pid= port=
trap '[ -z "$pid" ] || kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT

serve() { # server: starts it on a free port and waits until it answers /health
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    case $1 in # exec: $! is the server itself
    burstd) exec "$build/burstd" --model "$model" --port "$port" --slots "$slots" --ctx "$ctx" --threads "$threads" \
        "${burstd_args[@]}" ;;
    llama.cpp) exec "$lcpp/build/bin/llama-server" -m "$gguf" --port "$port" --parallel "$slots" -c $((slots * ctx)) \
        -t "$threads" ;;
    esac >"$work/$1.log" 2>&1 &
    pid=$!
    for _ in $(seq 600); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null && return
        kill -0 "$pid" 2>/dev/null || { echo "server_compare.sh: $1 exited:"; tail -5 "$work/$1.log"; exit 1; }
        sleep 0.5
    done
    echo "server_compare.sh: $1 did not answer /health"
    exit 1
}

"$build/burst" --version
echo "llama.cpp $(git -C "$lcpp" log -1 --format='%h %cs' 2>/dev/null || echo '?'); $threads threads, $slots slots," \
    "prompts of $prompt tokens generating $tokens; model $model, burstd ${BURSTD_ARGS:-(defaults)}, $gguf"
for rep in $(seq "$reps"); do
    for load in $loads; do
        for server in burstd llama.cpp; do
            serve "$server"
            "$build/burst" load --url "http://127.0.0.1:$port" --concurrency "${load%:*}" --requests "${load#*:}" \
                --prompt-tokens "$prompt" --max-tokens "$tokens" --json "$work/$server-$load-$rep.json" >"$work/load.txt" ||
                { cat "$work/load.txt"; exit 1; }
            kill "$pid"
            wait "$pid" 2>/dev/null || true
            pid=
        done
    done
done
python3 - "$work" "$loads" <<'EOF'
import glob, json, os, sys
work, loads = sys.argv[1], sys.argv[2].split()
print("\n| concurrency x requests | server | TTFT p50 s | TTFT p90 s | inter-token p50 ms | output tok/s |")
print("|---|---|---|---|---|---|")
for load in loads:
    for server in ("burstd", "llama.cpp"):
        runs = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(work, f"{server}-{load}-*.json")))]
        cell = lambda get, fmt: "-".join(fmt % v for v in sorted(map(get, runs)))
        print(f"| {load.replace(':', ' x ')} | {server} | {cell(lambda r: r['time_to_first_token_s']['p50'], '%.3f')} | "
              f"{cell(lambda r: r['time_to_first_token_s']['p90'], '%.3f')} | "
              f"{cell(lambda r: 1e3 * r['inter_token_latency_s']['p50'], '%.1f')} | "
              f"{cell(lambda r: r['output_tokens_per_s'], '%.1f')} |")
EOF
