"""Mixed load on burstd (CPU backend, random-weight model): one long prompt, and while it is
prefilled a stream of short requests, both sent by `burst load`. Prints the short requests' time
to first token, and the long one's, with chunked prefill (--prefill-chunk) and without (the whole
prompt in one step), in one run. --short C R P M: the short requests (C at a time, R in all,
P-token prompts, M tokens each; default 4 24 32 16). --base BASE_BUILD: the chunked rows again
with burstd as built there, for a before/after comparison.
   /usr/bin/python3 bench/bench_mixed.py BUILD_DIR [--base BASE_BUILD] [--short C R P M] [LONG_TOKENS] [CHUNK ...]"""
import os, re, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from make_random_model import write_model
from bench_args import take_option

args = sys.argv[1:]
if not args:
    sys.exit(__doc__)


base = (take_option(args, "--base", 1) or [None])[0]
short_c, short_r, short_p, short_m = take_option(args, "--short", 4) or ["4", "24", "32", "16"]
build = args[0]
long_n = int(args[1]) if len(args) > 1 else 8000
chunks = [int(c) for c in args[2:]] or [256]
models = os.environ.get("BURST_MODELS_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "models"))
env = {**os.environ, "OMP_NUM_THREADS": "1"}


def ttft_row(text):
    m = re.search(r"time to first token s\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", text)
    return tuple(float(x) for x in m.groups()) if m else (float("nan"),) * 3


def run(build, model, chunk, batch):
    srv = subprocess.Popen([os.path.join(build, "burstd"), "--model", model, "--port", "0", "--threads", "1",
                            "--slots", "6", "--ctx", str(long_n + 64), "--batch", str(batch),
                            "--prefill-chunk", str(chunk)], stderr=subprocess.PIPE, text=True, env=env)
    port = None
    for line in srv.stderr:
        m = re.search(r"listening on http://[^ ]*:(\d+)", line)
        if m:
            port = m.group(1)
            break
    url = f"http://127.0.0.1:{port}"
    load = os.path.join(build, "burst")
    long = subprocess.Popen([load, "load", "--url", url, "--concurrency", "1", "--requests", "1",
                             "--prompt-tokens", str(long_n), "--max-tokens", "4"], stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)  # the long prefill is under way
    short = subprocess.run([load, "load", "--url", url, "--concurrency", short_c, "--requests", short_r,
                            "--prompt-tokens", short_p, "--max-tokens", short_m], capture_output=True, text=True)
    long_out = long.communicate()[0]
    srv.terminate()
    srv.wait()
    return ttft_row(short.stdout), ttft_row(long_out)[0], "prompt progress" in long_out


with tempfile.TemporaryDirectory() as d:
    write_model(d, dim=128, hidden=256, layers=2, heads=4, kv_heads=2, vocab=512, max_seq=long_n + 64,
                tokenizer=os.path.join(models, "stories260K", "tokenizer.model"))
    rows = [("off (whole prompt in one step)", build, long_n + 64, long_n + 64)] + \
           [(f"{tag}on, --prefill-chunk {c}", b, c, 512 if c <= 512 else c)
            for c in chunks for tag, b in [("", build)] + ([("base: ", base)] if base else [])]
    print(f"mixed load on CPU (1 thread): one {long_n}-token prompt + {short_r} short requests ({short_p}-token "
          f"prompts, {short_m} tokens each, concurrency {short_c})")
    print(f"{'chunked prefill':<38} {'short TTFT p50 s':>16} {'p90 s':>8} {'p99 s':>8} {'long TTFT s':>12} {'progress':>9}")
    for name, b, chunk, batch in rows:
        (p50, p90, p99), long_ttft, progress = run(b, d, chunk, batch)
        print(f"{name:<38} {p50:>16.3f} {p90:>8.3f} {p99:>8.3f} {long_ttft:>12.2f} {'yes' if progress else 'no':>9}")
print("command: /usr/bin/python3 bench/bench_mixed.py", " ".join(sys.argv[1:]))
