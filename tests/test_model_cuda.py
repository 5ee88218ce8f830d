"""The whole model on the CUDA backend against the CPU backend: logits of random-weight models
(chunked prefill, then decode steps through the KV cache) from forward_dump, in fp32 mode
("cuda-fp32") and bf16 mode ("cuda"), each with a float32 and a bf16 KV cache (against the CPU
with the same cache), and each with BURST_CUDA_GRAPHS=1, with batched decode (the default) and
without (BURST_BATCHED_DECODE=0), also against itself without graphs, and with BURST_GROUPED_GEMM=0 BURST_SPLIT_K=0; ring prefill and sharded decode over G = 2, 4, 8 virtual ranks on one GPU
against G = 1; and `burst generate` greedy text on stories260K, identical between cpu and
cuda-fp32, with 1 and 3 ranks and both caches, also from burstd with --speculate 4, and four streams at
once with BURST_BATCHED_DECODE=1 on 1 and 3 ranks (and BURST_CUDA_GRAPHS=1 on 1). Skips (77) when the build has no CUDA or no device."""
import os, re, subprocess, sys, tempfile
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from make_random_model import write_model

BIN = os.environ["BURST_BIN"]
TOOL = os.path.join(BIN, "tests", "forward_dump")
STORIES = os.path.join(os.environ["BURST_MODELS_DIR"], "stories260K")
# Relative L2 error of the logits against the CPU backend. fp32: both sides are float32 with
# different summation orders (cuBLAS, block reductions): ~1e-6 over a few layers. bf16: every
# weight and GEMM/attention operand rounded to bf16 (2^-9), the gate and up projections' outputs
# too (they are SwiGLU's bf16 inputs): ~1e-2 after a few layers.
# A bf16 KV cache rounds K/V at the same points on both sides, but a value that float32 puts near
# a bf16 rounding midpoint may round the other way on the GPU (2^-8 relative on that element):
# the H100 saw 9e-5 and 2e-4 in fp32 mode (test_logits sees up to 6.6e-4 against float64 and
# allows 5e-3, as here). A stride or conversion bug costs O(1); test_backend_cuda holds each op
# with a bf16 cache to 1e-10 against the CPU.
MAX_REL = {("cuda-fp32", "f32"): 1e-5, ("cuda-fp32", "bf16"): 5e-3, ("cuda", "f32"): 3e-2, ("cuda", "bf16"): 3e-2}
# G ranks against one rank on the same backend: the same roundings of every operand, merged in
# another order (fp32): ~1e-7 relative in fp32 mode; bf16 mode adds the flash kernel's tiling of
# other key blocks, still float32 accumulation, and blocks of at most 8 rows per rank (G=8 of a
# 64-row chunk) attend in fp32 (attention/decode_cuda.h) where G=1 rounds Q/K/V to bf16: by
# estimate a few 1e-3 (one 2^-9 rounding of attention operands), under 1e-2.
# With a bf16 cache in fp32 mode the K/V of G ranks come from other GEMM shapes, so a value near a
# rounding midpoint may round the other way, as above (the H100 saw up to 4.8e-5).
MAX_REL_RANKS = {("cuda-fp32", "f32"): 1e-5, ("cuda-fp32", "bf16"): 5e-3, ("cuda", "f32"): 1e-2, ("cuda", "bf16"): 1e-2}
CASES = [  # model shape, prompt length, prefill chunk, decode steps
    dict(model=dict(dim=96, hidden=200, layers=2, heads=6, kv_heads=2, vocab=300, dtype="f32"), n=37, batch=8, dec=5),
    dict(model=dict(dim=256, hidden=172, layers=3, heads=4, kv_heads=4, vocab=257, dtype="bf16", tie=True,
                    rope_theta=500000.0), n=150, batch=64, dec=3),  # head_dim 64: the flash kernel in bf16 mode, decode split-KV
    dict(model=dict(dim=256, hidden=100, layers=2, heads=2, kv_heads=1, vocab=512, dtype="f16"), n=1, batch=512, dec=4),
    # 140 decode steps, each one's logits compared: past 128 keys the split-KV kernel's second
    # split (and its merge) appear, so that a replayed CUDA graph step meets one it was not
    # (a replay refused, the step recorded anew: graph_split)
    dict(model=dict(dim=80, hidden=64, layers=2, heads=5, kv_heads=5, vocab=99, dtype="f32"), n=1, batch=1, dec=140,
         graph_split=True),
    dict(model=dict(dim=256, hidden=100, layers=2, heads=4, kv_heads=2, vocab=300, dtype="bf16",  # the GPU's rope
                    rope_scaling={"type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64}),
         n=150, batch=64, dec=3),
    # 2048 columns into the output projections: decode's split-K GEMMs (model/backend_cuda.cu)
    dict(model=dict(dim=2048, hidden=2048, layers=2, heads=16, kv_heads=16, vocab=300, dtype="bf16"), n=20, batch=64,
         dec=3, split_k=True),
]


def dump(backend, kv, d, toks, n, batch, ranks=1, env=None):
    out = os.path.join(d, f"logits.{backend}.{kv}.{ranks}.bin")
    args = [TOOL, "--backend", backend, "--kv-dtype", kv, d, out, str(batch), str(ranks)] + [str(t) for t in toks[:n]]
    if len(toks) > n:
        args += ["--"] + [str(t) for t in toks[n:]]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})})
    return r, (np.fromfile(out, dtype=np.float32) if r.returncode == 0 else None)


rng = np.random.default_rng()
failures = 0
for i, case in enumerate(CASES):
    with tempfile.TemporaryDirectory() as d:
        write_model(d, seed=int(rng.integers(1 << 30)), max_seq=1024, **case["model"])
        vocab = case["model"]["vocab"]
        toks = rng.integers(0, vocab, case["n"] + case["dec"]).tolist()
        refs = {kv: dump("cpu", kv, d, toks, case["n"], case["batch"]) for kv in ("f32", "bf16")}
        # Both modes with BURST_CUDA_GRAPHS=1, with batched decode and without: steps of up to 8
        # rows a sequence (decode, and case 0's chunks) as CUDA graphs, but the first of each
        # size, recorded once and then replayed with new positions, tokens and key counts
        # (model/backend_cuda.cu): every case records some and replays some.
        plain = {}
        graphs = "BURST_CUDA_GRAPHS"
        # And with BURST_GROUPED_GEMM=0 BURST_SPLIT_K=0: Q, K, V (or K and V of grouped-query
        # cases) and gate and up as separate GEMMs rather than one batched GEMM a group, and the
        # last case's decode output projections as one GEMM each rather than split-K.
        variants = [(b, kv, {}) for b, kv in MAX_REL] + [(b, kv, {graphs: "1"}) for b, kv in MAX_REL] + \
                   [(b, kv, {graphs: "1", "BURST_BATCHED_DECODE": "0"}) for b, kv in MAX_REL] + \
                   [(b, kv, {"BURST_GROUPED_GEMM": "0", "BURST_SPLIT_K": "0"}) for b, kv in MAX_REL]
        for backend, kv, switches in variants:
            switch = " ".join(f"{k}={v}" for k, v in switches.items())
            rc, ref = refs[kv]
            r, got = dump(backend, kv, d, toks, case["n"], case["batch"], env=switches)
            if "no CUDA device" in r.stderr:
                print("skip:", r.stderr.strip())
                sys.exit(77)
            if r.returncode or ref is None:
                print(f"FAIL case {i} {backend} {switch} KV {kv}: forward_dump: {r.stderr}{rc.stderr}")
                failures += 1
                continue
            got, want = got.reshape(-1, vocab).astype(np.float64), ref.reshape(-1, vocab).astype(np.float64)
            rel = np.linalg.norm(got - want) / np.linalg.norm(want)
            ok = got.shape == want.shape and rel < MAX_REL[backend, kv]
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} case {i} {backend}{' ' + switch if switch else ''} KV {kv} {case['model']}: {got.shape[0]} logit rows, "
                  f"rel err {rel:.2e} (max {MAX_REL[backend, kv]:g}), max abs err {np.abs(got - want).max():.2e}")
            if graphs in switches and (backend, kv) in plain:
                # The same kernels on the same inputs, launched from a graph: a stale position,
                # token, K/V row or key count in a replayed step would move the logits by O(1).
                # (Decode unbatched runs the same kernel code per sequence and rounds K/V alike.)
                base = plain[backend, kv]
                rel = np.linalg.norm(got - base) / np.linalg.norm(base) if got.shape == base.shape else float("inf")
                steps = re.search(r"(\d+) steps ran as CUDA graphs, (\d+) of them recorded anew \(the rest replayed\); "
                                  r"(\d+) replays refused", r.stderr)
                ran, recorded, refused = (int(steps[k]) for k in (1, 2, 3)) if steps else (0, 0, 0)
                ok = rel <= 1e-6 and ran > recorded and (not case.get("graph_split") or (recorded >= 2 and refused >= 1))
                failures += not ok
                print(f"{'ok  ' if ok else 'FAIL'} case {i} {backend} KV {kv}: {switch} against without: rel err {rel:.2e} "
                      f"(max 1e-6), {steps[0] if steps else 'no step as a graph'}")
            if switch:
                continue
            plain[backend, kv] = got
            if i > 1:
                continue
            for G in (2, 4, 8):  # virtual ranks on this GPU: ring prefill, sharded decode
                r, g = dump(backend, kv, d, toks, case["n"], case["batch"], G)
                rel = np.linalg.norm(g - got.ravel()) / np.linalg.norm(got) if g is not None else float("inf")
                ok = g is not None and g.size == got.size and rel < MAX_REL_RANKS[backend, kv]
                failures += not ok
                print(f"{'ok  ' if ok else 'FAIL'} case {i} {backend} KV {kv} G={G} against G=1: rel err {rel:.2e} "
                      f"(max {MAX_REL_RANKS[backend, kv]:g}){'' if g is not None else ': ' + r.stderr[-300:]}")
        if case.get("split_k"):
            # Each decode step's two output projections (wo, down: 2048 columns, one row) in each
            # layer ran as split-K GEMMs, by the profile's rows, and the prefill's last layer's
            # (which runs them on the row whose logits it returns); the first layer's 20 rows did not.
            r, _ = dump("cuda", "bf16", d, toks, case["n"], case["batch"], env={"BURST_PROFILE": "1"})
            calls = {m[1]: int(m[2]) for m in (re.match(r"profile cuda:0: (.*?) +(\d+) calls", l) for l in r.stderr.splitlines()) if m}
            got, want = calls.get("matmul 2048x2048 += split-k n<=1"), 2 * (case["model"]["layers"] * case["dec"] + 1)
            ok = got == want
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} case {i} BURST_PROFILE=1: {got} split-K GEMMs (want {want})")

if os.path.isdir(STORIES):  # head_dim 8: the split-KV attention kernel (attention/decode_cuda.h)
    texts = {}
    prompt = "Once upon a time, there was a little boy named Tim. He had a big red ball."
    runs = (("cpu", 1, "threads", "f32"), ("cuda-fp32", 1, "threads", "f32"), ("cuda-fp32", 3, "threads", "f32"),
            ("cuda-fp32", 1, "nccl", "f32"), ("cpu", 1, "threads", "bf16"), ("cuda-fp32", 1, "threads", "bf16"),
            ("cuda-fp32", 3, "threads", "bf16"))
    for backend, ranks, comm, kv in runs:
        r = subprocess.run([os.path.join(BIN, "burst"), "generate", "--model", STORIES, "--prompt", prompt,
                            "--max-tokens", "200", "--temperature", "0", "--batch", "9", "--backend", backend,
                            "--ranks", str(ranks), "--comm", comm, "--kv-dtype", kv], capture_output=True, text=True, timeout=300)
        texts[backend, ranks, comm, kv] = r.stdout if r.returncode == 0 else None
        if r.returncode:
            print(f"FAIL generate {backend} G={ranks} comm {comm} KV {kv}: {r.stderr[-400:]}")
    for backend, want in (("cuda", "(KV BF16)"), ("cuda-fp32", "(KV F32)")):  # the default KV cache
        r = subprocess.run([os.path.join(BIN, "burst"), "generate", "--model", STORIES, "--prompt", "Once",
                            "--max-tokens", "3", "--temperature", "0", "--backend", backend], capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, BURST_PROFILE="1"))
        ok = r.returncode == 0 and want in r.stderr
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} --backend {backend} without --kv-dtype: {want}: {r.stderr[:300]!r:.200}")
        # BURST_PROFILE=1: a row per op and shape class. A prefill of 2 tokens, then 2 one-token steps
        # (the third token needs none); wq and wo (64x64, wo adding to the residual: "+=") in 5
        # layers, wk and wv (32x64, grouped-query: not wq's shape) as one batched GEMM, and so
        # gate and up (172x64, to the act dtype); the head (512x64) on last rows. The prefill's
        # last layer runs wo, gate and up on its last row alone (the one whose logits it returns).
        rows = {m[1]: int(m[2]) for m in (re.match(r"profile cuda:0: (.*?) +(\d+) calls", l) for l in r.stderr.splitlines()) if m}
        to = " to bf16" if backend == "cuda" else ""
        want_calls = {"matmul 64x64 n<=2": 5, "matmul 64x64 += n<=2": 4, "matmul 64x64 n<=1": 10,
                      "matmul 64x64 += n<=1": 11, "matmul 512x64 n<=1": 3, "matmul 2x 32x64 n<=2": 5,
                      "matmul 2x 32x64 n<=1": 10, f"matmul 2x 172x64{to} n<=2": 4, f"matmul 2x 172x64{to} n<=1": 11}
        got = {k: rows.get(k) for k in want_calls}
        ok = got == want_calls
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} BURST_PROFILE=1 --backend {backend}: calls {got} (want {want_calls}) of {len(rows)} rows")
    for key in runs[1:]:
        base = ("cpu", 1, "threads", key[3])  # the CPU with the same KV cache
        if key == base:
            continue
        ok = texts[base] is not None and texts[base] == texts[key] and len(texts[base]) > 100
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} stories260K greedy, 200 tokens: cpu and {key[0]} G={key[1]} comm {key[2]} "
              f"KV {key[3]} {'identical' if ok else 'differ'}: {texts[key]!r:.120}")
    # Speculative decoding on the GPU (segments that want several rows' logits, slots cut back
    # after refused drafts): burstd's greedy text on cuda-fp32 with --speculate 4 is the CPU's.
    from burstd_util import Burstd
    prompts = [prompt, "Lily and Ben went to the park. Lily and Ben"]
    for ranks in (1, 3):
        with Burstd(STORIES, "--ranks", str(ranks)) as cpu, \
                Burstd(STORIES, "--ranks", str(ranks), "--backend", "cuda-fp32", "--kv-dtype", "f32", "--speculate", "4") as gpu:
            for p in prompts:
                body = {"prompt": p, "max_tokens": 200, "temperature": 0}
                want, got = cpu.request("POST", "/v1/completions", body)[2], gpu.request("POST", "/v1/completions", body)[2]
                ok = "choices" in got and got["choices"][0]["text"] == want["choices"][0]["text"]
                failures += not ok
                print(f"{'ok  ' if ok else 'FAIL'} burstd --speculate 4 on cuda-fp32 G={ranks}: the cpu's greedy text: {got!r:.160}")
            accepted = gpu.metric("spec_decode_num_accepted_tokens_total")
            failures += not accepted
            print(f"{'ok  ' if accepted else 'FAIL'} ... {accepted:.0f} drafted tokens accepted")
    # Batched decode (the default): a step's sequences attend in one launch. Four prompts at once
    # on cuda-fp32 with --speculate 4 (drafted rows: calls of several rows, another kernel instance
    # beside the one-row calls) give the CPU's greedy texts; on 3 ranks the sharded merge's copies
    # go in batches too. Then on 1 rank with BURST_CUDA_GRAPHS=1 as well, batched and not: steps
    # of changing row counts (sequences joining and leaving, drafted rows) as graphs, replayed
    # into the slot of their ops or recorded anew.
    import threading
    prompts += ["One day, a cat", "The sun was"]
    for ranks, env in ((1, {}), (3, {}), (1, {"BURST_CUDA_GRAPHS": "1"}),
                       (1, {"BURST_CUDA_GRAPHS": "1", "BURST_BATCHED_DECODE": "0"})):
        with Burstd(STORIES, "--ranks", str(ranks)) as cpu, \
                Burstd(STORIES, "--ranks", str(ranks), "--backend", "cuda-fp32", "--kv-dtype", "f32", "--speculate", "4",
                       env=env) as gpu:
            want, got = {}, {}
            bodies = {p: {"prompt": p, "max_tokens": 200, "temperature": 0} for p in prompts}
            for p in prompts:
                want[p] = cpu.request("POST", "/v1/completions", bodies[p])[2]
            threads = [threading.Thread(target=lambda p=p: got.__setitem__(p, gpu.request("POST", "/v1/completions", bodies[p])[2]))
                       for p in prompts]
            for t in threads:
                t.start()
            for t in threads:
                t.join(300)
            for p in prompts:
                ok = "choices" in got.get(p, {}) and got[p]["choices"][0]["text"] == want[p]["choices"][0]["text"]
                failures += not ok
                print(f"{'ok  ' if ok else 'FAIL'} {' '.join(f'{k}={v}' for k, v in env.items()) or 'batched decode'}, 4 streams at once on cuda-fp32 G={ranks}: the "
                      f"cpu's greedy text for {p!r:.30}: {got.get(p)!r:.120}")
sys.exit(1 if failures else 0)
