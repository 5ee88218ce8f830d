"""Cancel and overload on a random-weight model slow enough to watch (a few ms per token on one
CPU thread): with one KV slot and --max-queue 2, a long streamed request runs, two more wait,
a fourth gets 429 at once; the long request's client disconnects after its first tokens, the log
says it was cancelled (having generated far fewer tokens than asked), and the waiting requests are
served at once instead of after the long request would have finished."""
import os
import tempfile
import threading
import time
import json

from burstd_util import MODELS, Burstd, Checks, need_stories
from make_random_model import write_model

need_stories()
check = Checks()
LONG = 3000

with tempfile.TemporaryDirectory() as tmp:
    write_model(tmp, dim=256, hidden=768, layers=4, heads=8, kv_heads=4, vocab=512, max_seq=4096,
                tokenizer=os.path.join(MODELS, "stories260K", "tokenizer.model"))
    with Burstd(tmp, "--slots", "1", "--max-queue", "2") as srv:
        a = srv.connect()
        a.request("POST", "/v1/completions", body=json.dumps({
            "prompt": "Once upon a time", "max_tokens": LONG, "temperature": 0, "ignore_eos": True,
            "stream": True}), headers={"Content-Type": "application/json"})
        ra = a.getresponse()
        first = ra.readline()
        check("long request streams", ra.status == 200 and first.startswith(b"data: "), first)

        done = {}
        def waiter(name):
            st, _, body = srv.request("POST", "/v1/completions", {"prompt": "Once", "max_tokens": 3, "temperature": 0})
            done[name] = (st, body, time.time())
        waiters = [threading.Thread(target=waiter, args=(n,)) for n in ("b", "c")]
        for t in waiters:
            t.start()
        deadline = time.time() + 30
        while srv.request("GET", "/health")[2]["waiting"] < 2 and time.time() < deadline:
            time.sleep(0.01)
        check("two requests wait for the slot", srv.metric("num_requests_waiting") == 2
              and srv.metric("num_requests_running") == 1)

        t0 = time.time()
        st, hdr, body = srv.request("POST", "/v1/completions", {"prompt": "Once", "max_tokens": 3})
        check("past --max-queue: 429 at once, with Retry-After", st == 429 and time.time() - t0 < 2
              and hdr.get("Retry-After") and body["error"]["code"] == "queue_full", (st, hdr, body))

        a.close()  # the client goes away mid-stream
        t_close = time.time()
        for t in waiters:
            t.join(120)
        m = srv.wait_log(r"cmpl-\d+ \| cancelled \(client gone\) while decoding: prompt \d+ tokens \(\d+ cached\), generated (\d+) tokens, "
                         r"queue [\d.]+ s, ttft [\d.]+ s, total ([\d.]+) s")
        check("the cancel is logged", m is not None, srv.log()[-800:])
        if m:
            n_gen, total = int(m.group(1)), float(m.group(2))
            remaining = (LONG - n_gen) * total / max(n_gen, 1)  # what the long request still had to do
            waited = max(done[n][2] for n in done) - t_close if len(done) == 2 else float("inf")
            check(f"stopped early ({n_gen} of {LONG} tokens)", n_gen < LONG // 2, n_gen)
            check(f"waiting requests served at once ({waited:.3f} s, not ~{remaining:.1f} s)",
                  all(d[0] == 200 and d[1]["choices"][0]["finish_reason"] == "length" for d in done.values())
                  and waited < remaining / 2, (done, waited, remaining))
        check("metrics count the cancel and the rejection", srv.metric('request_cancelled_total{reason="decode"') == 1
              and srv.metric("request_rejected_total") == 1 and srv.metric("num_requests_running") == 0)
check.exit()
