"""The prefix cache (burstd --prefix-cache, on by default), on stories260K: a prompt that begins
with tokens a free slot already holds skips their prefill, and the answer is the one a daemon
without the cache gives (same greedy text, logprobs within 1e-4: the chunks differ, so float32
rounding may).
- usage.prompt_tokens_details.cached_tokens says how many (whole and streamed), and the metrics
  prefix_cache_queries_total / prefix_cache_hits_total sum the prompt and the cached tokens;
- a prompt that extends an earlier one reuses all of it; the same prompt again all but its last
  token (whose logits give the first new token); a chat's next turn (earlier prompt + its answer +
  more) reuses the earlier prompt and the answer's tokens; a prompt cut inside the earlier one
  reuses up to the cut; a prompt sharing only BOS reuses 1;
- a prompt sharing less than half of what a free slot holds takes another slot and copies the
  shared part, so the slot keeps its longer prompt (with n=2 too: its second choice takes yet
  another slot);
- with several slots, each follow-up finds the slot that holds its prefix;
- echo with logprobs reuses nothing (every prompt token's logits are needed), and gives the
  reference's prompt logprobs;
- prompts admitted together that share a prefix prefill it once: the others wait for the first
  one's prefill to pass it and copy it; a prompt that waits so makes its source go first, ahead
  of a longer prompt that would otherwise (it finishes first);
- on 3 ranks (shards cut inside zigzag parts) and on 1;
- a prompt whose source leaves during its prefill copies what the source had prefilled;
- --prefix-cache off caches nothing; a bad value is refused in one line."""
import json
import os
import re
import subprocess
import tempfile
import threading
import time

REF_PORT = None
import numpy as np

from burstd_util import BIN, ENV, STORIES, Burstd, Checks, logprob_diff, need_stories
from make_random_model import write_model

need_stories()
check = Checks()
C = "/v1/completions"
TOL = 1e-4
# A fixed seed: a random continuation whose first token happened to equal the token the slot holds
# there (1 in 509) would make a cached count one more than the checks below say.
rng = np.random.default_rng(20261123)


def ids(n):
    return [1] + rng.integers(3, 512, n - 1).tolist()


hits = []  # cached_tokens of every request to the daemon under test, for the metrics check


def complete(d, prompt, max_tokens=12, **extra):
    status, _, body = d.request("POST", C, {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                                            "logprobs": 0, **extra})
    if status != 200:
        raise RuntimeError(f"{status}: {body}")
    if d.port != REF_PORT:
        hits.append(cached(body))
    return body


def cached(body):
    return body["usage"]["prompt_tokens_details"]["cached_tokens"]


def same_answer(name, got, ref):
    """Same text, and logprobs (of the generated tokens; of the prompt's too with echo) within TOL."""
    g, r = got["choices"][0], ref["choices"][0]
    diff = logprob_diff(g, r)
    check(f"{name}: same text, logprobs within {TOL} (max diff {diff:.1e})",
          g["text"] == r["text"] and diff < TOL, f"{g['text']!r} vs {r['text']!r}")


def hold_slots(d, max_tokens):
    """A streamed request with n = --slots (3) that holds every slot until its connection closes."""
    c = d.connect()
    c.request("POST", C, body=json.dumps({"prompt": [5, 6, 7], "n": 3, "max_tokens": max_tokens, "ignore_eos": True,
                                          "stream": True}).encode(), headers={"Content-Type": "application/json"})
    c.getresponse().readline()  # the slots are taken
    return c


def together(d, prompts):
    """Answers to prompts that burstd admits in one go: hold_slots holds every slot while they
    queue (in the order given, each sent once the one before waits), then leaves. Returns the
    answers and the order in which burstd logged their ends."""
    # 4000 tokens (the daemon's --ctx 4096): 500 took only ~0.2 s here, near what the queueing
    # takes; it leaves when told either way.
    c = hold_slots(d, 4000)
    answers = [None] * len(prompts)

    def send(i):
        answers[i] = complete(d, prompts[i], max_tokens=4)
    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(prompts))]
    deadline = time.time() + 60
    for i, t in enumerate(threads):
        t.start()
        while d.metric("num_requests_waiting") < i + 1:
            if time.time() > deadline:
                raise RuntimeError(f"prompt {i} never queued behind the request holding the slots")
            time.sleep(0.01)
    check("all queued behind the request that holds every slot", d.metric("num_requests_running") == 3)
    c.close()  # it leaves: every slot frees at once
    for t in threads:
        t.join()
    for a in answers:  # an answer may reach us before burstd logs its end
        d.wait_log(re.escape(a["id"]) + " [|]")
    log = d.log()
    return answers, sorted(range(len(prompts)), key=lambda i: log.find(answers[i]["id"] + " |"))


def run(ranks):
    global REF_PORT
    tag = f"{ranks} rank(s)"
    hits.clear()
    with Burstd(STORIES, "--slots", "3", "--ranks", str(ranks), "--prefill-chunk", "64", "--batch", "64",
                "--ctx", "4096") as d, \
            Burstd(STORIES, "--slots", "2", "--prefix-cache", "off") as ref:
        REF_PORT = ref.port
        p = ids(100)
        a = complete(d, p)
        same_answer(f"{tag}: first prompt", a, complete(ref, p))
        check(f"{tag}: first prompt: nothing cached", cached(a) == 0, cached(a))

        longer = p + ids(31)[1:]
        b = complete(d, longer)
        same_answer(f"{tag}: prompt extending the first", b, complete(ref, longer))
        check(f"{tag}: prompt extending the first: its 100 tokens cached", cached(b) == 100, cached(b))

        again = complete(d, longer)
        check(f"{tag}: same prompt again: all but its last token cached", cached(again) == 129, cached(again))
        same_answer(f"{tag}: same prompt again", again, b)

        # A chat's next turn: the earlier prompt, its answer, a new question (as text).
        text = "Once upon a time, there was a little girl named Lily. She loved to play"
        t1 = complete(d, text, max_tokens=16)
        turn2 = text + t1["choices"][0]["text"] + ". One day, her mom said"
        t2 = complete(d, turn2)
        same_answer(f"{tag}: next turn of a chat", t2, complete(ref, turn2))
        n1 = t1["usage"]["prompt_tokens"]
        check(f"{tag}: next turn of a chat: the first turn's prompt and most of its answer cached "
              f"({cached(t2)} of {t2['usage']['prompt_tokens']}; first prompt {n1})",
              n1 + 8 <= cached(t2) < t2["usage"]["prompt_tokens"], cached(t2))

        cut = longer[:57] + ids(20)[1:]
        c = complete(d, cut)
        same_answer(f"{tag}: prompt leaving the cached one at token 57", c, complete(ref, cut))
        check(f"{tag}: prompt leaving the cached one at token 57: 57 cached", cached(c) == 57, cached(c))
        # 57 is less than half of what that slot holds: the prompt went to another slot and copied
        # them, and the slot still holds the longer prompt.
        kept = complete(d, longer)
        check(f"{tag}: the slot it copied from still holds the longer prompt", cached(kept) == 129, cached(kept))

        other = ids(40)
        o = complete(d, other)
        check(f"{tag}: unrelated prompt: BOS alone cached", cached(o) == 1, cached(o))

        # Two conversations: each follow-up finds its own slot.
        x, y = ids(50), ids(60)
        complete(d, x), complete(d, y)
        x2, y2 = x + ids(10)[1:], y + ids(10)[1:]
        cx, cy = cached(complete(d, x2)), cached(complete(d, y2))
        check(f"{tag}: two conversations: each follow-up reuses its own prefix ({cx}, {cy})", cx == 50 and cy == 60)

        e = complete(d, x2, max_tokens=2, echo=True, logprobs=1)
        same_answer(f"{tag}: echo with logprobs after a cached prompt", e,
                    complete(ref, x2, max_tokens=2, echo=True, logprobs=1))
        check(f"{tag}: echo with logprobs reuses nothing", cached(e) == 0, cached(e))

        # The echo took the least recently used slot, x2's; y2's is still there.
        s_status, events = d.stream(C, {"prompt": y2, "max_tokens": 3, "temperature": 0,
                                        "stream_options": {"include_usage": True}})
        usage = [ev["usage"] for ev in events if isinstance(ev, dict) and ev.get("usage")]
        check(f"{tag}: streamed usage says cached_tokens",
              s_status == 200 and usage and usage[-1]["prompt_tokens_details"]["cached_tokens"] == 68, usage)
        hits.append(68)

        # Three prompts behind one 200-token system prompt, admitted together: one prefills it, the
        # others copy it from that one's slot.
        system = ids(200)
        group = [system + [10 + i] + ids(20)[1:] for i in range(3)]
        answers, _ = together(d, group)
        for i, a in enumerate(answers):
            same_answer(f"{tag}: prompt {i} sharing a system prompt", a, complete(ref, group[i], max_tokens=4))
        got = sorted(cached(a) for a in answers)
        check(f"{tag}: three prompts admitted together prefill their shared 200 tokens once (cached {got})",
              got == [0, 200, 200])

        # A 450-token prompt S, then W sharing its first 300, then an unrelated C of 400, admitted
        # together, one 64-token chunk a step. W waits for S; S goes in W's place (W has 319 left,
        # fewer than C's 399, which would otherwise beat S's 449), so W ends first and C last.
        s_prompt = [1, 20] + ids(449)[1:]
        w_prompt, c_prompt = s_prompt[:300] + [21] + ids(20)[1:], [1, 22] + ids(399)[1:]
        (s_ans, w_ans, c_ans), order = together(d, [s_prompt, w_prompt, c_prompt])
        same_answer(f"{tag}: prompt waiting for a running one's prefix", w_ans, complete(ref, w_prompt, max_tokens=4))
        check(f"{tag}: it copied the 300 shared tokens", cached(w_ans) == 300, cached(w_ans))
        check(f"{tag}: the prompt waiting for a prefix ends first, the longer unrelated one last",
              order == [1, 0, 2], order)

        queries, got = d.metric("prefix_cache_queries_total"), d.metric("prefix_cache_hits_total")
        check(f"{tag}: metrics count the hits ({got:.0f} of {queries:.0f} prompt tokens)", got == sum(hits),
              f"want {sum(hits)}")
        check(f"{tag}: nothing cached with --prefix-cache off", ref.metric("prefix_cache_hits_total") == 0)


run(1)
run(3)

# A request with n=2 whose first choice copies a prefix from a free slot: its second choice takes
# another slot, so the copy happens and the conversation in the source slot stays.
with Burstd(STORIES, "--slots", "3") as d:
    conv = ids(100)
    complete(d, conv)
    complete(d, ids(30))
    r = complete(d, conv[:40] + [21] + ids(20)[1:], n=2, temperature=1, seed=1)
    again = complete(d, conv + ids(10)[1:])
    check(f"n=2 copying 40 tokens of a free slot's conversation: cached {cached(r)}; the conversation's next "
          f"prompt still finds all 100 ({cached(again)})", cached(r) == 40 and cached(again) == 100)

# A source that leaves during its prefill: the prompt waiting for it copies what it had prefilled
# (the log's "at k/2000"), and prefills the rest itself. A random model slow enough to watch.
with tempfile.TemporaryDirectory() as tmp:
    write_model(tmp, dim=256, hidden=688, layers=4, heads=8, kv_heads=4, vocab=512, max_seq=2100,
                tokenizer=os.path.join(STORIES, "tokenizer.model"))
    with Burstd(tmp, "--slots", "3", "--prefill-chunk", "64", "--batch", "64") as d, \
            Burstd(tmp, "--slots", "1", "--prefix-cache", "off") as ref:
        REF_PORT = ref.port
        source = [1, 20] + ids(1999)[1:]
        waiter = source[:1900] + [21] + ids(30)[1:]
        blocker = hold_slots(d, 2000)
        src = d.connect()
        src.request("POST", C, body=json.dumps({"prompt": source, "max_tokens": 4, "stream": True}).encode(),
                    headers={"Content-Type": "application/json"})
        while d.metric("num_requests_waiting") < 1:
            time.sleep(0.01)
        out = {}
        t = threading.Thread(target=lambda: out.update(w=complete(d, waiter, max_tokens=4)))
        t.start()
        while d.metric("num_requests_waiting") < 2:
            time.sleep(0.01)
        blocker.close()  # both take slots at once: the waiter waits for the source's prefill
        while d.metric("num_requests_waiting") > 0:
            time.sleep(0.01)
        steps = d.metric("iteration_tokens_total_count")
        while d.metric("iteration_tokens_total_count") == steps:  # a step with both admitted: a source chunk
            time.sleep(0.01)
        src.close()  # the source leaves some chunks in (noticed within 0.1 s), far from the shared 1900
        t.join(120)
        gone = d.wait_log(r"cancelled \(client gone\) during prefill at (\d+)/2000 prompt tokens")
        k = int(gone.group(1)) if gone else -1
        w = out.get("w")
        check(f"the source left during its prefill at {k} of 2000 tokens; the waiter copied those and prefilled the rest",
              w is not None and 0 < k < 1900 and cached(w) == k, (k, w and w["usage"], d.log()[-800:]))
        same_answer("the waiter whose source left", w, complete(ref, waiter, max_tokens=4))

# --warmup: a throw-away prompt (the ids burstd.c's warm_up picks), in steps of --batch as a prompt
# alone runs, and a decode step run before the port opens and leave nothing behind: that prompt
# then gets the reference's answer, none of it cached. The cpu runs none by default; past the
# context it is cut to ctx - 1.
with Burstd(STORIES, "--slots", "1", "--warmup", "40", "--batch", "16", "--prefill-chunk", "8") as d, \
        Burstd(STORIES, "--ctx", "64", "--warmup", "1000") as short, Burstd(STORIES, "--slots", "1", "--prefix-cache", "off") as ref:
    REF_PORT = ref.port
    check("--warmup 40 --batch 16: logged before the port opened", re.search(r"warm-up: a prompt of 40 tokens in "
          r"chunks of 16 and a decode step in [0-9.]+ s\n.*listening on", d.log(), re.S) is not None, d.log())
    check("--warmup 1000 with --ctx 64: 63 tokens", "warm-up: a prompt of 63 tokens" in short.log(), short.log())
    check("no warm-up on the cpu by default", "warm-up" not in ref.log(), ref.log())
    warm = [(1 + 7919 * i) % 512 for i in range(41)]
    got = complete(d, warm)
    same_answer("after the warm-up, its own 41 tokens as a prompt", got, complete(ref, warm))
    check(f"... none of them cached ({cached(got)})", cached(got) == 0)
for bad in ("-1", "lots"):
    r = subprocess.run([os.path.join(BIN, "burstd"), "--model", STORIES, "--warmup", bad],
                       capture_output=True, text=True, timeout=60, env=ENV)
    check(f"--warmup {bad} is refused in one line", r.returncode == 2
          and r.stderr.strip() == f"burstd: --warmup {bad}: want an integer in [0, 1073741824]", r.stderr)

r = subprocess.run([os.path.join(BIN, "burstd"), "--model", STORIES, "--prefix-cache", "maybe"],
                   capture_output=True, text=True, timeout=60, env=ENV)
check("--prefix-cache maybe is refused in one line",
      r.returncode != 0 and r.stderr.strip() == "burstd: --prefix-cache maybe: want on or off", r.stderr)
check.exit()
