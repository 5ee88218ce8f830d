"""Several completions in one request, on stories260K. OpenAI's n: the prompt is prefilled once and
its K/V copied to each choice's slot (llama_slot_copy), then each choice samples on its own with
the request's seed + its index.
- greedy n=3: every choice is the n=1 answer (text; logprobs within 1e-4), on 1 rank and on 3
  (the copy of a sharded slot); usage counts the prompt once and every choice's tokens; with echo
  too (each choice begins with the prompt, and its entries), and with max_tokens 0;
- seeded sampling n=4, its choices sampled on two threads: choice i is the n=1 completion with
  seed + i (text; with logprobs, the entries too), the choices differ, and the same request again
  gives the same choices;
- streamed: every chunk names its choice, each choice's text equals the whole response's, each
  ends with its finish_reason, then one usage chunk and [DONE]; chats name the role in each
  choice's first delta;
- n = --slots takes every slot; a request behind it waits and runs after;
- a client that leaves a streamed n=3 request frees all three slots.
A batch of prompts ("prompt" as an array of several, what lm-eval-harness sends):
- choice i is prompt i's completion as if sent alone (text, logprobs within 1e-4), with n=2
  choice 2i + j; usage sums the prompts and completions; echo with logprobs and max_tokens 0
  (loglikelihood scoring) gives each prompt's entries; streamed with echo (n=1 and 2), each choice's chunks
  are its prompt's text and completion; a client that leaves a streamed batch cancels all of it."""
import os
import re
import tempfile
import threading
import time

from burstd_util import MODELS, STORIES, Burstd, Checks, logprob_diff, need_stories
from make_random_model import write_model

need_stories()
check = Checks()
C, H = "/v1/completions", "/v1/chat/completions"
PROMPT = "Once upon a time, there was a little girl named Lily. She loved to"
TOL = 1e-4


def post(d, path, body):
    status, _, r = d.request("POST", path, body)
    if status != 200:
        raise RuntimeError(f"{status}: {r}")
    return r


def max_diff(choices, refs):
    """The largest difference of the choices' logprobs from the references' (inf if any length differs)."""
    return max(logprob_diff(c, r) for c, r in zip(choices, refs))


def choice_texts(events):
    """Each choice's text in a stream, by index: its chunks' texts in order."""
    texts = {}
    for e in events:
        if isinstance(e, dict) and e["choices"]:
            texts[e["choices"][0]["index"]] = texts.get(e["choices"][0]["index"], "") + e["choices"][0]["text"]
    return texts


def sp_decode(d, ids):
    """The text of token ids, as burstd decodes them (BOS has none)."""
    return d.request("POST", "/detokenize", {"tokens": ids})[2]["content"]


def greedy(d, tag):
    body = {"prompt": PROMPT, "max_tokens": 24, "temperature": 0, "logprobs": 2}
    one = post(d, C, body)
    many = post(d, C, {**body, "n": 3})
    ch = many["choices"]
    ref = one["choices"][0]
    diff = max_diff(ch, [ref] * len(ch))
    check(f"{tag}: greedy n=3: choices 0, 1, 2, each the n=1 text, logprobs within {TOL} (max diff {diff:.1e})",
          [c["index"] for c in ch] == [0, 1, 2] and all(c["text"] == ref["text"] for c in ch) and diff < TOL,
          [c["text"] for c in ch] + [ref["text"]])
    u = many["usage"]
    check(f"{tag}: usage counts the prompt once and the tokens of every choice",
          u["prompt_tokens"] == one["usage"]["prompt_tokens"] and u["completion_tokens"] == 72
          and u["total_tokens"] == u["prompt_tokens"] + 72, u)

    # With echo, every choice carries the prompt: its text, and with logprobs its entries.
    one = post(d, C, {**body, "echo": True})
    many = post(d, C, {**body, "echo": True, "n": 3})
    diff = max_diff(many["choices"], [one["choices"][0]] * 3)
    check(f"{tag}: greedy n=3 with echo and logprobs: each choice the n=1 answer, prompt entries included "
          f"(max diff {diff:.1e})", diff < TOL and all(c["text"] == one["choices"][0]["text"] and c["text"].startswith(PROMPT)
                                                       for c in many["choices"]), [c["text"] for c in many["choices"]])
    for extra in ({"logprobs": 1}, {}):  # loglikelihood scoring; the prompt's text alone (no model run)
        score = {"prompt": PROMPT, "max_tokens": 0, "echo": True, **extra}
        one, many = post(d, C, score), post(d, C, {**score, "n": 2})
        diff = max_diff(many["choices"], [one["choices"][0]] * 2) if extra else 0
        check(f"{tag}: n=2, echo, max_tokens 0{', logprobs' if extra else ''}: both choices the prompt"
              f"{' and its entries' if extra else ''} (max diff {diff:.1e})",
              len(many["choices"]) == 2 and diff < TOL and many["usage"]["completion_tokens"] == 0
              and all(c["text"] == PROMPT and c["finish_reason"] == "length" for c in many["choices"]), many)


# Two threads: the choices' tokens (and logprobs) are sampled side by side (server/engine.c).
with Burstd(STORIES, "--slots", "4", "--threads", "2") as d:
    greedy(d, "1 rank")

    body = {"prompt": PROMPT, "max_tokens": 20, "temperature": 1, "seed": 1234}
    many = [c["text"] for c in post(d, C, {**body, "n": 4})["choices"]]
    singles = [post(d, C, {**body, "seed": 1234 + i})["choices"][0]["text"] for i in range(4)]
    check("seeded n=4: choice i is the n=1 completion with seed + i", many == singles, (many, singles))
    many_lp = post(d, C, {**body, "n": 4, "logprobs": 2})["choices"]
    singles_lp = [post(d, C, {**body, "seed": 1234 + i, "logprobs": 2})["choices"][0] for i in range(4)]
    diff = max_diff(many_lp, singles_lp)
    check(f"seeded n=4 with logprobs: choice i is the n=1 completion with seed + i (max diff {diff:.1e})",
          [c["text"] for c in many_lp] == many and diff < TOL, (many_lp, singles_lp))
    check("seeded n=4: the choices differ", len(set(many)) > 1, many)
    again = [c["text"] for c in post(d, C, {**body, "n": 4})["choices"]]
    check("seeded n=4: the same request again gives the same choices", again == many, (again, many))

    whole = post(d, C, {**body, "n": 3, "max_tokens": 12})
    status, events = d.stream(C, {**body, "n": 3, "max_tokens": 12, "stream_options": {"include_usage": True}})
    chunks = [e for e in events if isinstance(e, dict) and e["choices"]]
    texts, finals = ["", "", ""], [None] * 3
    for e in chunks:
        (c,) = e["choices"]
        texts[c["index"]] += c["text"]
        if c["finish_reason"]:
            finals[c["index"]] = c["finish_reason"]
    usage = [e for e in events if isinstance(e, dict) and not e["choices"] and "usage" in e]
    check("streamed n=3: one choice a chunk, each choice's text = the whole response's, each ends with its reason",
          status == 200 and texts == [c["text"] for c in whole["choices"]]
          and finals == [c["finish_reason"] for c in whole["choices"]], (texts, finals))
    check("streamed n=3: then one usage chunk with every choice's tokens, and [DONE]",
          len(usage) == 1 and usage[0]["usage"]["completion_tokens"] == whole["usage"]["completion_tokens"]
          and events[-1] == "[DONE]" and events[-2] is usage[0], events[-3:])

    chat = {"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 8, "temperature": 0, "n": 2}
    r = post(d, H, chat)
    check("chat n=2: two assistant messages", [c["index"] for c in r["choices"]] == [0, 1]
          and all(c["message"]["role"] == "assistant" for c in r["choices"])
          and r["choices"][0]["message"]["content"] == r["choices"][1]["message"]["content"], r["choices"])
    status, events = d.stream(H, chat)
    first = {}
    for e in events:
        if isinstance(e, dict) and e["choices"]:
            first.setdefault(e["choices"][0]["index"], e["choices"][0]["delta"])
    check("chat streamed n=2: each choice's first delta names the role",
          status == 200 and sorted(first) == [0, 1] and all(x.get("role") == "assistant" for x in first.values()), first)


    # A batch of prompts (what lm-eval-harness sends with batch_size > 1): choice i*n + j is
    # prompt i's j-th completion, each as if sent alone.
    batch = [PROMPT, "Tim and his dog", [1, 400, 300, 77], "One day"]
    body = {"prompt": batch, "max_tokens": 16, "temperature": 0, "logprobs": 1}
    got = post(d, C, body)
    alone = [post(d, C, {**body, "prompt": p}) for p in batch]
    diff = max_diff(got["choices"], [a["choices"][0] for a in alone])
    check(f"batch of 4 prompts: choice i = prompt i alone (text; logprobs max diff {diff:.1e})",
          [c["index"] for c in got["choices"]] == [0, 1, 2, 3] and diff < TOL
          and [c["text"] for c in got["choices"]] == [a["choices"][0]["text"] for a in alone], got["choices"])
    check("batch of 4 prompts: usage sums the prompts and the completions",
          got["usage"]["prompt_tokens"] == sum(a["usage"]["prompt_tokens"] for a in alone)
          and got["usage"]["completion_tokens"] == 64, got["usage"])
    got = post(d, C, {**body, "n": 2, "logprobs": None})
    check("batch of 4 prompts with n=2: choice 2i + j is prompt i's",
          [c["text"] for c in got["choices"]] == [a["choices"][0]["text"] for a in alone for _ in range(2)]
          and got["usage"]["completion_tokens"] == 128, [c["text"] for c in got["choices"]])
    score = {"prompt": batch, "max_tokens": 0, "echo": True, "logprobs": 1}
    got = post(d, C, score)
    alone = [post(d, C, {**score, "prompt": p}) for p in batch]
    diff = max_diff(got["choices"], [a["choices"][0] for a in alone])
    check(f"batch echo + logprobs, max_tokens 0 (loglikelihood scoring): each prompt's text and entries as alone "
          f"(max diff {diff:.1e})", diff < TOL and [c["text"] for c in got["choices"]] == [a["choices"][0]["text"] for a in alone]
          and [c["logprobs"]["tokens"] for c in got["choices"]] == [a["choices"][0]["logprobs"]["tokens"] for a in alone],
          [c["text"] for c in got["choices"]])
    whole = post(d, C, {"prompt": batch, "max_tokens": 10, "temperature": 0})
    status, events = d.stream(C, {"prompt": batch, "max_tokens": 10, "temperature": 0, "echo": True})
    texts = choice_texts(events)
    want = [(p if isinstance(p, str) else sp_decode(d, p)) + c["text"] for p, c in zip(batch, whole["choices"])]
    check("streamed batch with echo: each choice's chunks = its prompt's text + the whole response's",
          status == 200 and [texts.get(i) for i in range(4)] == want and events[-1] == "[DONE]", (texts, want))
    status, events = d.stream(C, {"prompt": batch[:2], "max_tokens": 10, "temperature": 0, "echo": True, "n": 2})
    texts = choice_texts(events)
    check("streamed batch of 2 with n=2 and echo: choice 2i + j = prompt i's text + its completion",
          status == 200 and [texts.get(i) for i in range(4)] == [want[0], want[0], want[1], want[1]], texts)

with Burstd(STORIES, "--slots", "3", "--ranks", "3") as d:
    greedy(d, "3 ranks")

# On a random-weight model slow enough to watch (a few ms a token on one CPU thread):
with tempfile.TemporaryDirectory() as tmp:
    write_model(tmp, dim=256, hidden=768, layers=4, heads=8, kv_heads=4, vocab=512, max_seq=4096,
                tokenizer=os.path.join(MODELS, "stories260K", "tokenizer.model"))
    with Burstd(tmp, "--slots", "4") as d:
        # n = --slots takes every slot: a request sent behind it waits, then runs.
        out = {}
        t = threading.Thread(target=lambda: out.update(big=post(d, C, {"prompt": PROMPT, "max_tokens": 300, "n": 4,
                                                                         "temperature": 1, "ignore_eos": True})))
        t.start()
        deadline = time.time() + 30
        while d.metric("num_requests_running") < 4 and time.time() < deadline:
            time.sleep(0.01)
        small = post(d, C, {"prompt": "Tim", "max_tokens": 4, "ignore_eos": True})
        t.join(120)
        check("n=4 on 4 slots: four choices of 300 tokens; a request behind it waited and ran",
              len(out["big"]["choices"]) == 4 and out["big"]["usage"]["completion_tokens"] == 1200
              and small["usage"]["completion_tokens"] == 4 and small["usage"]["queue_time_s"] > 0.05,
              (out["big"]["usage"], small["usage"]))

        # A client that leaves a streamed n=3 request: the three slots free at once.
        c = d.connect()
        c.request("POST", C, body=b'{"prompt": "Tim", "max_tokens": 3000, "n": 3, "stream": true, "ignore_eos": true}',
                  headers={"Content-Type": "application/json"})
        resp = c.getresponse()
        first = resp.readline()
        c.close()
        gone = [d.wait_log(rf"choice {i} cancelled \(client gone\) while decoding", timeout=30) for i in range(3)]
        check("a client leaving a streamed n=3 request: all three choices cancelled",
              resp.status == 200 and first.startswith(b"data: ") and all(gone),
              [line for line in d.lines if "cmpl-5" in line])
        r = post(d, C, {"prompt": PROMPT, "max_tokens": 4, "n": 4})
        check("... and their slots free again (n=4 runs)", len(r["choices"]) == 4, r)

        # A client that leaves a streamed batch of 3 prompts: every prompt of it is cancelled.
        c = d.connect()
        c.request("POST", C, body=b'{"prompt": ["Tim", "Sam", "Lily"], "max_tokens": 3000, "stream": true, '
                  b'"ignore_eos": true}', headers={"Content-Type": "application/json"})
        resp = c.getresponse()
        first = resp.readline()
        c.close()
        ids = [re.escape(r["id"][:-1]) + str(int(r["id"][-1]) + 1) + s for s in ("", ".1", ".2")]
        gone = [d.wait_log(rf"{i} \| cancelled \(client gone\)", timeout=30) for i in ids]
        check("a client leaving a streamed batch of 3 prompts: all three cancelled",
              resp.status == 200 and first.startswith(b"data: ") and all(gone), (ids, d.log()[-600:]))

    # --max-wait counts a request's choices: with one of two slots decoding a long request, n=1
    # gets the free slot at once, n=2 would wait for the long one and is refused. The long one is
    # 16000 tokens (--ctx 16384, past the model's 4096: only its length matters): 3000 were
    # estimated at 1 to 4 s on a loaded 2-core Xeon, close enough to --max-wait 1 (and to the
    # Retry-After > 1 below) that an idle or faster machine would admit n=2.
    with Burstd(tmp, "--slots", "2", "--max-wait", "1", "--ctx", "16384") as d:
        c = d.connect()
        c.request("POST", C, body=b'{"prompt": "Tim", "max_tokens": 16000, "stream": true, "ignore_eos": true}',
                  headers={"Content-Type": "application/json"})
        resp = c.getresponse()
        for _ in range(20):  # decode steps behind it: the estimate has their time
            resp.readline()
        one = d.request("POST", C, {"prompt": "Sam", "max_tokens": 2})
        two = d.request("POST", C, {"prompt": "Sam", "max_tokens": 2, "n": 2})
        c.close()
        check("--max-wait 1 beside a 16000-token request: n=1 runs, n=2 gets 429 wait_too_long",
              one[0] == 200 and two[0] == 429 and two[2]["error"]["code"] == "wait_too_long"
              and int(two[1]["Retry-After"]) > 1, (one[0], two[0], two[2], two[1].get("Retry-After")))
check.exit()
