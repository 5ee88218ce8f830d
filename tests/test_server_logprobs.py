"""The OpenAI fields that change what burstd returns, on stories260K, against a float64 numpy
reference built from tests/forward_dump's logits of the same positions:
- logprobs (completions: N alternatives; chats: logprobs + top_logprobs), whole and streamed:
  each token's logprob and its alternatives (ids, order, values) are the log-softmax of the raw
  logits; the greedy token is the most likely one; logprobs 0 gives no alternatives;
- presence/frequency penalties: each greedy token is the argmax of the reference logits, given the
  tokens before it, with OpenAI's formula applied (so the sequence is the penalized greedy one),
  and the text differs from the plain one; logit_bias +100 forces a token every time, -100 on the
  greedy first token changes it (to the reference's choice with that bias);
- echo with logprobs (what lm-eval-harness's local-completions reads for loglikelihood): the
  prompt's entries, the first null, each later one the log-softmax of the logits before it,
  alternatives ranked; for a prompt of several --prefill-chunk chunks (and several 64-row blocks
  of logits a chunk), on 1 rank and on 3 (ring chunks whose rows are spread zigzag, and a last
  chunk short enough to run replicated); max_tokens 0 (the prompt alone), streamed (the prompt's
  entries with the echoed text's chunk), and with generated tokens after them;
- stop strings: the logprobs entries are those of the returned text's tokens (a token that
  begins before the cut keeps its entry), whole and streamed;
- echo, stream_options.include_usage (true, false, absent), and a 400 with an OpenAI-shaped error
  for every bad value."""
import os
import subprocess
import sys
import tempfile

import numpy as np

from burstd_util import BIN, ENV, STORIES, Burstd, Checks, need_stories, stream_text

need_stories()
try:
    import sentencepiece as spm
except ImportError:
    print("skip: python3-sentencepiece missing (the reference token strings)")
    sys.exit(77)

check = Checks()
sp = spm.SentencePieceProcessor(model_file=os.path.join(STORIES, "tokenizer.model"))
# The daemon and forward_dump run the same float32 CPU forward, but the daemon may chunk the prompt
# differently: logits then differ by ~1e-6. 1e-4 on a logprob leaves room for that, no more.
TOL = 1e-4
TIE = 1e-5  # reference logprobs closer than this may swap places in the daemon's ranking
C, H = "/v1/completions", "/v1/chat/completions"
# OpenMP's spinning workers cost forward_dump seconds a run on a loaded 2-core machine; passive
# waiting costs it nothing here (the run itself takes milliseconds).
DUMP_ENV = {**ENV, "OMP_WAIT_POLICY": "passive"}


def token_str(i):
    i = int(i)
    """A token as burstd shows it (README, "logprobs"), from SentencePiece's own binding."""
    if sp.is_byte(i):
        b = int(sp.id_to_piece(i)[3:5], 16)
        return chr(b) if 0 < b < 0x80 else "bytes:\\x%02x" % b
    return sp.id_to_piece(i).replace("\u2581", " ")


def token_bytes(i):
    i = int(i)
    return [int(sp.id_to_piece(i)[3:5], 16)] if sp.is_byte(i) else list(token_str(i).encode())


def ref_logits(prompt, fed):
    """float64 logits after prompt, then after each id of fed: len(fed)+1 rows."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "logits.bin")
        r = subprocess.run([os.path.join(BIN, "tests", "forward_dump"), STORIES, out, "512", "1",
                            *map(str, prompt), "--", *map(str, fed)], capture_output=True, text=True, env=DUMP_ENV,
                           timeout=60)
        if r.returncode:
            raise RuntimeError("forward_dump failed: " + r.stderr)
        return np.fromfile(out, dtype=np.float32).astype(np.float64).reshape(len(fed) + 1, -1)


def log_softmax(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def ref_logprobs(prompt, fed):
    """float64 log-softmax of the logits after prompt, then after each id of fed: len(fed)+1 rows."""
    return log_softmax(ref_logits(prompt, fed))


# Token strings back to ids, to feed the daemon's tokens to forward_dump (ordinary pieces win over
# byte pieces that show as the same character; greedy never picked one of those here).
ID_OF = {}
for i in range(sp.get_piece_size()):
    if token_str(i) not in ID_OF or not sp.is_byte(i):
        ID_OF[token_str(i)] = i


def greedy_ok(prompt, tokens, presence=0.0, frequency=0.0, bias=None, repetition=1.0):
    """Whether each token is the argmax of the reference logits after the prompt and the tokens
    before it, with the repetition penalty (Hugging Face's: the logits of the prompt's and the drawn
    tokens divided by it where positive, times it where not), OpenAI's penalties and logit bias
    applied: then the whole sequence is the reference's greedy one. Also returns the reference
    logprobs rows and the ids."""
    ids = [ID_OF[t] for t in tokens]
    logits = ref_logits(prompt, ids[:-1])
    for k, row in enumerate(logits):
        seen = np.zeros(len(row), bool)
        seen[list(prompt) + ids[:k]] = True
        x = np.where(seen, np.where(row > 0, row / repetition, row * repetition), row)
        counts = np.bincount(ids[:k], minlength=len(row))
        x = x - counts * frequency - (counts > 0) * presence
        for i, b in (bias or {}).items():
            x[int(i)] += b
        if int(np.argmax(x)) != ids[k]:
            return False, log_softmax(logits), ids
    return True, log_softmax(logits), ids


def ranking_ok(got, row):
    """got: [(token, logprob)], most likely first, against the reference row: same values in the same
    order, and each token the reference's at its place (or one tied with it)."""
    order = np.argsort(-row, kind="stable")
    for j, (tok, lp) in enumerate(got):
        tied = [k for k in order[:len(got) + 2] if abs(row[k] - row[order[j]]) < TIE]
        if abs(lp - row[order[j]]) > TOL or tok not in {token_str(k) for k in tied}:
            return False
    return True


def completion_entries(lp):
    """Completions' logprobs as [(token, logprob, [(alt token, logprob)] or None, offset)]."""
    return [(t, v, None if top is None else list(top.items()), off) for t, v, top, off in
            zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], lp["text_offset"])]


def chat_entries(lp):
    """Chats' logprobs as [(token, logprob, [(alt token, logprob)], bytes)]."""
    return [(e["token"], e["logprob"], [(a["token"], a["logprob"]) for a in e["top_logprobs"]], e["bytes"])
            for e in lp["content"]]


def streamed_entries(events, kind):
    """The logprobs entries of a stream's token chunks, in order, and how many each chunk carried."""
    out, per_chunk = [], []
    for e in events:
        if isinstance(e, dict) and e["choices"] and e["choices"][0]["finish_reason"] is None:
            got = (completion_entries if kind == C else chat_entries)(e["choices"][0]["logprobs"])
            out += got
            per_chunk.append(len(got))
    return out, per_chunk


def offsets_of(tokens, start=0):
    """text_offset as burstd counts it: characters of the tokens' strings before each."""
    out = []
    for t in tokens:
        out.append(start)
        start += len(t)
    return out


def check_against_ref(name, entries, prompt, n_top, kind):
    """Every entry against the reference: the greedy id, its logprob, its alternatives; bytes for chats."""
    greedy, rows, ids = greedy_ok(prompt, [e[0] for e in entries])
    bad = [] if greedy else ["not the reference's greedy sequence"]
    for k, (tok, lp, top, extra) in enumerate(entries):
        ok = abs(lp - rows[k][ids[k]]) <= TOL and len(top) == n_top
        ok = ok and ranking_ok(top, rows[k]) and (not top or (top[0][0] == tok and top[0][1] == lp))
        ok = ok and (kind == C or extra == token_bytes(ids[k]))
        if not ok:
            bad.append((k, tok, token_str(ids[k]), lp, rows[k][ids[k]], top[:3]))
    check(name, len(entries) > 0 and not bad, bad[:3])


# A prompt of several chunks: 203 tokens with --batch and --prefill-chunk 100 (a prompt alone takes
# whole --batch steps) run as chunks of 100, 100 and 3
# (on 3 ranks the first two are ring chunks, split zigzag; the last is replicated), and a chunk
# of 100 rows has its logits in blocks of 64 and 36.
CHUNK = 100
STORY = ("Once upon a time, there was a little dog named Max. Max liked to run in the big green park near his "
         "house. One day, Max saw a red ball under a tree. He ran to the ball and picked it up with his mouth. A "
         "girl named Sue came and said, \"That is my ball!\" Max was sad, but he gave the ball back to Sue. Sue "
         "smiled and threw the ball far away. Max ran and ran, and he brought the ball back. Sue and Max played "
         "all day, and they became best friends. The sun went down and the sky turned pink.")
LONG_IDS = [sp.bos_id()] + sp.encode(STORY)[:202]
# Row k: the log-softmax after LONG_IDS[0..k], which predicts LONG_IDS[k + 1].
LONG_ROWS = ref_logprobs(LONG_IDS[:1], LONG_IDS[1:-1])


def echo_entries_ok(lp, ids, rows, n_top):
    """What is wrong with echo's prompt entries (an empty list when nothing): the tokens are the
    prompt's, the first has null logprob and alternatives, every later one the reference's logprob
    with n_top alternatives ranked as the reference, most likely first; text_offset counts the
    tokens' characters; a token is its row's argmax exactly when its logprob is its alternatives'
    largest (how lm-eval reads greediness)."""
    n, bad = len(ids), []
    if lp["tokens"][:n] != [token_str(i) for i in ids]:
        bad.append(("tokens", lp["tokens"][:5]))
    if lp["token_logprobs"][0] is not None or lp["top_logprobs"][0] is not None:
        bad.append(("first entry not null", lp["token_logprobs"][0], lp["top_logprobs"][0]))
    if lp["text_offset"][:n] != offsets_of(lp["tokens"][:n]):
        bad.append(("text_offset", lp["text_offset"][:5]))
    for k in range(1, n):
        got, top, row = lp["token_logprobs"][k], lp["top_logprobs"][k], rows[k - 1]
        alts = list(top.items()) if isinstance(top, dict) else []
        ok = isinstance(got, float) and abs(got - row[ids[k]]) <= TOL and len(alts) == n_top
        ok = ok and ranking_ok(alts, row) and all(a[1] >= b[1] for a, b in zip(alts, alts[1:]))
        second = np.sort(row)[-2]
        if ok and n_top and row.max() - second > TIE:  # no near-tie at the top
            ok = (got == max(top.values())) == (int(np.argmax(row)) == ids[k])
        if not ok:
            bad.append((k, token_str(ids[k]), got, row[ids[k]], alts[:3]))
    return bad


def check_echo(srv, label):
    """Echo with logprobs of LONG_IDS on srv: whole, streamed, alone and followed by tokens."""
    ids, rows = LONG_IDS, LONG_ROWS
    base = {"prompt": ids, "echo": True, "temperature": 0}
    alone = {}
    for n_top in (0, 1, 5):
        steps = srv.metric("iteration_tokens_total_count")
        st, _, resp = srv.request("POST", C, {**base, "max_tokens": 0, "logprobs": n_top})
        steps = srv.metric("iteration_tokens_total_count") - steps
        check(f"{label} echo logprobs={n_top}: the prompt in 3 chunks ({steps:.0f} steps)", steps == 3)
        c = resp["choices"][0] if st == 200 else {"logprobs": None}
        lp = alone[n_top] = c["logprobs"]
        bad = echo_entries_ok(lp, ids, rows, n_top) if lp else ["no logprobs"]
        check(f"{label} echo logprobs={n_top} max_tokens 0: {len(ids)} prompt entries = reference",
              st == 200 and len(lp["tokens"]) == len(ids) and not bad, (st, bad[:3]))
        check(f"{label} echo logprobs={n_top} max_tokens 0: the prompt's text, finish length, usage",
              c.get("text") == sp.decode(ids) and c.get("finish_reason") == "length"
              and resp["usage"]["prompt_tokens"] == len(ids) and resp["usage"]["completion_tokens"] == 0,
              resp if st != 200 else (c.get("text", "")[:40], c.get("finish_reason"), resp["usage"]))
    st, events = srv.stream(C, {**base, "max_tokens": 0, "logprobs": 5})
    chunks = [e["choices"][0] for e in events if isinstance(e, dict) and e["choices"]]
    check(f"{label} echo streamed, max_tokens 0: one chunk with the prompt's text and its entries, then the end",
          st == 200 and len(chunks) == 2 and chunks[0]["text"] == sp.decode(ids) and chunks[0]["logprobs"] == alone[5]
          and chunks[1]["finish_reason"] == "length" and chunks[1]["logprobs"]["tokens"] == [],
          (st, [(c["text"][:20], len((c["logprobs"] or {}).get("tokens", []))) for c in chunks]))

    # Followed by tokens: the prompt's entries, then the same entries as without echo.
    gen = {"prompt": ids, "temperature": 0, "max_tokens": 8, "logprobs": 2}
    _, _, plain = srv.request("POST", C, gen)
    st, _, resp = srv.request("POST", C, {**gen, "echo": True})
    p, lp = plain["choices"][0], resp["choices"][0]["logprobs"]
    n = len(ids)
    check(f"{label} echo logprobs=2 max_tokens 8: prompt entries = reference, then the completion's",
          st == 200 and not echo_entries_ok(lp, ids, rows, 2) and lp["tokens"][n:] == p["logprobs"]["tokens"]
          and lp["token_logprobs"][n:] == p["logprobs"]["token_logprobs"]
          and lp["top_logprobs"][n:] == p["logprobs"]["top_logprobs"]
          and lp["text_offset"] == offsets_of(lp["tokens"])
          and resp["choices"][0]["text"] == sp.decode(ids) + p["text"]
          and resp["usage"]["completion_tokens"] == 8, (st, lp and lp["tokens"][n - 2:n + 2]))
    st, events = srv.stream(C, {**gen, "echo": True})
    chunks = [e["choices"][0] for e in events if isinstance(e, dict) and e["choices"]]
    entries = [x for c in chunks for x in completion_entries(c["logprobs"])]
    check(f"{label} echo streamed, max_tokens 8: the prompt's text and entries first, then a token a chunk, "
          "the whole response's entries",
          st == 200 and chunks[0]["text"] == sp.decode(ids) and len(chunks[0]["logprobs"]["tokens"]) == n
          and [len(c["logprobs"]["tokens"]) for c in chunks[1:]] == [1] * 8 + [0]
          and entries == completion_entries(lp) and stream_text(events) == resp["choices"][0]["text"],
          (st, [(c["text"][:20], len(c["logprobs"]["tokens"])) for c in chunks]))


# Repeated requests are compared bit for bit here, so the prefix cache is off: reusing a prompt's
# K/V changes float32 rounding (~1e-6; test_server_prefix checks the cache itself).
NO_CACHE = ("--prefix-cache", "off")
# Two threads: a chunk's prompt logprobs (echo) are taken row by row side by side (server/engine.c).
with Burstd(STORIES, "--prefill-chunk", str(CHUNK), "--batch", str(CHUNK), "--threads", "2", *NO_CACHE) as srv:
    def tokens(text):
        return srv.request("POST", "/tokenize", {"content": text, "add_special": True})[2]["tokens"]

    PROMPT = "Once upon a time"
    prompt_ids = tokens(PROMPT)
    chat_ids = tokens("[INST] Tell me a story [/INST]")  # the chat template of one user message
    MESSAGES = [{"role": "user", "content": "Tell me a story"}]
    N = 12

    # Completions: logprobs N, whole and streamed, against the reference.
    for n_top in (0, 1, 5):
        body = {"prompt": PROMPT, "max_tokens": N, "temperature": 0, "logprobs": n_top}
        st, _, resp = srv.request("POST", C, body)
        choice = resp["choices"][0]
        whole = completion_entries(choice["logprobs"])
        check_against_ref(f"completion logprobs={n_top}: tokens, logprobs, alternatives = reference", whole,
                          prompt_ids, n_top, C)
        offsets = [sum(len(t) for t, *_ in whole[:k]) for k in range(len(whole))]
        check(f"completion logprobs={n_top}: text = its tokens, text_offset counts characters",
              "".join(t for t, *_ in whole) == choice["text"] and [e[3] for e in whole] == offsets,
              (choice["text"], whole[:2]))
        st, events = srv.stream(C, body)
        streamed, per_chunk = streamed_entries(events, C)
        check(f"streamed completion logprobs={n_top}: one token a chunk, the whole response's entries",
              streamed == whole and per_chunk == [1] * N and stream_text(events) == choice["text"],
              (streamed[:2], whole[:2], per_chunk))

    # Chats: logprobs true with top_logprobs, whole and streamed.
    for n_top in (None, 0, 3, 20):
        body = {"messages": MESSAGES, "max_tokens": N, "temperature": 0, "logprobs": True}
        if n_top is not None:
            body["top_logprobs"] = n_top
        st, _, resp = srv.request("POST", H, body)
        whole = chat_entries(resp["choices"][0]["logprobs"])
        check_against_ref(f"chat top_logprobs={n_top}: tokens, logprobs, bytes, alternatives = reference", whole,
                          chat_ids, n_top or 0, H)
        st, events = srv.stream(H, body)
        streamed, per_chunk = streamed_entries(events, H)
        check(f"streamed chat top_logprobs={n_top}: one token a chunk, the whole response's entries",
              streamed == whole and per_chunk == [1] * N, (streamed[:2], whole[:2], per_chunk))
    st, _, resp = srv.request("POST", H, {"messages": MESSAGES, "max_tokens": 3, "logprobs": False})
    check("chat without logprobs: logprobs null", st == 200 and resp["choices"][0]["logprobs"] is None, resp)

    # Penalties: the penalized greedy sequence of the reference, and not the plain one.
    def greedy_tokens(body):
        st, _, resp = srv.request("POST", C, {"prompt": PROMPT, "temperature": 0, "logprobs": 0, **body})
        return resp["choices"][0] if st == 200 else {"text": None, "logprobs": {"tokens": [], "token_logprobs": []}}

    plain = greedy_tokens({"max_tokens": 40})
    check("plain greedy = the reference's", greedy_ok(prompt_ids, plain["logprobs"]["tokens"])[0], plain)
    for pen in ({"frequency_penalty": 2}, {"presence_penalty": 1.5, "frequency_penalty": -0.5},
                {"presence_penalty": -2}, {"repetition_penalty": 1.3}, {"repetition_penalty": 2, "frequency_penalty": 0.5}):
        got = greedy_tokens({"max_tokens": 40, **pen})
        ok, rows, ids = greedy_ok(prompt_ids, got["logprobs"]["tokens"], pen.get("presence_penalty", 0),
                                  pen.get("frequency_penalty", 0), repetition=pen.get("repetition_penalty", 1))
        check(f"{pen}: greedy = the reference's penalized greedy, logprobs of the raw logits",
              ok and len(ids) == 40 and np.allclose(got["logprobs"]["token_logprobs"], rows[np.arange(40), ids],
                                                    atol=TOL, rtol=0), got)
        check(f"{pen}: differs from plain greedy", got["text"] != plain["text"], got["text"])
        st, events = srv.stream(C, {"prompt": PROMPT, "temperature": 0, "max_tokens": 40, **pen})
        check(f"{pen}: streamed = whole", stream_text(events) == got["text"])

    # logit_bias: +100 forces a token; -100 on the greedy first token gives the runner-up.
    forced = 300
    got = greedy_tokens({"max_tokens": 8, "logit_bias": {str(forced): 100}})
    check("logit_bias +100: that token every time", got["logprobs"]["tokens"] == [token_str(forced)] * 8, got)
    first = ID_OF[plain["logprobs"]["tokens"][0]]
    got = greedy_tokens({"max_tokens": 4, "logit_bias": {str(first): -100}})
    check("logit_bias -100 on the greedy first token: the reference's greedy with that bias",
          greedy_ok(prompt_ids, got["logprobs"]["tokens"], bias={first: -100})[0]
          and got["logprobs"]["tokens"][0] != token_str(first), got)
    # top_k and min_p (vLLM's): every sampled token within the filter, read from the raw logprobs
    # (no bias or penalty here, so raw and sampled rankings agree). min_p keeps a token when its
    # tempered probability is at least min_p times the top one's: raw logprob gap <= -T log(min_p).
    got = greedy_tokens({"max_tokens": 30, "temperature": 1.5, "top_k": 1, "seed": 5})
    check("top_k 1 at temperature 1.5 = greedy", got["text"] == greedy_tokens({"max_tokens": 30})["text"], got["text"])
    got = greedy_tokens({"max_tokens": 40, "temperature": 2, "top_k": 3, "seed": 5, "logprobs": 3})
    lp = got["logprobs"]
    check("top_k 3 at temperature 2: each token among its position's 3 most likely",
          len(lp["tokens"]) == 40 and all(t in top for t, top in zip(lp["tokens"], lp["top_logprobs"])), lp["tokens"])
    got = greedy_tokens({"max_tokens": 40, "temperature": 2, "min_p": 0.3, "seed": 5, "logprobs": 1})
    lp = got["logprobs"]
    gaps = [max(top.values()) - v for v, top in zip(lp["token_logprobs"], lp["top_logprobs"])]
    check(f"min_p 0.3 at temperature 2: each token's gap to the top one <= -2 log 0.3 (largest {max(gaps):.2f})",
          len(gaps) == 40 and max(gaps) <= -2 * np.log(0.3) + 1e-4, gaps)

    # A byte-fallback token that is not UTF-8 alone: "bytes:\xe2" with its byte; its logprob is
    # the raw one (the bias is not in it), and it is not among the raw top alternatives.
    byte_e2 = sp.piece_to_id("<0xE2>")
    st, _, resp = srv.request("POST", H, {"messages": MESSAGES, "max_tokens": 1, "temperature": 0, "logprobs": True,
                                          "top_logprobs": 2, "logit_bias": {str(byte_e2): 100}})
    e = resp["choices"][0]["logprobs"]["content"][0]
    raw = ref_logprobs(chat_ids, [])[0]
    check("byte token: 'bytes:\\xe2', bytes [226], raw logprob, raw alternatives",
          e["token"] == "bytes:\\xe2" and e["bytes"] == [226] and abs(e["logprob"] - raw[byte_e2]) <= TOL
          and ranking_ok([(a["token"], a["logprob"]) for a in e["top_logprobs"]], raw), e)

    # echo: the prompt's text before the completion, whole and streamed (in the first chunk).
    st, _, plain_resp = srv.request("POST", C, {"prompt": PROMPT, "max_tokens": 10, "temperature": 0})
    text = plain_resp["choices"][0]["text"]
    st, _, resp = srv.request("POST", C, {"prompt": PROMPT, "max_tokens": 10, "temperature": 0, "echo": True})
    check("echo: prompt + completion", resp["choices"][0]["text"] == PROMPT + text, resp["choices"][0])
    st, events = srv.stream(C, {"prompt": PROMPT, "max_tokens": 10, "temperature": 0, "echo": True})
    check("echo streamed: the first chunk starts with the prompt", events[0]["choices"][0]["text"].startswith(PROMPT)
          and stream_text(events) == PROMPT + text, events[:2])
    st, _, resp = srv.request("POST", C, {"prompt": prompt_ids, "max_tokens": 10, "temperature": 0, "echo": True})
    check("echo of token ids: their decoded text", resp["choices"][0]["text"] == PROMPT + text, resp["choices"][0])

    # echo with logprobs: a text prompt's first entry is BOS, null.
    st, _, resp = srv.request("POST", C, {"prompt": PROMPT, "max_tokens": 0, "temperature": 0, "echo": True,
                                          "logprobs": 1})
    c = resp["choices"][0]
    check("echo of a text prompt with logprobs: its text, entries from BOS (null) on = reference",
          c["text"] == PROMPT and len(c["logprobs"]["tokens"]) == len(prompt_ids)
          and not echo_entries_ok(c["logprobs"], prompt_ids, ref_logprobs(prompt_ids[:1], prompt_ids[1:-1]), 1),
          c)
    check_echo(srv, "1 rank:")

    # Stop strings: the entries are those of the returned text's tokens. A stop string that begins
    # inside token k keeps k's entry (its text is cut short) and drops the tokens wholly inside it;
    # one that begins where token k begins drops k's entry too.
    toks, text = plain["logprobs"]["tokens"], plain["text"]
    offs = offsets_of(toks)
    for inside in (1, 0):
        k = next(k for k in range(4, len(toks) - 3) if len(toks[k]) >= 2 and len(toks[k + 1]) >= 1
                 and text.find(text[offs[k] + inside:offs[k + 2] + 1]) == offs[k] + inside)
        stop = text[offs[k] + inside:offs[k + 2] + 1]
        keep = k + inside
        body = {"prompt": PROMPT, "temperature": 0, "max_tokens": 40, "logprobs": 1, "stop": [stop]}
        st, _, resp = srv.request("POST", C, body)
        c = resp["choices"][0]
        what = "inside a token" if inside else "where a token begins"
        check(f"stop {stop!r} ({what}): text cut before it, entries of the first {keep} tokens",
              st == 200 and c["finish_reason"] == "stop" and c["text"] == text[:offs[k] + inside]
              and c["logprobs"]["tokens"] == toks[:keep]
              and c["logprobs"]["token_logprobs"] == plain["logprobs"]["token_logprobs"][:keep]
              and len(c["logprobs"]["top_logprobs"]) == keep, (c, toks[:keep + 2]))
        st, events = srv.stream(C, body)
        streamed, _ = streamed_entries(events, C)
        check(f"stop {stop!r} streamed: the same text and entries", stream_text(events) == c["text"]
              and streamed == completion_entries(c["logprobs"]), (streamed[-3:], c["logprobs"]["tokens"][-3:]))

    # stream_options.include_usage: true adds a last chunk with no choices; false or absent, none.
    # Greedy: an unseeded draw can end at EOS before max_tokens (finish_reason "stop").
    for path, body in ((C, {"prompt": PROMPT, "max_tokens": 5, "temperature": 0}),
                       (H, {"messages": MESSAGES, "max_tokens": 5, "temperature": 0})):
        for include in (True, False, None):
            b = {**body, "stream_options": {"include_usage": include}} if include is not None else body
            st, events = srv.stream(path, b)
            with_usage = [e for e in events[:-1] if "usage" in e]
            if include:
                ok = (len(with_usage) == 1 and with_usage[0] is events[-2] and events[-2]["choices"] == []
                      and events[-2]["usage"]["completion_tokens"] == 5
                      and events[-3]["choices"][0]["finish_reason"] == "length")
            else:
                ok = not with_usage and events[-2]["choices"][0]["finish_reason"] == "length"
            check(f"{path} include_usage={include}", st == 200 and ok and events[-1] == "[DONE]", events[-3:])

    # Bad values: 400 with an OpenAI-shaped error naming the field.
    P = {"prompt": PROMPT}
    M = {"messages": MESSAGES}
    cases = [
        (C, {**P, "logprobs": 6}, "'logprobs' must be an integer in [0, 5]"),
        (C, {**P, "logprobs": -1}, "'logprobs'"),
        (C, {**P, "logprobs": True}, "'logprobs' must be an integer"),
        (H, {**M, "logprobs": 3}, "'logprobs' must be a boolean"),
        (H, {**M, "logprobs": True, "top_logprobs": 21}, "'top_logprobs' must be an integer in [0, 20]"),
        (H, {**M, "top_logprobs": 2}, "'top_logprobs' needs 'logprobs': true"),
        (C, {**P, "presence_penalty": 3}, "'presence_penalty' must be a number in [-2, 2]"),
        (C, {**P, "repetition_penalty": 0}, "'repetition_penalty' must be in (0, 10]"),
        (H, {**M, "repetition_penalty": 11}, "'repetition_penalty' must be a number in [0, 10]"),
        (C, {**P, "top_k": -2}, "'top_k' must be an integer in [-1,"),
        (H, {**M, "min_p": 1.5}, "'min_p' must be a number in [0, 1]"),
        (H, {**M, "frequency_penalty": -2.5}, "'frequency_penalty' must be a number in [-2, 2]"),
        (C, {**P, "frequency_penalty": "2"}, "'frequency_penalty'"),
        (C, {**P, "logit_bias": {"abc": 1}}, "'logit_bias' keys must be token ids in [0, 512), not 'abc'"),
        (C, {**P, "logit_bias": {"512": 1}}, "'logit_bias' keys must be token ids in [0, 512), not '512'"),
        (C, {**P, "logit_bias": {"-1": 1}}, "'logit_bias' keys"),
        (C, {**P, "logit_bias": {"5": 200}}, "'logit_bias'['5'] must be a number in [-100, 100]"),
        (H, {**M, "logit_bias": {"5": "x"}}, "'logit_bias'['5'] must be a number"),
        (C, {**P, "logit_bias": [1]}, "'logit_bias' must be an object"),
        (C, {**P, "max_tokens": 0}, "'max_tokens' must be at least 1 (0 only with 'echo': true)"),
        (C, {**P, "max_tokens": 0, "echo": False}, "'max_tokens' must be at least 1"),
        (H, {**M, "max_tokens": 0}, "'max_tokens' must be at least 1"),
        (C, {**P, "max_tokens": -1, "echo": True}, "'max_tokens' must be an integer in [0, "),
        (C, {**P, "echo": "yes"}, "'echo' must be a boolean"),
        (C, {**P, "stream_options": {"include_usage": True}}, "'stream_options' is only allowed with 'stream': true"),
        (C, {**P, "stream": True, "stream_options": {"include_usage": 1}}, "'include_usage' must be a boolean"),
        (H, {**M, "stream": True, "stream_options": 3}, "'stream_options' must be an object"),
    ]
    for path, body, want in cases:
        st, _, err = srv.request("POST", path, body)
        e = err.get("error", {}) if isinstance(err, dict) else {}
        check(f"{path} {body} -> 400", st == 400 and want in e.get("message", "") and e.get("type")
              == "invalid_request_error" and "code" in e, (st, err))
    st, _, resp = srv.request("POST", C, {"prompt": PROMPT, "max_tokens": 5, "temperature": 0})
    check("a normal request after them", st == 200 and resp["choices"][0]["logprobs"] is None, resp)

# On 3 ranks: the first two chunks' rows are spread over the ranks (gathered for the logits).
with Burstd(STORIES, "--ranks", "3", "--prefill-chunk", str(CHUNK), "--batch", str(CHUNK), *NO_CACHE) as srv:
    check_echo(srv, "3 ranks:")
check.exit()
