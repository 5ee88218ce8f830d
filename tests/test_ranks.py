"""BurstAttention across G ranks on the real stories260K model: greedy text identical for
G = 1, 2, 3, 4, 8, and logits of G ranks and of chunked prefill (chunks of 1, 7, 64 tokens)
equal one-shot G = 1 to 1e-5 relative error with the same greedy tokens, through one-shot and
chunked ring prefill (n >= 2G), replicated short segments (n < 2G) and sharded decode; the same
with a bf16 KV cache, to 5e-3 (below); and a slot cut to a prefix (the prefix cache), or a prefix
copied to another slot, then extended equals a fresh prefill of the same tokens, for G = 1, 2, 3,
4, 8."""
import os, subprocess, sys, tempfile
import numpy as np

BIN = os.environ["BURST_BIN"]
STORIES = os.path.join(os.environ["BURST_MODELS_DIR"], "stories260K")
if not os.path.isdir(STORIES):
    print("skip: no", STORIES)
    sys.exit(77)
PROMPT = ("Once upon a time, there was a little boy named Tim. Tim had a big red ball. He liked to "
          "throw the ball high in the sky. One day, Tim saw a cat in the tree. The cat was scared.")
# With an f32 cache, greedy tokens must agree where the top two logits are further apart than
# this (test_logits' f32 allowance): G ranks' logits differ from one rank's by up to ~1.1e-5, and
# a top two that close (~3e-5 of a row; a run checks ~30 rows of fresh random prompts: ~1e-3 a
# run) could flip.
TIE_F32 = 1e-4
failures = 0

def check(name, ok, detail=""):
    global failures
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + detail))
    failures += not ok

texts = {}
for G, kv in [(1, "f32"), (2, "f32"), (3, "f32"), (4, "f32"), (8, "f32"), (1, "bf16"), (3, "bf16")]:
    r = subprocess.run([os.path.join(BIN, "burst"), "generate", "--model", STORIES, "--prompt", PROMPT,
                        "--max-tokens", "60", "--ranks", str(G), "--batch", "48", "--kv-dtype", kv],
                       capture_output=True, text=True, timeout=120)
    texts[G, kv] = r.stdout
    check(f"generate G={G} KV {kv}", r.returncode == 0 and len(r.stdout) > 100, r.stderr[-300:])
    check(f"greedy text G={G} == G=1, KV {kv}", texts[G, kv] == texts[1, kv], f"{texts[G, kv]!r} vs {texts[1, kv]!r}")

# Logits: prefill of n tokens in chunks of `batch`, then decode steps, against G = 1 in one chunk.
# Covers one-shot and chunked ring prefill (n >= 2G), replicated short chunks (n < 2G) and sharded
# decode; chunk sizes 1, 7, 64 and the whole prompt for G = 1, 2, 3 (issue 7), and G = 4, 8.
rng = np.random.default_rng()
with tempfile.TemporaryDirectory() as d_tmp:
    def logits(toks, n, batch, G, kv="f32"):
        out = os.path.join(d_tmp, f"l{G}.bin")
        args = [os.path.join(BIN, "tests", "forward_dump"), "--kv-dtype", kv, STORIES, out, str(batch), str(G)]
        r = subprocess.run(args + [str(t) for t in toks[:n]] + ["--"] + [str(t) for t in toks[n:]],
                           capture_output=True, text=True, timeout=120)
        return np.fromfile(out, dtype=np.float32).astype(np.float64).reshape(len(toks) - n + 1, -1) \
            if r.returncode == 0 else None
    runs = [(n, batch, G) for n in (1, 5, 37) for G in (2, 3, 4, 8) for batch in (512,)]
    runs += [(150, batch, G) for G in (1, 2, 3) for batch in (1, 7, 64, 150) if (G, batch) != (1, 150)]
    runs += [(200, 40, 4), (200, 7, 8)]
    runs = [r + ("f32",) for r in runs] + [(5, 512, 3, "bf16"), (150, 7, 2, "bf16"), (200, 7, 8, "bf16")]
    for n, kv in sorted({(r[0], r[3]) for r in runs}):
        toks = [1] + rng.integers(3, 512, n - 1 + 4).tolist()
        ref = logits(toks, n, n, 1, kv)
        for _, batch, G, _ in [r for r in runs if r[0] == n and r[3] == kv]:
            got = logits(toks, n, batch, G, kv)
            ok = got is not None and got.shape == ref.shape
            # float32 merges in another order: ~2e-7 relative; 1e-5 is the bound. With a
            # bf16 cache those 1e-7 differences of K/V flip the rounding of the few values that
            # lie near a bf16 boundary, each by 2^-8 relative: seen up to 1.3e-4 here and 6.6e-4 in
            # test_logits, so 5e-3. There the greedy tokens must agree where the top two logits are
            # 1e-2 or more apart; with f32, TIE_F32.
            rel = np.linalg.norm(got - ref) / np.linalg.norm(ref) if ok else float("inf")
            top2 = np.sort(ref, -1)[:, -2:]
            clear = top2[:, 1] - top2[:, 0] > (TIE_F32 if kv == "f32" else 1e-2)
            same = ok and np.array_equal(got.argmax(-1)[clear], ref.argmax(-1)[clear])
            check(f"logits n={n} chunk={batch} G={G} KV {kv}: rel {rel:.2e}, greedy tokens {'equal' if same else 'differ'}",
                  ok and rel < (1e-5 if kv == "f32" else 5e-3) and same)

    # The prefix cache's cut and copy (llama_slot_truncate, llama_slot_copy): prefill 150 tokens in
    # chunks, decode 5, keep the first L (in the slot, and copied to another) and prefill 40 more;
    # the logits after them must equal a fresh prefill of those L + 40 tokens. Cuts inside a zigzag part of a chunk, at chunk ends, among decode tokens, and at 0.
    toks = [1] + rng.integers(3, 512, 149 + 5 + 40).tolist()
    a, d, b = toks[:150], toks[150:155], toks[155:]
    for G, batch, L in [(1, 64, 77), (2, 64, 64), (3, 64, 77), (3, 7, 152), (4, 150, 1), (3, 64, 0), (8, 40, 155)]:
        out = os.path.join(d_tmp, "cut.bin")
        args = [os.path.join(BIN, "tests", "forward_dump"), STORIES, out, str(batch), str(G)]
        r = subprocess.run(args + [str(t) for t in a] + ["--"] + [str(t) for t in d] + ["+", str(L)] +
                           [str(t) for t in b], capture_output=True, text=True, timeout=120)
        rows = np.fromfile(out, dtype=np.float32).astype(np.float64).reshape(8, -1) if r.returncode == 0 else None
        ref = logits((a + d)[:L] + b, L + 40, L + 40, 1)[0]
        for what, row in [("copied to another slot", -2), ("cut", -1)]:
            got = rows[row] if rows is not None else None
            rel = np.linalg.norm(got - ref) / np.linalg.norm(ref) if got is not None else float("inf")
            top2 = np.sort(ref)[-2:]
            check(f"first {L} of 150 + 5 tokens {what} (chunk {batch}, G={G}), then 40 more: rel {rel:.2e}",
                  rel < 1e-5 and (got.argmax() == ref.argmax() or top2[1] - top2[0] <= TIE_F32), r.stderr[-300:])
sys.exit(1 if failures else 0)
