"""32 concurrent streaming requests on one burstd (stories260K, 8 slots: 24 wait their turn) all
finish with the text `burst generate` gives greedily, and /metrics counts exactly 32 more
first-token observations; `burst load` against it reports percentiles and the server counts
exactly the tokens it asked for; with --shared-prefix its prompts share their first tokens, which
the prefix cache holds (as it reports from the usage and the server counts)."""
import os
import re
import subprocess
import threading

from burstd_util import BIN, STORIES, Burstd, Checks, generate, need_stories, stream_text

need_stories()
check = Checks()
PROMPTS = ["Once upon a time", "Lily and Tom", "The cat sat", "One day, a big dog",
           "The sun was", "Sam had a red", "A little bird", "Mom said"]
N, MAX_TOKENS = 32, 48
refs = {p: generate(STORIES, p, MAX_TOKENS) for p in PROMPTS}

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
    r = subprocess.run([os.path.join(BIN, "burst"), "load", "--url", srv.url, "--concurrency", "4", "--requests", "8",
                        "--prompt-tokens", "20", "--max-tokens", "10"], capture_output=True, text=True, timeout=120)
    check("burst load runs", r.returncode == 0 and "time to first token s" in r.stdout
          and "inter-token latency s" in r.stdout and "p99" in r.stdout and "output tokens/s" in r.stdout,
          (r.returncode, r.stdout, r.stderr))
    check("burst load: exact token counts", srv.metric("generation_tokens_total") - gen_before == 80
          and srv.metric("prompt_tokens_total") - prompt_before == 160)
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
    r = subprocess.run([os.path.join(BIN, "burst"), "load", "--url", srv.url, "--prompt-tokens", "8",
                        "--shared-prefix", "9"], capture_output=True, text=True, timeout=60)
    check("burst load: --shared-prefix past --prompt-tokens is refused", r.returncode == 2
          and "--shared-prefix 9 is longer than --prompt-tokens 8" in r.stderr, (r.returncode, r.stderr))
    r = subprocess.run([os.path.join(BIN, "burst"), "load", "--url", srv.url + "/nowhere", "--requests", "2"],
                       capture_output=True, text=True, timeout=60)
    check("burst load reports failures", r.returncode == 1 and "status 404" in r.stderr, (r.returncode, r.stderr))
check.exit()
