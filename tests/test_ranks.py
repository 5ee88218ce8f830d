"""BurstAttention across G ranks on the real stories260K model: greedy text identical for
G = 1, 2, 3, 4, 8, and logits of G ranks equal G = 1 to 1e-5 relative error, through one-shot
and chunked ring prefill (n >= 2G), replicated short segments (n < 2G) and sharded decode."""
import os, subprocess, sys, tempfile
import numpy as np

BIN = os.environ["BURST_BIN"]
STORIES = os.path.join(os.environ["BURST_MODELS_DIR"], "stories260K")
if not os.path.isdir(STORIES):
    print("skip: no", STORIES)
    sys.exit(77)
PROMPT = ("Once upon a time, there was a little boy named Tim. Tim had a big red ball. He liked to "
          "throw the ball high in the sky. One day, Tim saw a cat in the tree. The cat was scared.")
failures = 0

def check(name, ok, detail=""):
    global failures
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + detail))
    failures += not ok

texts = {}
for G in (1, 2, 3, 4, 8):
    r = subprocess.run([os.path.join(BIN, "burst"), "generate", "--model", STORIES, "--prompt", PROMPT,
                        "--max-tokens", "60", "--ranks", str(G), "--batch", "48"],
                       capture_output=True, text=True, timeout=120)
    texts[G] = r.stdout
    check(f"generate G={G}", r.returncode == 0 and len(r.stdout) > 100, r.stderr[-300:])
    check(f"greedy text G={G} == G=1", texts[G] == texts[1], f"{texts[G]!r} vs {texts[1]!r}")

# Logits: prefill of n tokens in chunks of `batch`, then decode steps, compared with G = 1.
rng = np.random.default_rng()
with tempfile.TemporaryDirectory() as d:
    for n, batch in ((1, 512), (5, 512), (37, 512), (150, 40), (200, 7)):
        toks = [1] + rng.integers(3, 512, n - 1 + 4).tolist()
        def logits(G):
            out = os.path.join(d, f"l{G}.bin")
            args = [os.path.join(BIN, "tests", "forward_dump"), STORIES, out, str(batch), str(G)]
            r = subprocess.run(args + [str(t) for t in toks[:n]] + ["--"] + [str(t) for t in toks[n:]],
                               capture_output=True, text=True, timeout=120)
            return np.fromfile(out, dtype=np.float32).astype(np.float64) if r.returncode == 0 else None
        ref = logits(1)
        for G in (2, 3, 4, 8):
            got = logits(G)
            ok = got is not None and got.shape == ref.shape
            # float32 merges in another order: ~1e-7 relative; 1e-5 is the bound.
            rel = np.linalg.norm(got - ref) / np.linalg.norm(ref) if ok else float("inf")
            check(f"logits n={n} batch={batch} G={G}: rel {rel:.2e}", ok and rel < 1e-5)
sys.exit(1 if failures else 0)
