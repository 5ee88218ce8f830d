"""Prefix cache on burstd (CPU backend, random-weight model): a conversation of several turns,
each prompt the previous one plus new tokens, sent to a daemon with --prefix-cache on and to one
with it off, in one run. Prints each turn's time to first token (the server's
usage.time_to_first_token_s) and the tokens the cache held.
   /usr/bin/python3 bench/bench_prefix.py BUILD_DIR [FIRST_TOKENS] [TURN_TOKENS] [TURNS]"""
import json, os, re, subprocess, sys, tempfile, urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from make_random_model import write_model

if len(sys.argv) < 2:
    sys.exit(__doc__)
build = sys.argv[1]
first, turn_n, turns = [int(a) for a in sys.argv[2:5]] + [2000, 200, 4][len(sys.argv[2:5]):]
models = os.environ.get("BURST_MODELS_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "models"))
env = {**os.environ, "OMP_NUM_THREADS": "1"}
ctx = first + turns * turn_n + 64


def start(model, cache):
    srv = subprocess.Popen([os.path.join(build, "burstd"), "--model", model, "--port", "0", "--threads", "1",
                            "--slots", "2", "--ctx", str(ctx), "--prefix-cache", cache],
                           stderr=subprocess.PIPE, text=True, env=env)
    for line in srv.stderr:
        m = re.search(r"listening on http://[^ ]*:(\d+)", line)
        if m:
            return srv, f"http://127.0.0.1:{m.group(1)}"
    sys.exit("burstd did not start")


def ttft(url, prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": 4, "temperature": 0}).encode()
    req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    usage = json.load(urllib.request.urlopen(req))["usage"]
    return usage["time_to_first_token_s"], usage["prompt_tokens_details"]["cached_tokens"]


with tempfile.TemporaryDirectory() as d:
    write_model(d, dim=256, hidden=688, layers=4, heads=8, kv_heads=4, vocab=512, max_seq=ctx,
                tokenizer=os.path.join(models, "stories260K", "tokenizer.model"))
    x = 0x9E3779B97F4A7C15
    tokens = [1]
    for _ in range(first + turns * turn_n):
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        tokens.append(3 + (x >> 33) % 509)
    prompts = [tokens[:first + t * turn_n] for t in range(turns + 1)]
    results = {}
    for cache in ("off", "on"):
        srv, url = start(d, cache)
        results[cache] = [ttft(url, p) for p in prompts]
        srv.terminate()
        srv.wait()
    print(f"prefix cache on CPU (1 thread, dim 256, 4 layers): a {first}-token prompt, then {turns} turns "
          f"of {turn_n} more tokens each")
    print(f"{'turn':>4} {'prompt tokens':>14} {'cached':>7} {'TTFT off s':>11} {'TTFT on s':>10} {'speedup':>8}")
    for t, p in enumerate(prompts):
        (off, _), (on, cached) = results["off"][t], results["on"][t]
        print(f"{t:>4} {len(p):>14} {cached:>7} {off:>11.3f} {on:>10.3f} {off / on:>7.1f}x")
print("command: /usr/bin/python3 bench/bench_prefix.py", build, first, turn_n, turns)
