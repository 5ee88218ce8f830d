"""Prefix cache on burstd (CPU backend, 1 thread, random-weight model), two scenarios in one run:
- a conversation: several turns, each prompt the previous one plus new tokens, sent one at a time
  to a daemon with --prefix-cache on and to one with it off; each turn's time to first token (the
  server's usage.time_to_first_token_s) and the tokens the cache held;
- a burst: `burst load` sends R requests, C at a time, of P-token prompts sharing their first S
  tokens (a system prompt), to the daemon with the cache on, off, and (with --base) on as built in
  BASE_BUILD, for a before/after comparison; client-side time to first token and throughput.
   /usr/bin/python3 bench/bench_prefix.py BUILD_DIR [--base BASE_BUILD] [FIRST_TOKENS TURN_TOKENS TURNS]
                                         [--burst C R P S]"""
import os, re, subprocess, sys, tempfile, urllib.request, json

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from make_random_model import write_model
from bench_args import take_option

args = sys.argv[1:]
if not args:
    sys.exit(__doc__)


base = (take_option(args, "--base", 1) or [None])[0]
concurrency, requests, prompt_n, shared = [int(a) for a in take_option(args, "--burst", 4) or [4, 16, 2000, 1800]]
build = args[0]
first, turn_n, turns = [int(a) for a in args[1:4]] + [2000, 200, 4][len(args[1:4]):]
models = os.environ.get("BURST_MODELS_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "models"))
env = {**os.environ, "OMP_NUM_THREADS": "1"}
ctx = max(first + turns * turn_n, prompt_n) + 64


def start(build, model, cache):
    srv = subprocess.Popen([os.path.join(build, "burstd"), "--model", model, "--port", "0", "--threads", "1",
                            "--slots", str(max(2, concurrency)), "--ctx", str(ctx), "--prefix-cache", cache],
                           stderr=subprocess.PIPE, text=True, env=env)
    for line in srv.stderr:
        m = re.search(r"listening on http://[^ ]*:(\d+)", line)
        if m:
            return srv, f"http://127.0.0.1:{m.group(1)}"
    sys.exit("burstd did not start")


def stop(srv):
    srv.terminate()
    srv.wait()


def ttft(url, prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": 4, "temperature": 0}).encode()
    req = urllib.request.Request(url + "/v1/completions", body, {"Content-Type": "application/json"})
    usage = json.load(urllib.request.urlopen(req))["usage"]
    return usage["time_to_first_token_s"], usage["prompt_tokens_details"]["cached_tokens"]


def conversation(model):
    x = 0x9E3779B97F4A7C15
    tokens = [1]
    for _ in range(first + turns * turn_n):
        x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        tokens.append(3 + (x >> 33) % 509)
    prompts = [tokens[:first + t * turn_n] for t in range(turns + 1)]
    results = {}
    for cache in ("off", "on"):
        srv, url = start(build, model, cache)
        results[cache] = [ttft(url, p) for p in prompts]
        stop(srv)
    print(f"conversation: a {first}-token prompt, then {turns} turns of {turn_n} more tokens each")
    print(f"{'turn':>4} {'prompt tokens':>14} {'cached':>7} {'TTFT off s':>11} {'TTFT on s':>10} {'speedup':>8}")
    for t, p in enumerate(prompts):
        (off, _), (on, cached) = results["off"][t], results["on"][t]
        print(f"{t:>4} {len(p):>14} {cached:>7} {off:>11.3f} {on:>10.3f} {off / on:>7.1f}x")


def burst(model):
    print(f"\nburst: {requests} requests, {concurrency} at a time, {prompt_n}-token prompts sharing their first "
          f"{shared}, 16 tokens each ({max(2, concurrency)} slots)" + (f"; base build: {base}" if base else ""))
    print(f"{'server':<28} {'TTFT p50 s':>10} {'p90 s':>7} {'mean s':>7} {'tokens/s':>9} {'cached':>14}")
    runs = [("this build, cache off", build, "off"), ("this build, cache on", build, "on")]
    runs += [("base build, cache on", base, "on")] if base else []
    for label, b, cache in runs:
        srv, url = start(b, model, cache)
        r = subprocess.run([os.path.join(build, "burst"), "load", "--url", url, "--concurrency", str(concurrency),
                            "--requests", str(requests), "--prompt-tokens", str(prompt_n), "--shared-prefix",
                            str(shared), "--max-tokens", "16"], capture_output=True, text=True, env=env)
        stop(srv)
        t = re.search(r"time to first token s\s+(\S+)\s+(\S+)\s+\S+\s+(\S+)", r.stdout)
        tps = re.search(r"throughput: (\S+) output tokens/s", r.stdout)
        cached = re.search(r"prefix cache: (\d+) of (\d+)", r.stdout)
        if r.returncode or not t:
            sys.exit(f"burst load failed: {r.stdout}{r.stderr}")
        print(f"{label:<28} {float(t.group(1)):>10.3f} {float(t.group(2)):>7.3f} {float(t.group(3)):>7.3f} "
              f"{float(tps.group(1)):>9.1f} {cached.group(1) + ' of ' + cached.group(2) if cached else '0':>14}")


with tempfile.TemporaryDirectory() as d:
    write_model(d, dim=256, hidden=688, layers=4, heads=8, kv_heads=4, vocab=512, max_seq=ctx,
                tokenizer=os.path.join(models, "stories260K", "tokenizer.model"))
    conversation(d)
    burst(d)
print("\ncommand: /usr/bin/python3 bench/bench_prefix.py", " ".join(sys.argv[1:]))
