"""Tokenizing long prompts: POST /tokenize of English-like texts of several lengths to burstd (a
random-weight model with the LLaMA-2 tokenizer), median of 7, the client's wall time (HTTP and
JSON included); with --base, beside the same daemon as built in BASE_BUILD, in one run.
   /usr/bin/python3 bench/bench_tokenize.py BUILD_DIR [--base BASE_BUILD] [WORDS,WORDS,...]"""
import json, os, random, re, statistics, subprocess, sys, tempfile, time, urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from make_random_model import write_model
from bench_args import take_option

args = sys.argv[1:]
if not args:
    sys.exit(__doc__)
base = (take_option(args, "--base", 1) or [None])[0]
builds = {"now": args[0], **({"base": base} if base else {})}
lengths = [int(n) for n in (args[1] if len(args) > 1 else "2000,8000,30000,60000").split(",")]
models = os.environ.get("BURST_MODELS_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "models"))
words = ("the quick brown fox jumps over a lazy dog while long context inference servers stream tokens to "
         "chat clients, and nobody waits.").split()
rng = random.Random(1)
texts = {n: " ".join(rng.choice(words) for _ in range(n)) for n in lengths}


def timings(build, model):
    srv = subprocess.Popen([os.path.join(build, "burstd"), "--model", model, "--port", "0", "--ctx", "1024"],
                           stderr=subprocess.PIPE, text=True)
    url = None
    for line in srv.stderr:
        m = re.search(r"listening on http://[^ ]*:(\d+)", line)
        if m:
            url = f"http://127.0.0.1:{m.group(1)}/tokenize"
            break
    if not url:
        sys.exit(f"{build}/burstd did not start")
    out = {}
    for n, text in texts.items():
        body, ts = json.dumps({"content": text}).encode(), []
        for _ in range(7):
            t = time.perf_counter()
            with urllib.request.urlopen(urllib.request.Request(url, body, {"Content-Type": "application/json"})) as r:
                tokens = len(json.load(r)["tokens"])
            ts.append(time.perf_counter() - t)
        out[n] = (tokens, statistics.median(ts))
    srv.terminate()
    srv.wait()
    return out


with tempfile.TemporaryDirectory() as d:
    write_model(d, dim=64, hidden=128, layers=1, heads=4, kv_heads=4, vocab=32000, max_seq=1 << 20,
                tokenizer=os.path.join(models, "llama2-tokenizer", "tokenizer.model"))
    got = {name: timings(build, d) for name, build in builds.items()}
print(f"POST /tokenize, median of 7 ({os.cpu_count()} cores)")
print("| words | tokens | " + " | ".join(f"{name} s" for name in got) + " |")
print("|---|---|" + "---|" * len(got))
for n in lengths:
    counts = {got[name][n][0] for name in got}
    print(f"| {n} | {'/'.join(map(str, counts))} | " + " | ".join(f"{got[name][n][1]:.4f}" for name in got) + " |")
