"""32 concurrent streaming requests on one burstd (stories260K, 8 slots: 24 wait their turn) all
finish with the text `burst generate` gives greedily, and /metrics counts exactly 32 more
first-token observations; `burst load` against it reports percentiles and the server counts
exactly the tokens it asked for; with --shared-prefix its prompts share their first tokens, which
the prefix cache holds (as it reports from the usage and the server counts); with --rate its
requests go out at Poisson times, late when every client is busy; with --prompt-tokens MIN:MAX
the prompts' lengths vary, the same every run. On a random-weight
model, whose tokens often split a UTF-8 character, a stream has exactly one chunk per token before
its final chunk, which carries the text held back to the end: `burst load` counts tokens so."""
import json
import os
import re
import socket
import subprocess
import tempfile
import threading

from burstd_util import BIN, MODELS, STORIES, Burstd, Checks, generate, need_stories, stream_text
from make_random_model import write_model

need_stories()
check = Checks()
PROMPTS = ["Once upon a time", "Lily and Tom", "The cat sat", "One day, a big dog",
           "The sun was", "Sam had a red", "A little bird", "Mom said"]
N, MAX_TOKENS = 32, 48
refs = {p: generate(STORIES, p, MAX_TOKENS) for p in PROMPTS}

reports = tempfile.TemporaryDirectory()  # burst load --json's
with Burstd(STORIES, "--slots", "8", "--max-queue", "64") as srv:
    ttft_before = srv.metric("time_to_first_token_seconds_count")
    results = [None] * N
    start = threading.Barrier(N)

    def client(i):
        start.wait()
        body = {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": MAX_TOKENS, "temperature": 0}
        results[i] = srv.stream("/v1/completions", body)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(N)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    wrong = [i for i, r in enumerate(results)
             if r is None or r[0] != 200 or r[1][-1] != "[DONE]" or stream_text(r[1]) != refs[PROMPTS[i % len(PROMPTS)]]]
    check(f"{N} concurrent streams: full, correct output", not wrong,
          [(i, results[i] and stream_text(results[i][1])) for i in wrong[:3]])
    ttft_after = srv.metric("time_to_first_token_seconds_count")
    check(f"/metrics counts {N} more first tokens", ttft_after - ttft_before == N, (ttft_before, ttft_after))
    check("nothing left running or waiting", srv.metric("num_requests_running") == 0
          and srv.metric("num_requests_waiting") == 0)
    check("queue time observed for each", srv.metric("request_queue_time_seconds_count") == N)

    # burst load: client-side percentiles; every request exactly P prompt and M generated tokens.
    gen_before, prompt_before = srv.metric("generation_tokens_total"), srv.metric("prompt_tokens_total")
    report = os.path.join(reports.name, "load.json")
    r = subprocess.run([os.path.join(BIN, "burst"), "load", "--url", srv.url, "--concurrency", "4", "--requests", "8",
                        "--prompt-tokens", "20", "--max-tokens", "10", "--json", report, "--slo-ttft", "60"],
                       capture_output=True, text=True, timeout=120)
    check("burst load runs", r.returncode == 0 and "time to first token s" in r.stdout
          and "inter-token latency s" in r.stdout and "p99" in r.stdout and "output tokens/s" in r.stdout,
          (r.returncode, r.stdout, r.stderr))
    with open(report) as f:
        numbers = json.load(f)
    row = [float(x) for x in re.search(r"time to first token s((?:\s+[\d.]+){4})", r.stdout).group(1).split()]
    got = numbers["time_to_first_token_s"]
    check("--json: the table's numbers", numbers["requests"] == 8 and numbers["failed"] == 0
          and numbers["output_tokens"] == 80 and numbers["prompt_tokens"] == 160 and got["n"] == 8
          and numbers["inter_token_latency_s"]["n"] == 72
          and [round(got[k], 4) for k in ("p50", "p90", "p99", "mean")] == row, (numbers, row))
    check("--slo-ttft 60: met by all 8", "TTFT SLO 60.000 s: met by 8 of 8 requests (100.0%)" in r.stdout
          and numbers["slo_met"] == 8, r.stdout)
    check("burst load: exact token counts", srv.metric("generation_tokens_total") - gen_before == 80
          and srv.metric("prompt_tokens_total") - prompt_before == 160)
    gen_before = srv.metric("generation_tokens_total")
    r = subprocess.run([os.path.join(BIN, "burst"), "load", "--url", srv.url, "--requests", "4", "--max-tokens", "8",
                        "--temperature", "0.8"], capture_output=True, text=True, timeout=120)
    check("burst load --temperature 0.8: every request sampled to its 8 tokens", r.returncode == 0
          and "temperature 0.8, " in r.stdout and srv.metric("generation_tokens_total") - gen_before == 32,
          (r.returncode, r.stdout, r.stderr))
    r = subprocess.run([os.path.join(BIN, "burst"), "load", "--url", srv.url, "--temperature", "3"],
                       capture_output=True, text=True, timeout=60)
    check("burst load: --temperature 3 is refused", r.returncode == 2 and "want a number in [0, 2]" in r.stderr, r.stderr)
    r = subprocess.run([os.path.join(BIN, "burst"), "load", "--url", srv.url, "--requests", "4", "--max-tokens", "2",
                        "--slo-ttft", "0.000001"], capture_output=True, text=True, timeout=120)
    check("--slo-ttft 0.000001: met by none", "met by 0 of 4 requests (0.0%)" in r.stdout, r.stdout)
    r = subprocess.run([os.path.join(BIN, "burst"), "load", "--url", srv.url, "--requests", "1", "--max-tokens", "2",
                        "--json", os.path.join(reports.name, "no", "such", "dir.json")], capture_output=True, text=True)
    check("--json into a missing directory: exit 2, saying why", r.returncode == 2
          and "No such file or directory" in r.stderr, (r.returncode, r.stderr))
    # A shared 16-token prefix: after the first requests, the prefix cache holds it for the rest.
    hits_before = srv.metric("prefix_cache_hits_total")
    r = subprocess.run([os.path.join(BIN, "burst"), "load", "--url", srv.url, "--concurrency", "1", "--requests", "4",
                        "--prompt-tokens", "20", "--shared-prefix", "16", "--max-tokens", "4"],
                       capture_output=True, text=True, timeout=120)
    got = re.search(r"prefix cache: (\d+) of 80 prompt tokens cached", r.stdout)
    hits = srv.metric("prefix_cache_hits_total") - hits_before
    check(f"burst load --shared-prefix 16: one at a time, requests 2-4 reuse the prefix ({got and got.group(1)} "
          f"cached; the server counts {hits:.0f})", r.returncode == 0 and "(16 shared)" in r.stdout and got
          and int(got.group(1)) == hits >= 3 * 16, (r.stdout, r.stderr))
    # --rate: requests due at Poisson times. The run lasts at least until the last is due; one
    # client cannot keep up with 1000 a second, so requests go out late and the report says so.
    gen_before = srv.metric("generation_tokens_total")
    r = subprocess.run([os.path.join(BIN, "burst"), "load", "--url", srv.url, "--rate", "40", "--concurrency", "12",
                        "--requests", "12", "--prompt-tokens", "20", "--max-tokens", "4"],
                       capture_output=True, text=True, timeout=120)
    span = re.search(r"arrivals: 40.00 requests/s \(Poisson\) over ([\d.]+) s; \d+ sent more than 10 ms late", r.stdout)
    wall = re.search(r"tokens each, ([\d.]+) s", r.stdout)
    check(f"burst load --rate 40: 12 requests due over {span and span.group(1)} s, run {wall and wall.group(1)} s",
          r.returncode == 0 and span and wall and float(wall.group(1)) >= float(span.group(1)) > 0
          and srv.metric("generation_tokens_total") - gen_before == 48, (r.stdout, r.stderr))
    # 64 tokens a request, not 16: the 16 arrivals are due within 15 ms, and with 16 tokens the
    # latest went out only 16 to 48 ms late on a loaded 2-core Xeon (~3 ms a request), so a machine
    # twice as fast would send none 10 ms late; with 64 it is ~100 ms.
    r = subprocess.run([os.path.join(BIN, "burst"), "load", "--url", srv.url, "--rate", "1000", "--concurrency", "1",
                        "--requests", "16", "--prompt-tokens", "20", "--max-tokens", "64"],
                       capture_output=True, text=True, timeout=120)
    late = re.search(r"(\d+) sent more than 10 ms late, all 1 clients being busy", r.stdout)
    check(f"burst load --rate 1000 with one client: {late and late.group(1)} requests sent late",
          r.returncode == 0 and late and int(late.group(1)) >= 1, (r.stdout, r.stderr))
    # --prompt-tokens MIN:MAX: each prompt's length drawn from the range, the same every run; the
    # report's prompt total is what the server counted.
    runs = []
    for _ in range(2):
        prompt_before = srv.metric("prompt_tokens_total")
        r = subprocess.run([os.path.join(BIN, "burst"), "load", "--url", srv.url, "--requests", "8",
                            "--prompt-tokens", "10:40", "--max-tokens", "2"], capture_output=True, text=True, timeout=120)
        total = re.search(r"prefix cache: \d+ of (\d+) prompt tokens", r.stdout)
        runs.append((r.returncode, total and int(total.group(1)), srv.metric("prompt_tokens_total") - prompt_before))
    check(f"burst load --prompt-tokens 10:40: prompts of drawn lengths, {runs[0][1]} tokens in all as the server "
          f"counts, the same both runs", runs[0] == runs[1] and runs[0][0] == 0 and runs[0][1] == runs[0][2]
          and 8 * 10 < runs[0][1] < 8 * 40 and "prompt 10..40 tokens" in r.stdout, (runs, r.stdout, r.stderr))
    r = subprocess.run([os.path.join(BIN, "burst"), "load", "--url", srv.url, "--prompt-tokens", "40:10"],
                       capture_output=True, text=True, timeout=60)
    check("burst load: --prompt-tokens 40:10 is refused", r.returncode == 2 and "want P or MIN:MAX" in r.stderr, r.stderr)
    r = subprocess.run([os.path.join(BIN, "burst"), "load", "--url", srv.url, "--rate", "-1"],
                       capture_output=True, text=True, timeout=60)
    check("burst load: a negative --rate is refused", r.returncode == 2 and "--rate -1" in r.stderr, r.stderr)
    r = subprocess.run([os.path.join(BIN, "burst"), "load", "--url", srv.url, "--prompt-tokens", "8",
                        "--shared-prefix", "9"], capture_output=True, text=True, timeout=60)
    check("burst load: --shared-prefix past --prompt-tokens is refused", r.returncode == 2
          and "--shared-prefix 9 is longer than the shortest prompt (--prompt-tokens 8)" in r.stderr,
          (r.returncode, r.stderr))
    r = subprocess.run([os.path.join(BIN, "burst"), "load", "--url", srv.url + "/nowhere", "--requests", "2"],
                       capture_output=True, text=True, timeout=60)
    check("burst load reports failures", r.returncode == 1 and "status 404" in r.stderr, (r.returncode, r.stderr))

with tempfile.TemporaryDirectory() as tmp:
    write_model(tmp, dim=64, hidden=172, layers=2, heads=4, kv_heads=2, vocab=512, max_seq=256,
                tokenizer=os.path.join(STORIES, "tokenizer.model"))
    with Burstd(tmp, "--slots", "4") as srv:
        bad, split = [], 0
        for prompt in PROMPTS:
            body = {"prompt": prompt, "max_tokens": 40, "temperature": 0, "ignore_eos": True}
            status, events = srv.stream("/v1/completions", {**body, "stream_options": {"include_usage": True}})
            _, _, whole = srv.request("POST", "/v1/completions", body)
            chunks = [e for e in events if isinstance(e, dict) and e.get("choices")]
            usage = [e["usage"] for e in events if isinstance(e, dict) and e.get("usage")]
            if not (status == 200 and usage and len(chunks) == usage[0]["completion_tokens"] + 1
                    and chunks[-1]["choices"][0]["finish_reason"] == "length"
                    and all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
                    and stream_text(events) == whole["choices"][0]["text"]):
                bad.append((prompt, len(chunks), usage, chunks[-2:]))
            split += "\ufffd" in whole["choices"][0]["text"]
        check(f"random model: each stream has a chunk per token, then the final chunk, with the whole "
              f"response's text ({split} of {len(PROMPTS)} hold split characters)", not bad and split, bad[:2])
        r = subprocess.run([os.path.join(BIN, "burst"), "load", "--url", srv.url, "--concurrency", "4", "--requests",
                            "8", "--prompt-tokens", "20", "--max-tokens", "16"], capture_output=True, text=True,
                           timeout=120)
        check("random model: burst load counts exactly 16 tokens in every stream",
              r.returncode == 0 and "8 requests (0 failed)" in r.stdout and not r.stderr,
              (r.stdout, r.stderr))

# Steps and their tokens (iteration_tokens_total): a 3000-token prompt alone takes whole steps of
# --batch 512 (6 steps); beside a decoding request, chunks of --prefill-chunk 200 (every step at
# most 201 tokens, none in the buckets past 256).
def steps(srv):
    """(count, sum, steps of more than 256 tokens) of iteration_tokens_total."""
    _, _, text = srv.request("GET", "/metrics")
    get = lambda pat: float(re.search(r"burst:iteration_tokens_total" + pat + r" (\S+)", text).group(1))
    count = get(r"_count\{[^}]*\}")
    return count, get(r"_sum\{[^}]*\}"), count - get(r'_bucket\{[^}]*le="256"\}')


with tempfile.TemporaryDirectory() as tmp:
    write_model(tmp, dim=64, hidden=172, layers=2, heads=4, kv_heads=2, vocab=512, max_seq=4096,
                tokenizer=os.path.join(STORIES, "tokenizer.model"))
    LONG = [1] + [3 + i % 250 for i in range(2999)]
    with Burstd(tmp, "--slots", "2", "--batch", "512", "--prefill-chunk", "200", "--prefix-cache", "off") as srv:
        before = steps(srv)
        status, _, _ = srv.request("POST", "/v1/completions", {"prompt": LONG, "max_tokens": 1})
        after = steps(srv)
        check(f"a prompt alone: whole steps of --batch (steps {after[0] - before[0]:.0f}, tokens {after[1] - before[1]:.0f})",
              status == 200 and after[0] - before[0] == 6 and after[1] - before[1] == 3000, (before, after))
        c = srv.connect()
        c.request("POST", "/v1/completions", body=json.dumps({"prompt": [1, 5, 6], "max_tokens": 4000 - 4,
                  "ignore_eos": True, "stream": True}), headers={"Content-Type": "application/json"})
        resp = c.getresponse()
        resp.readline()  # decoding now
        before = steps(srv)
        status, _, _ = srv.request("POST", "/v1/completions", {"prompt": LONG, "max_tokens": 1})
        after = steps(srv)
        c.close()
        check(f"beside a decoding request: chunks of --prefill-chunk ({after[0] - before[0]:.0f} steps, "
              f"{after[2] - before[2]:.0f} of more than 256 tokens)",
              status == 200 and after[0] - before[0] >= 15 and after[2] == before[2], (before, after))


# burst load against a server that answers HTTP/1.0 in chunks and keeps the connection open, as
# llama.cpp's llama-server does, with the usage in the final chunk and two tokens in one event (it
# holds back a token that splits a UTF-8 character): the chunks are decoded (sizes split across
# sends, an extension, events split across chunks), the last one ends the response (a client
# waiting for the server to close would hang here), and the usage counts the tokens. A chunk size
# line without a size fails its request, with the reason, and ends it (the connection stays open).
def fake_llama_server(sock, requests, max_tokens, bad_size=False):
    conns = []
    for _ in range(requests):
        conn, _ = sock.accept()
        conns.append(conn)
        head = b""
        while b"\r\n\r\n" not in head:
            head += conn.recv(65536)
        length = int(re.search(rb"Content-Length: (\d+)", head).group(1))
        body = head.split(b"\r\n\r\n", 1)[1]
        while len(body) < length:
            body += conn.recv(65536)
        events = [{"choices": [{"text": f" t{i}", "index": 0, "finish_reason": None}]} for i in range(max_tokens - 1)]
        events.append({"choices": [{"text": "", "index": 0, "finish_reason": "length"}],
                       "usage": {"completion_tokens": max_tokens, "prompt_tokens": 20}})
        stream = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                     b"Keep-Alive: timeout=5, max=100\r\n\r\n")
        if bad_size:
            conn.sendall(b"zz\r\n" + stream)
            continue
        for i, at in enumerate(range(0, len(stream), 37)):  # chunks of 37 bytes: events cut anywhere
            piece = stream[at:at + 37]
            size = b"%x" % len(piece) + (b";ext=1" if i == 1 else b"") + b"\r\n"
            conn.sendall(size[:1])  # a size line split across sends
            conn.sendall(size[1:] + piece + b"\r\n")
        conn.sendall(b"0\r\n\r\n")
    return conns


with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    out = {}
    server = threading.Thread(target=lambda: out.update(conns=fake_llama_server(sock, 2, 5)), daemon=True)
    server.start()
    try:
        report = os.path.join(reports.name, "chunked.json")
        r = subprocess.run([os.path.join(BIN, "burst"), "load", "--url", f"http://127.0.0.1:{sock.getsockname()[1]}",
                            "--concurrency", "1", "--requests", "2", "--max-tokens", "5", "--prompt-tokens", "20",
                            "--json", report], capture_output=True, text=True, timeout=60)
        ok = (r.returncode == 0 and "2 requests (0 failed)" in r.stdout and re.search(r"inter-token latency s .* 6\n", r.stdout)
              and json.load(open(report))["output_tokens"] == 10)
        check("burst load against a chunked, keep-alive server (llama.cpp's way)", ok, r.stdout + r.stderr)
    except subprocess.TimeoutExpired as e:
        check("burst load against a chunked, keep-alive server (llama.cpp's way)", False, f"hung: {e}")
    server.join(10)
    for c in out.get("conns", []):
        c.close()
    server = threading.Thread(target=lambda: out.update(conns=fake_llama_server(sock, 1, 5, bad_size=True)), daemon=True)
    server.start()
    try:
        r = subprocess.run([os.path.join(BIN, "burst"), "load", "--url", f"http://127.0.0.1:{sock.getsockname()[1]}",
                            "--requests", "1", "--max-tokens", "5", "--prompt-tokens", "20"],
                           capture_output=True, text=True, timeout=60)
        check("burst load: a chunk size line without a size fails the request, with why",
              r.returncode == 1 and "1 requests (1 failed)" in r.stdout and "a chunk without a size" in r.stderr,
              (r.returncode, r.stdout, r.stderr))
    except subprocess.TimeoutExpired as e:
        check("burst load: a chunk size line without a size fails the request, with why", False, f"hung: {e}")
    server.join(10)
    for c in out.get("conns", []):
        c.close()
check.exit()
