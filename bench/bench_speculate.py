"""Speculative decoding (burstd --speculate K): greedy completions of 250 tokens from a daemon with
K = 0 (off), 2, 4, 8, one stream at a time and four at once (4 slots), on a real model (default
stories260K, 1 thread). Prints output tokens/s on the client, the drafted and accepted tokens
(burst's metrics) and the decode steps a request took on average (tokens less accepted drafts),
the median of 7 runs of the four prompts.
The texts are the same for every K (test_server_speculate checks that); only the time differs.
Two prompts: a story's first words, and a story the model told before followed by its first
words again (an answer that may quote its context, as a summary or an edit does).
   /usr/bin/python3 bench/bench_speculate.py BUILD_DIR [--model DIR] [--threads N] [--backend NAME]"""
import os, statistics, sys, threading, time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from bench_args import take_option

args = sys.argv[1:]
if not args:
    sys.exit(__doc__)
os.environ["BURST_BIN"] = args[0]
os.environ.setdefault("BURST_MODELS_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "models"))
from burstd_util import STORIES, Burstd

model = (take_option(args, "--model", 1) or [STORIES])[0]
threads = (take_option(args, "--threads", 1) or ["1"])[0]
backend = (take_option(args, "--backend", 1) or ["cpu"])[0]
REPS = 7  # each a few tenths of a second on stories260K: the median of 7
starts = ["Once upon a time", "Tom had a dog.", "Lily and Ben went to the park.", "One day, a little bird"]


def complete(d, prompt, max_tokens=250):
    status, _, body = d.request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": max_tokens,
                                                            "temperature": 0, "ignore_eos": True})
    if status != 200:
        sys.exit(f"burstd answered {status}: {body}")
    return body


def run(d, prompts, streams):
    """Sends the prompts, `streams` at a time; returns (output tokens, seconds)."""
    tokens, lock, todo = [0], threading.Lock(), list(prompts)

    def client():
        while True:
            with lock:
                if not todo:
                    return
                p = todo.pop()
            n = complete(d, p)["usage"]["completion_tokens"]
            with lock:
                tokens[0] += n
    t0 = time.time()
    clients = [threading.Thread(target=client) for _ in range(streams)]
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    return tokens[0], time.time() - t0


with Burstd(model, "--threads", threads, "--backend", backend) as d:
    retell = [complete(d, s, 150)["choices"][0]["text"] for s in starts]  # prompt + answer within 512 tokens
workloads = {"story": starts, "retell": [s + r + "\n\n" + s for s, r in zip(starts, retell)]}
print(f"model {os.path.basename(model)}, {backend}, {threads} thread(s), 250 tokens a request, greedy\n")
print("| prompt | streams | K | tokens/s | drafted | accepted | steps a request | speed-up |")
print("|---|---|---|---|---|---|---|---|")
for name, prompts in workloads.items():
    for streams in (1, 4):
        base = None
        for k in (0, 2, 4, 8):
            with Burstd(model, "--threads", threads, "--backend", backend, "--slots", "4", "--speculate", str(k)) as d:
                run(d, prompts[:1], 1)  # warm: page in the weights, size the buffers
                drafted0, accepted0 = (d.metric(f"spec_decode_num_{w}_tokens_total") for w in ("draft", "accepted"))
                times = [run(d, prompts, streams) for _ in range(REPS)]
                drafted = (d.metric("spec_decode_num_draft_tokens_total") - drafted0) / REPS
                accepted = (d.metric("spec_decode_num_accepted_tokens_total") - accepted0) / REPS
            n, secs = times[0][0], statistics.median(t for _, t in times)
            rate = n / secs
            base = base or rate
            print(f"| {name} | {streams} | {k} | {rate:.0f} | {drafted:.0f} | {accepted:.0f} | "
                  f"{(n - accepted) / len(prompts):.0f} | {rate / base:.2f}x |", flush=True)
