"""`burst generate` end to end on the real stories260K model: greedy output equals the reference
continuation from shared/models/README.md, and bad input gets a one-line error and exit != 0."""
import os, re, subprocess, sys, tempfile

BIN = os.path.join(os.environ["BURST_BIN"], "burst")
MODELS = os.environ["BURST_MODELS_DIR"]
STORIES = os.path.join(MODELS, "stories260K")
EXPECT = (", there was a little girl named Lily. She loved to play outside in the park. "
          "One day, she saw a big, red ball.")
failures = 0

def run(*args):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=120)

def check(name, ok, detail=""):
    global failures
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + detail))
    failures += not ok

if not os.path.isdir(STORIES):
    print("skip: no", STORIES)
    sys.exit(77)

for extra in ([], ["--batch", "1"], ["--batch", "3", "--threads", "1"]):
    r = run("generate", "--model", STORIES, "--prompt", "Once upon a time", "--max-tokens", "40",
            "--temperature", "0", *extra)
    check(f"greedy continuation {extra}", r.returncode == 0 and r.stdout.startswith(EXPECT),
          f"rc={r.returncode} stdout={r.stdout!r} stderr={r.stderr[-400:]!r}")
    check(f"timings on stderr {extra}", "first token after" in r.stderr, r.stderr[-300:])
    check(f"float32 KV cache by default on the cpu {extra}", "(KV F32)" in r.stderr, r.stderr[-300:])
r = run("generate", "--model", STORIES, "--prompt", "Once", "--max-tokens", "3", "--kv-dtype", "bf16")
check("--kv-dtype bf16 named on stderr", r.returncode == 0 and "(KV BF16)" in r.stderr, r.stderr[-300:])
# cpu-bf16 rounds the matmuls' inputs to bf16 (its logits move by ~1e-3 here; these 40 tokens hold
# no near tie), with a bf16 KV cache by default; on 3 ranks, in chunks of 3 tokens.
r = run("generate", "--model", STORIES, "--prompt", "Once upon a time", "--max-tokens", "40", "--temperature", "0",
        "--backend", "cpu-bf16", "--ranks", "3", "--batch", "3")
check("cpu-bf16: the greedy continuation, a bf16 KV cache by default",
      r.returncode == 0 and r.stdout.startswith(EXPECT) and "(KV BF16)" in r.stderr, f"{r.stdout!r} {r.stderr[-300:]!r}")

# --quantize q8 on both cpu backends: int8 weights (test_logits holds their logits to a quantized
# reference; here they move by ~1e-2 and these 40 tokens hold no near tie), named on stderr.
for backend in ("cpu", "cpu-bf16"):
    r = run("generate", "--model", STORIES, "--prompt", "Once upon a time", "--max-tokens", "40", "--temperature", "0",
            "--backend", backend, "--quantize", "q8")
    check(f"--quantize q8 on {backend}: the greedy continuation, (q8 weights) on stderr",
          r.returncode == 0 and r.stdout.startswith(EXPECT) and f"on {backend} (q8 weights)" in r.stderr,
          f"{r.stdout!r} {r.stderr[-300:]!r}")
# --quantize q4: 4-bit weights move stories260K's logits by ~10% (its perplexity: test_server_api);
# the greedy text keeps its first sentence and a half, then goes its own way.
for backend in ("cpu", "cpu-bf16"):
    r = run("generate", "--model", STORIES, "--prompt", "Once upon a time", "--max-tokens", "40", "--temperature", "0",
            "--backend", backend, "--quantize", "q4")
    check(f"--quantize q4 on {backend}: the greedy continuation's start, (q4 weights) on stderr",
          r.returncode == 0 and r.stdout.startswith(EXPECT[:60]) and f"on {backend} (q4 weights)" in r.stderr,
          f"{r.stdout!r} {r.stderr[-300:]!r}")

# The backend by default: cpu for float32 weights; for BF16 and F16 ones cpu-bf16 where the CPU
# multiplies bf16 (--version says with what), else cpu; the KV cache's dtype follows the backend,
# unless --kv-dtype names one. The default's greedy text is that backend's, named.
unit = re.search(r"; cpu with (AMX|AVX512-BF16)", run("--version").stdout)
r = run("generate", "--model", STORIES, "--prompt", "Once", "--max-tokens", "3")
check("float32 weights: cpu by default", r.returncode == 0 and "rank(s) on cpu," in r.stderr, r.stderr[-300:])
try:
    sys.path.insert(0, os.path.dirname(__file__))
    from make_random_model import write_model
except ImportError as e:
    print(f"skip: the default backend for 16-bit weights ({e})")
else:
    want = "cpu-bf16" if unit else "cpu"
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in ("BF16", "F16"):
            d = os.path.join(tmp, dtype)
            write_model(d, dim=64, hidden=172, layers=2, heads=4, kv_heads=2, vocab=512, dtype=dtype,
                        tokenizer=os.path.join(STORIES, "tokenizer.model"))
            args = ("generate", "--model", d, "--prompt", "Once upon a time", "--max-tokens", "20", "--temperature", "0")
            r, named = run(*args), run(*args, "--backend", want)
            kv = "(KV BF16)" if want == "cpu-bf16" else "(KV F32)"
            check(f"{dtype} weights: {want} by default, {kv}", r.returncode == 0 and f"rank(s) on {want}," in r.stderr
                  and kv in r.stderr and r.stdout == named.stdout and len(r.stdout) > 10,
                  f"{r.stdout!r} vs {named.stdout!r} {r.stderr[-300:]!r}")
            r = run(*args, "--kv-dtype", "f32")
            check(f"{dtype} weights, --kv-dtype f32: (KV F32) on {want}",
                  r.returncode == 0 and "(KV F32)" in r.stderr and f"rank(s) on {want}," in r.stderr, r.stderr[-300:])

# The same seed gives the same sampled text, with and without top-k/top-p filtering; the seed is printed.
for extra in ([], ["--top-p", "0.9", "--top-k", "40"]):
    args = ["generate", "--model", STORIES, "--prompt", "Once", "--max-tokens", "30", "--temperature", "1",
            "--seed", "7", *extra]
    a, b = run(*args), run(*args)
    check(f"seeded sampling repeats {extra}", a.returncode == 0 and a.stdout == b.stdout and "seed 7" in a.stderr
          and len(a.stdout) > 20, f"{a.stdout!r} vs {b.stdout!r}")

with tempfile.TemporaryDirectory() as tmp:
    cases = [
        (["generate", "--model", os.path.join(tmp, "nope"), "--prompt", "x"], "nope"),
        (["generate", "--model", tmp, "--prompt", "x"], "tokenizer.model"),
        (["generate", "--model", STORIES], "needs --model and one of --prompt, --prompt-file and --chat"),
        (["generate", "--model", STORIES, "--prompt", "x", "--prompt-file", "-"], "one of --prompt, --prompt-file and --chat"),
        (["generate", "--model", STORIES, "--prompt", "x", "--chat", "y"], "one of --prompt, --prompt-file and --chat"),
        (["generate", "--model", STORIES, "--prompt", "x", "--system", "y"], "--system and --chat-template are for --chat"),
        (["generate", "--model", STORIES, "--chat", "x", "--chat-template", "chatml"],
         "--chat-template chatml: want llama-2, vicuna or zephyr"),
        (["generate", "--model", STORIES, "--prompt-file", os.path.join(tmp, "none.txt")],
         "--prompt-file " + os.path.join(tmp, "none.txt") + ": No such file or directory"),
        (["generate", "--model", STORIES, "--prompt", "x", "--max-tokens", "-3"], "--max-tokens -3"),
        (["generate", "--model", STORIES, "--prompt", "x", "--temperature", "hot"], "--temperature hot"),
        (["generate", "--model", STORIES, "--prompt", "x", "--bogus", "1"], "--bogus"),
        (["generate", "--model", STORIES, "--prompt", "x", "--kv-dtype", "f16"], "--kv-dtype f16: want f32 or bf16"),
        (["generate", "--model", STORIES, "--prompt", "x", "--quantize", "q3"], "--quantize q3: want q8, q4 or none"),
        (["generate", "--model", STORIES, "--prompt", "x", "--backend", "cuda", "--quantize", "q8"],
         "backend cuda: q8 weights run on the cpu backends only"),
        (["generate", "--model", STORIES, "--prompt", "x", "--backend", "cuda", "--quantize", "q4"],
         "backend cuda: q4 weights run on the cpu backends only"),
        (["generate", "--model", STORIES, "--prompt", "x", "--backend", "cpu-bf17"],
         "backend 'cpu-bf17' unknown (want cpu, cpu-bf16, cuda or cuda-fp32)"),
        (["generate", "--model", STORIES, "--prompt", "Once upon a time", "--ctx", "3"], "exceeds the context"),
        (["frobnicate"], "unknown command"),
    ]
    for args, want in cases:
        r = run(*args)
        check(f"error {args[1:3]} -> {want!r}", r.returncode != 0 and want in r.stderr and r.returncode < 128,
              f"rc={r.returncode} stderr={r.stderr[-300:]!r}")

# --prompt-file: the same continuation as --prompt with the file's text, from a file and from stdin.
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "prompt.txt")
    with open(path, "w") as f:
        f.write("Once upon a time")
    r = run("generate", "--model", STORIES, "--prompt-file", path, "--max-tokens", "40", "--temperature", "0")
    check("--prompt-file: the greedy continuation", r.returncode == 0 and r.stdout.startswith(EXPECT), r.stderr[-300:])
    r = subprocess.run([BIN, "generate", "--model", STORIES, "--prompt-file", "-", "--max-tokens", "40"],
                       input="Once upon a time", capture_output=True, text=True, timeout=120)
    check("--prompt-file - (stdin): the greedy continuation", r.returncode == 0 and r.stdout.startswith(EXPECT),
          r.stderr[-300:])
    with open(path, "w") as f:
        f.write("Once upon a time. " * 6000)  # 108 KB: read in several pieces; far past the context
    r = run("generate", "--model", STORIES, "--prompt-file", path, "--max-tokens", "4", "--ctx", "512")
    check("--prompt-file of 108 KB: read whole (30001 tokens), then refused as past --ctx",
          r.returncode == 1 and "prompt of 30001 tokens exceeds the context of 512" in r.stderr, r.stderr[-300:])

# The CUDA backend's diagnostic switches: a misspelt value is an error, found before any GPU is needed.
for var, val in (("BURST_FLASH", "flahs"), ("BURST_PROFILE", "yes"), ("BURST_BATCHED_DECODE", "on"),
                 ("BURST_CUDA_GRAPHS", "true"), ("BURST_GROUPED_GEMM", "off"), ("BURST_SPLIT_K", "4")):
    r = subprocess.run([BIN, "generate", "--model", STORIES, "--prompt", "x", "--backend", "cuda"], capture_output=True,
                       text=True, timeout=120, env={**os.environ, var: val})
    if "has no CUDA" in r.stderr:
        print(f"skip {var}: built without CUDA")
        continue
    check(f"{var}={val} refused", r.returncode == 1 and f"{var}={val}: want" in r.stderr, r.stderr[-300:])

r = run("generate", "--help")
check("--help", r.returncode == 0 and "--max-tokens" in r.stdout, r.stdout[:200])
sys.exit(1 if failures else 0)
